"""The seeds' claims and the shipped policies: one script per paper table or shipped policy (experiments/README.md)."""
