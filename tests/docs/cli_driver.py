"""Runs many `placeto` command lines fast, each in its own forked process: used by tests/docs/test_bad_inputs.py.

Reads a JSON list of cases from stdin, each {"id", "argv", "lock": path or null}, and writes one JSON list of
results: {"id", "code" (exit status, or -signal), "stderr", "changed" (files under ROOT whose bytes changed or
that vanished), "seconds"}. ROOT is argv[1].

Each case is a fork of this process running `placeto.cli.main.main(argv)` with its stdout and stderr sent to files,
exactly as `python -m placeto.cli.main ...` would run it: an uncaught exception prints Python's traceback and exits 1,
a crash in compiled code kills the child (reported as a negative code). The parent imports the CLI, the simulator
and the training modules (JAX too) once, but starts no JAX backend, which must not be forked once started (XLA's
threads): every child starts its own. With "lock", the parent holds an flock on that path, with its pid inside, while the case runs
(a `placeto train` holding the run directory).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every regular file under root."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_child(argv: list[str], out_path: str, err_path: str) -> None:
    """In the forked child: run the CLI, never return."""
    code = 1
    try:
        for fd, path in ((1, out_path), (2, err_path)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        from placeto.cli.main import main

        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what the interpreter would print for an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_case(case: dict, root: Path, scratch: str) -> dict:
    lock_fd = None
    if case.get("lock"):
        lock_fd = os.open(case["lock"], os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
    before = snapshot(root)
    out_path, err_path = os.path.join(scratch, "out"), os.path.join(scratch, "err")
    t0 = time.perf_counter()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run_child(case["argv"], out_path, err_path)
    _, status = os.waitpid(pid, 0)
    after = snapshot(root)
    if lock_fd is not None:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)
    code = os.waitstatus_to_exitcode(status)
    changed = sorted(k for k in before if after.get(k) != before[k])
    return {"id": case["id"], "code": code, "stderr": Path(err_path).read_text(errors="replace"),
            "changed": changed, "seconds": round(time.perf_counter() - t0, 3)}


def main() -> None:
    root = Path(sys.argv[1])
    cases = json.load(sys.stdin)
    import placeto.cli.main  # shared by every child: the imports are paid once

    placeto.cli.main.build_parser()  # imports what every command's parser needs (compare, baselines, scipy)
    import simulator.workloads.families  # noqa: F401
    import placeto.methods.placeto.train  # noqa: F401  jax, flax, optax: imported, but no backend started (checked below)
    import simulator.engine.fast  # noqa: F401
    from jax._src import xla_bridge

    assert not xla_bridge.backends_are_initialized(), "a JAX backend must not be started before fork"

    with tempfile.TemporaryDirectory() as scratch:
        results = [run_case(case, root, scratch) for case in cases]
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
