"""How the chunks of a distributed-checkpoint tensor tile it, and reading it through them.

Each tensor of a DCP checkpoint is stored as chunks, boxes given by offsets and sizes
along every dim. The distinct chunk boundaries along each dim cut the tensor into a
grid of cells; every chunk is a union of whole cells. ``Grid`` records which chunk owns
each cell, which proves that the chunks cover the tensor exactly once (a cell owned
twice is an overlap, a cell owned by none a gap) in time and memory linear in the
cells, never in the elements. DCP writes grids (one cell per chunk: FSDP splits dim 0,
tensor parallelism adds a split of another dim), so the cells stay few; a layout whose
cells exceed ``MAX_DCP_GRID_CELLS`` is a LimitError.

The grid then answers, without touching elements: which chunk holds a flat position
(``owners``: inspection reads only the chunks holding samples), and which chunks a box
of whole rows touches (``rows``: a tensor is streamed in logical row-major order as
blocks of rows, each a zero-copy view of one chunk when it lies inside one, else
assembled from the chunks it touches into a bounded buffer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..._core.errors import FormatError, LimitError
from ..._core.limits import MAX_DCP_GRID_CELLS
from .._budget import ITEM_BYTES, ParseBudget
from ._dcp_metadata import TensorEntry

__all__ = ["BLOCK_BYTES", "Grid"]

# Assembled blocks (rows gathered from several chunks) are at most this big.
BLOCK_BYTES = 1 << 22
# Zero-copy views of one chunk are handed out in steps of at most this size.
_VIEW_BYTES = 1 << 26

ChunkArray = Callable[[int], np.ndarray[Any, Any]]


class Grid:
    """The cells a tensor's chunk boundaries make, and the chunk owning each.

    ``bounds[d]`` are the sorted distinct boundaries along dim ``d`` (0 and the dim
    included); ``owner`` has one int32 per cell, the index of the chunk that covers it.
    Built by ``Grid.check``; chunks of no elements own no cells.
    """

    __slots__ = ("bounds", "dims", "owner")

    def __init__(
        self, dims: tuple[int, ...], bounds: list[np.ndarray[Any, Any]], owner: np.ndarray[Any, Any]
    ) -> None:
        self.dims = dims
        self.bounds = bounds
        self.owner = owner

    @classmethod
    def check(cls, entry: TensorEntry, where: str, budget: ParseBudget) -> Grid:
        """The grid of ``entry``'s chunks, once they cover it exactly once.

        The chunks already lie inside the tensor (``_dcp_metadata``). A gap or an
        overlap is a FormatError naming the first element (row-major by cell) left
        out or covered twice; more than ``MAX_DCP_GRID_CELLS`` cells (or more than 64
        per chunk) a LimitError. The grid's memory is charged to ``budget``.
        """
        dims = entry.dims
        chunks = entry.chunks
        bounds = []
        for axis, dim in enumerate(dims):
            found = {0, dim}
            for chunk in chunks:
                found.add(chunk.offsets[axis])
                found.add(chunk.offsets[axis] + chunk.sizes[axis])
            bounds.append(np.array(sorted(found), dtype=np.int64))
        counts = [
            max(len(edges) - 1, 0) if dim else 0 for edges, dim in zip(bounds, dims, strict=True)
        ]
        cells = math.prod(counts)
        if cells > min(MAX_DCP_GRID_CELLS, 64 * len(chunks) + 4096):
            raise LimitError(
                f"{where}: its {len(chunks)} chunks cut it into {cells} cells; strided checks "
                f"layouts of at most 64 cells per chunk and {MAX_DCP_GRID_CELLS} in all"
            )
        budget.charge(4 * cells + ITEM_BYTES * sum(counts) + 64, "chunk grids")
        owner = np.full(counts, -1, dtype=np.int32)
        grid = cls(dims, bounds, owner)
        if cells == 0:
            return grid
        for index, chunk in enumerate(chunks):
            if 0 in chunk.sizes:
                continue
            box = grid._cells(chunk.offsets, chunk.sizes)
            region = owner[box]
            if (region >= 0).any():
                cell = np.argwhere(region >= 0)[0]
                element = grid._element([s.start + int(c) for s, c in zip(box, cell, strict=True)])
                other = entry.chunks[int(region[tuple(cell)])]
                raise FormatError(
                    f"{where}: chunks at {list(other.offsets)} and {list(chunk.offsets)} "
                    f"overlap (both hold element {element})"
                )
            owner[box] = index
        if (owner < 0).any():
            element = grid._element([int(c) for c in np.argwhere(owner < 0)[0]])
            raise FormatError(f"{where}: no chunk holds element {element} (the chunks leave a gap)")
        return grid

    def _cells(self, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
        """The cell slices of a box that is a union of whole cells."""
        box = []
        for edges, start, size in zip(self.bounds, offsets, sizes, strict=True):
            low = int(np.searchsorted(edges, start))
            high = int(np.searchsorted(edges, start + size))
            box.append(slice(low, high))
        return tuple(box)

    def _element(self, cell: list[int]) -> list[int]:
        """The first element (lowest corner) of a cell."""
        return [int(edges[index]) for edges, index in zip(self.bounds, cell, strict=True)]

    def owners(self, coords: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The chunk index holding each row of ``coords`` (an (n, rank) int64 array)."""
        if not self.dims:
            return np.full(len(coords), int(self.owner[()]), dtype=np.int32)
        cells = tuple(
            np.searchsorted(edges, coords[:, axis], side="right") - 1
            for axis, edges in enumerate(self.bounds)
        )
        found: np.ndarray[Any, Any] = self.owner[cells]
        return found

    def rows(
        self, entry: TensorEntry, array_of: ChunkArray, start: int, stop: int
    ) -> Iterator[np.ndarray[Any, Any]]:
        """Flat logical elements ``[start, stop)`` as 1-D pieces in row-major order.

        ``array_of(i)`` gives chunk ``i``'s values (shape = its sizes). A piece inside
        one chunk whose memory is contiguous is a zero-copy view of it; otherwise rows
        are assembled into a fresh buffer of at most ``BLOCK_BYTES`` (or one row of the
        innermost dim split by a chunk boundary). Memory stays bounded whatever the
        tensor's size.
        """
        dims = self.dims
        if start >= stop:
            return
        if not dims:
            yield array_of(int(self.owner[()])).reshape(1)[start:stop]
            return
        itemsize = entry.dtype.itemsize
        yield from self._walk(entry, array_of, (), 0, start, stop, itemsize)

    def _walk(
        self,
        entry: TensorEntry,
        array_of: ChunkArray,
        prefix: tuple[int, ...],
        base: int,
        start: int,
        stop: int,
        itemsize: int,
    ) -> Iterator[np.ndarray[Any, Any]]:
        """Rows along dim ``len(prefix)`` with the leading indices fixed to ``prefix``;
        ``base`` is the flat position of the first of them."""
        dims = self.dims
        axis = len(prefix)
        row = math.prod(dims[axis + 1 :])
        low = max(0, (start - base) // row)
        high = min(dims[axis], -(-(stop - base) // row))
        if row * itemsize > BLOCK_BYTES and axis + 1 < len(dims):
            for index in range(low, high):
                yield from self._walk(
                    entry, array_of, (*prefix, index), base + index * row, start, stop, itemsize
                )
            return
        edges = self.bounds[axis]
        step = max(1, BLOCK_BYTES // (row * itemsize))
        first = low
        while first < high:
            # Blocks never cross a chunk boundary along this dim, so a block lies in one
            # cell along it (and along the fixed leading dims).
            edge = int(edges[np.searchsorted(edges, first, side="right")])
            last = min(high, edge)
            block = self._block(entry, array_of, prefix, first, last)
            if block is None:
                last = min(high, edge, first + step)
                block = self._assembled(entry, array_of, prefix, first, last)
            begin = base + first * row
            flat = block.reshape(-1)
            piece = flat[max(0, start - begin) : min(flat.size, stop - begin)]
            view_step = max(1, _VIEW_BYTES // itemsize)
            for at in range(0, piece.size, view_step):
                yield piece[at : at + view_step]
            del block, flat, piece  # before the next block is made: one alive at a time
            first = last

    def _box(self, prefix: tuple[int, ...], first: int, last: int) -> tuple[slice, ...]:
        """The cells of rows ``[first, last)`` along dim ``len(prefix)`` under ``prefix``."""
        box = []
        for axis, edges in enumerate(self.bounds):
            if axis < len(prefix):
                cell = int(np.searchsorted(edges, prefix[axis], side="right")) - 1
                box.append(slice(cell, cell + 1))
            elif axis == len(prefix):
                low = int(np.searchsorted(edges, first, side="right")) - 1
                high = int(np.searchsorted(edges, last - 1, side="right"))
                box.append(slice(low, high))
            else:
                box.append(slice(None))
        return tuple(box)

    def _local(
        self, entry: TensorEntry, index: int, prefix: tuple[int, ...], first: int, last: int
    ) -> tuple[tuple[slice | int, ...], tuple[slice, ...]]:
        """(slices of chunk ``index``, slices of the block) of their intersection."""
        chunk = entry.chunks[index]
        source: list[slice | int] = []
        target: list[slice] = []
        for axis, (offset, size) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True)):
            if axis < len(prefix):
                source.append(prefix[axis] - offset)
            elif axis == len(prefix):
                low, high = max(first, offset), min(last, offset + size)
                source.append(slice(low - offset, high - offset))
                target.append(slice(low - first, high - first))
            else:
                source.append(slice(None))
                target.append(slice(offset, offset + size))
        return tuple(source), tuple(target)

    def _block(
        self,
        entry: TensorEntry,
        array_of: ChunkArray,
        prefix: tuple[int, ...],
        first: int,
        last: int,
    ) -> np.ndarray[Any, Any] | None:
        """Rows ``[first, last)`` as a zero-copy view when one chunk holds them all
        contiguously, else None."""
        held = self.owner[self._box(prefix, first, last)]
        index = int(held.flat[0])
        if held.size != 1 and not (held == index).all():
            return None
        source, _ = self._local(entry, index, prefix, first, last)
        view = array_of(index)[source]
        return view if view.flags.c_contiguous else None

    def _assembled(
        self,
        entry: TensorEntry,
        array_of: ChunkArray,
        prefix: tuple[int, ...],
        first: int,
        last: int,
    ) -> np.ndarray[Any, Any]:
        """Rows ``[first, last)`` copied from every chunk they touch into a new buffer."""
        axis = len(prefix)
        out = np.empty((last - first, *self.dims[axis + 1 :]), dtype=entry.dtype.numpy)
        for index in np.unique(self.owner[self._box(prefix, first, last)]).tolist():
            source, target = self._local(entry, index, prefix, first, last)
            out[target] = array_of(index)[source]
        return out
