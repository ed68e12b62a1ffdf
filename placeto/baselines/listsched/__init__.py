"""The Baechi placers' core: problem, numba kernels, Baechi's loop."""
