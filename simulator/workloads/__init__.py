"""Where graphs come from: the zoo, traced families, generated DAGs.

The zoo of JAX programs, the families traced from it and generated DAGs with their clusters.
"""
