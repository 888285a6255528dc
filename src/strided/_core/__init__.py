"""The bottom layer: errors, limits, dtypes, scalars, float layouts, shapes, indexing and
the memory boundary. Imports nothing else of strided."""
