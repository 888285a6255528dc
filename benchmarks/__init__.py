"""Side-by-side benchmarks: strided against NumPy (and PyTorch/JAX when installed)."""
