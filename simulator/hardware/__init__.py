"""Running placed graphs on real devices: plans, dispatch, timing, plain jit and the process rig."""
