"""The Tensor class, its construction and its method mixins. Imports only ``_kernels``
and ``_core``; never ``io`` or ``jobs``."""
