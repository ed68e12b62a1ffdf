"""What experiments of more than one folder share (the large graphs of the scale experiments)."""
