"""Grouping: op graphs contracted to groups, placements mapped back."""
