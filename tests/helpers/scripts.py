"""Run a test's script in a fresh interpreter on 2 host devices and read its JSON report."""

import json
import os
import subprocess
import sys
from pathlib import Path

from simulator.hardware.devices import HOST_DEVICE_FLAG

ROOT = Path(__file__).resolve().parents[2]


def run_script(script: str, *args: str) -> dict:
    """The last line of `script`'s stdout as JSON, run in a subprocess on 2 host devices."""
    flags = " ".join([os.environ.get("XLA_FLAGS", ""), f"{HOST_DEVICE_FLAG}=2"]).strip()  # (tests/conftest.py's too)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
