"""The process rig: D CPU devices that run at once, a worker process each."""
