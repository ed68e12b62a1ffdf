"""The workloads graphs come from: the zoo of JAX programs, the traced families and generated DAGs."""
