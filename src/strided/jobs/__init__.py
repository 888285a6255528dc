"""Whole-checkpoint work: the checkpoint door, digests, diff, export, the ``--jobs`` and
Dask engines. Imports ``io`` and the layers below it, never ``cli``."""
