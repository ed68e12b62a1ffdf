"""The discrete-event simulator: the fast numba engine beside its plain-Python reference."""
