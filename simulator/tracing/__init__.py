"""Tracing: JAX steps to op graphs, and graph files back to programs."""
