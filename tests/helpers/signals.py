"""Commands stopped by a real signal, and what they leave behind.

A command runs in a session of its own (as a shell runs a job: a Ctrl-C goes to its whole process group), its
stdout and stderr read by threads; `Run.wait_for` waits for a line or a condition, `Run.send` sends a signal to
the group (a Ctrl-C, `timeout`) or to the command alone, `Run.finish` waits for the end. `check_stopped` asserts
what a stopped command must leave: its exit code, one line on stderr (a progress bar's redraws aside), no
traceback, no process left in its session, no shared memory block of its rig (simulator.hardware.rig.pool
names them after the command's pid). Every wait has a timeout, generous for a loaded 2-core machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from simulator.hardware.rig.pool import block_names

ROOT = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")


def cli(*args: str) -> list[str]:
    """The argv of `placeto ARGS...` in this interpreter."""
    return [sys.executable, "-m", "placeto.cli.main", *args]


class Run:
    """A command running in a session of its own."""

    def __init__(self, argv: list[str], env: dict | None = None, cwd: str | os.PathLike | None = None):
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONFAULTHANDLER"] = "1"  # a SIGABRT dumps every thread's stack: what a command that hangs is in
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.pid, self.out, self.err = self.proc.pid, [], []
        self.readers = [threading.Thread(target=self._read, args=(s, into), daemon=True)
                        for s, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(stream, into: list) -> None:
        for line in stream:
            into.append(line)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, until: str | Callable[[], bool], timeout: float = 300.0) -> None:
        """Until a stdout line holds `until` (or `until()` is true); fails if the command ends first or time runs
        out."""
        deadline = time.monotonic() + timeout
        ready = (lambda: until in self.stdout) if isinstance(until, str) else until
        try:
            while not ready():
                assert self.proc.poll() is None, \
                    f"ended ({self.proc.returncode}) before {until!r}:\n{self.stdout[-2000:]}\n{self.stderr[-3000:]}"
                assert time.monotonic() < deadline, f"no {until!r} within {timeout} s:\n{self.stdout[-2000:]}"
                time.sleep(0.05)
        except BaseException:
            self.kill()  # a failed test leaves no command running (a --repeats 100000 profile grew to 24 GB)
            raise

    def kill(self) -> None:
        """SIGKILL to the command's process group, if it is still there."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def send(self, sig: int, group: bool = True) -> None:
        """`sig` to the command's process group (a Ctrl-C, `timeout`), or to the command alone."""
        (os.killpg if group else os.kill)(self.pid, sig)

    def finish(self, timeout: float = 120.0) -> int:
        """Its exit code, once it has ended and its output is read."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGABRT, group=False)  # its threads' stacks on stderr (PYTHONFAULTHANDLER)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
            self.kill()
            for r in self.readers:
                r.join(5)
            raise AssertionError(f"still running {timeout} s on; its stacks:\n{self.stderr[-8000:]}") from None
        for r in self.readers:
            r.join(timeout)
        return code

    def cpu_seconds(self) -> float:
        """CPU time the command has used (user + system): past its imports, it is at work."""
        return cpu_seconds(self.pid)

    def workers(self) -> list[int]:
        """Pids of the command's process rig workers (its children running simulator.hardware.rig.worker)."""
        return [pid for pid in children(self.pid) if "simulator.hardware.rig.worker" in cmdline(pid)]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int) -> float:
    """CPU time process `pid` has used (user + system), 0 when it is gone."""
    st = _stat(pid)
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK") if st else 0.0


def children(pid: int) -> list[int]:
    """Live children of `pid`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st and st[0] != "Z" and int(st[1]) == pid:
                out.append(int(d))
    return out


def descendants(pid: int) -> list[int]:
    """Live children of `pid`, their children, and so on (e.g. a local Ray's daemons and workers)."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def in_session(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st and st[0] != "Z" and int(st[3]) == sid:
                out.append(int(d))
    return out


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def blocks(pid: int) -> list[str]:
    """Shared memory blocks a rig in process `pid` made that are still there."""
    return sorted(p.name for p in SHM.glob(block_names(pid) + "*")) if SHM.is_dir() else []


BAR = re.compile(r"\d+/\d+ \[|\r")  # a tqdm bar's line: "  5%|#  | 16/300 [00:01<...]" (or its redraw)


def message_lines(stderr: str) -> list[str]:
    """stderr's lines, a progress bar's left out."""
    return [line for line in stderr.splitlines() if line.strip() and not BAR.search(line)]


def bar_count(stderr: str) -> int:
    """The count a tqdm bar on stderr last showed (0: none yet)."""
    counts = re.findall(r"(\d+)/\d+ \[", stderr)
    return int(counts[-1]) if counts else 0


def check_stopped(run: Run, code: int, also_gone: tuple[int, ...] = (), timeout: float = 30.0,
                  since: int = 0) -> str:
    """Assert that `run` ended with `code`, said one line on stderr and no traceback, and left nothing behind:
    no process in its session, none of `also_gone` (e.g. its rig workers, in a session of their own), no shared
    memory block. `since`: the stderr before this offset (what the run said before the signal) is not judged.
    Returns the line."""
    got = run.finish(timeout=120)
    err = run.stderr[since:]
    lines = message_lines(err)
    assert got == code, f"exit {got}, not {code}:\n{err[-3000:]}"
    assert "Traceback" not in err and "Exception ignored" not in err and "leaked" not in err, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    deadline = time.monotonic() + timeout
    while (in_session(run.pid) or any(alive(p) for p in also_gone)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = in_session(run.pid) + [p for p in also_gone if alive(p)]
    assert not left, [cmdline(p) for p in left]
    assert not blocks(run.pid), blocks(run.pid)
    return lines[0]


def interrupt_code(sig: int) -> int:
    """The exit code of a command a signal stopped: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signal.Signals(sig))
