"""The list-scheduling core the Baechi placers share: the problem, numba kernels and Baechi's reference."""
