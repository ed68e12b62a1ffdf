"""Pipeline splits: a graph cut into contiguous stages, one device each (`split`), over a block sequence
(`sequence`)."""
