"""Tracing: a JAX training step to an op graph, and back from a graph file to a runnable program."""
