"""Grouping: an op graph contracted to a smaller graph of groups, and placements mapped back and forth."""
