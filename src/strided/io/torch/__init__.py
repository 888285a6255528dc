"""The PyTorch family: ``torch.save`` files, TorchScript archives and distributed checkpoints.

``_pytorch`` reads zip and legacy ``torch.save`` files; ``_torchscript`` reads
``torch.jit.save`` archives, with ``_torchscript_code`` parsing the class declarations
of their code; ``_dcp`` reads ``torch.distributed.checkpoint`` folders, with
``_dcp_metadata`` reading the ``.metadata`` pickle and ``_dcp_grid`` fitting the saved
chunks together. Every pickle is read by the interpreter of ``io.pickle``, which runs
nothing. The rest of the package uses only the names below.
"""

from ._dcp import DcpFile, open_dcp
from ._pytorch import PyTorchFile, load_pytorch, open_pytorch
from ._torchscript import is_torchscript, open_torchscript

__all__ = [
    "DcpFile",
    "PyTorchFile",
    "is_torchscript",
    "load_pytorch",
    "open_dcp",
    "open_pytorch",
    "open_torchscript",
]
