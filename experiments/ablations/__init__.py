"""The ablations whose results README.md or docs/ cite (experiments/README.md lists the removed ones in a line each)."""
