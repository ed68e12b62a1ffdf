"""The Baechi placers' core: problem, numba kernels, the ready set (`ready`), Baechi's loop."""
