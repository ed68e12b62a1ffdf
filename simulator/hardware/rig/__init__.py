"""The process rig: D CPU devices that really run at once, one worker process per device."""
