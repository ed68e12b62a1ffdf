"""Placed graphs on devices: plans, dispatch, timing, plain jit, rig."""
