"""Search methods: simulated annealing and policy-guided search, on the shared move set of `moves`."""
