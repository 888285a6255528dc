"""The version of strided (the package's ``__version__``; the command's ``--version``
when strided runs from a source tree rather than an installed distribution)."""

__all__ = ["VERSION"]

VERSION = "0.4.0"
