"""The Baechi placers' shared core: the problem, numba kernels, Baechi's loop."""
