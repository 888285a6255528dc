"""Arrays in, arrays out: exact kernels that know no Tensor (checked ints, conversion,
sums, matmul, comparison, text, DLPack capsules, digests). Imports only ``_core``."""
