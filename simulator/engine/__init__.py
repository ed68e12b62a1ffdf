"""The discrete-event simulator: numba engine and plain reference."""
