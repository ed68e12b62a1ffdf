"""A rig of D CPU devices that run at once: a worker process each.

JAX's host "devices" (`--xla_force_host_platform_device_count`) are labels over one shared thread pool: two
jitted chains of matmuls on cpu:0 and cpu:1 overlap far less than two NumPy threads doing the same
(experiments/results/benchmarks/rig_concurrency.md). Here each device is its own process
(`simulator.hardware.rig.worker`), spawned (a fresh interpreter, not a fork of a process with JAX threads
running), with its own single-device JAX CPU client and XLA's intra-op threading off
(`simulator.hardware.devices.SERIAL_CPU_FLAGS`), so a device is one core's worth of work and D devices run on D
cores at once; optionally each worker is pinned to a core (`pin`). A worker keeps the memory it allocates
(glibc's malloc set by `WORKER_MALLOC`), as a device's caching allocator does, so a step does not fault in again
what the step before it freed.

What moves where:
* code: each stage of a placed `simulator.hardware.dispatch.Plan` (a jitted fn(token, *inputs) -> (token,
  *outputs)) is exported in the parent with `jax.export` and sent once as bytes; the worker deserializes and
  jits it (`simulator.hardware.rig.plans.to_rig` builds the per-worker instruction lists);
* resident values (parameters, optimizer state, the batch) are sent once, when a plan is put on the rig, and kept
  in the worker across plans of the same `scope`;
* values crossing devices during a step go through one shared memory block per plan (`multiprocessing.
  shared_memory`, numpy views), with a small message over a direct pipe between the two workers;
* the parent sends ("run", plan) to every worker and waits for each to answer: one step at a time.

Failures are errors, not hangs: every wait (the parent's for a reply, a worker's for a batch) has a timeout
(`timeout_s`); a worker that dies, times out or raises makes the rig raise `RigError` (one line naming the
worker, what it was doing, and what to do), and close itself (its workers stopped, or killed; its shared memory
unlinked). `close()` (also at exit, on `with`, and on the way out of an interrupt: simulator.interrupts) stops
the workers and unlinks every block.

Stopping: the workers run in a session of their own (`start_new_session`), so a Ctrl-C at the terminal or a
SIGTERM to the command's process group reaches the parent alone, which stops them as it stops (no worker dies
mid-reply, no traceback of theirs); a worker whose parent is gone (killed) exits by itself
(`simulator.hardware.rig.worker`). Shared memory blocks are named `BLOCK_PREFIX<parent pid>_<n>`, so what a
process left in /dev/shm can be told from other programs' blocks.

This module imports neither jax nor numpy-heavy code at import time; the parent's JAX need not have more than one
device.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

from simulator.hardware.devices import HOST_DEVICE_FLAG, SERIAL_CPU_FLAGS
from simulator.interrupts import deferred
from simulator.model.errors import InputError

DEFAULT_TIMEOUT_S = 300.0  # a reply or a batch that takes longer means a worker is stuck (compiles included)
TIMEOUT_ENV = "PLACETO_RIG_TIMEOUT_S"  # overrides DEFAULT_TIMEOUT_S for the rigs commands start (`timeout_from_env`)
PIN = True  # pin worker d to core d (mod cores): unpinned, a worker running alone borrows a second core (XLA:CPU
#            still has helper threads), so one device is more than one core and two overlap far less than pinned
#            (experiments/results/benchmarks/rig_concurrency.md). The price: a pinned worker cannot move off a
#            core another program keeps busy
REPLY_SLACK_S = 5.0  # the parent waits this much longer than a worker waits for a batch: the worker's own
#                     error (which batch it waited for) arrives first
START_TIMEOUT_S = 120.0  # a worker's start: a fresh interpreter importing jax
BLOCK_PREFIX = "placeto_"  # shared memory block names: placeto_<pid of the parent>_<n> (/dev/shm/ on Linux)
DOING = {"put": "receiving values", "load": "loading its stages", "drop": "dropping values",
         "plan": "setting up a plan", "run": "running a step", "fetch": "returning a step's outputs",
         "free": "freeing a plan"}  # a request, in words
WORKER_MALLOC = ("glibc.malloc.mmap_max=0", "glibc.malloc.trim_threshold=68719476736",
                 "glibc.malloc.top_pad=67108864")
#   glibc's malloc settings in every worker (GLIBC_TUNABLES): a worker keeps the memory it once allocated, as a
#   GPU runtime's caching allocator does. With glibc's defaults a freed buffer goes back to the kernel (a large one
#   is unmapped, the heap's free top trimmed, a thread arena's heap shrunk or deleted) and the next step's kernels
#   fault it in again page by page. No mmap: every buffer comes from a heap; no trimming (64 GiB): no heap's top
#   is given back; a top pad of 64 MiB (a thread arena's whole heap): glibc's heap_trim keeps a thread arena's
#   emptied heap instead of unmapping it (it deletes one only when what would be left is under the pad). Each of
#   the three is needed, and one arena for all threads (glibc.malloc.arena_max=1) stops the faults too but runs
#   short steps far slower: XLA's threads, sharing one core, queue on its lock (docs/hardware.md, "The process
#   rig" and "Measured facts behind design choices")


DIED = ("rerun the command (a worker killed for memory: see `dmesg`; try fewer --devices), or run on this "
        "process's devices with --rig threads")
SILENT = ("the machine may be overloaded (see `uptime`) or the worker stuck: rerun when it is less busy, allow it "
          f"longer ({TIMEOUT_ENV}, default {DEFAULT_TIMEOUT_S:g} s), or run on this process's devices with --rig "
          "threads")
FAILED = "run with --rig threads to see the error in this process"


class RigError(RuntimeError):
    """A rig worker raised, died, or did not answer in time.

    Its message is one line, naming the worker, what it was doing and what to do.
    """


def timeout_from_env(environ: dict = os.environ) -> float:
    """The rig's timeout in seconds: TIMEOUT_ENV when set, else DEFAULT_TIMEOUT_S.

    Raises:
      InputError: TIMEOUT_ENV is not a positive finite number.
    """
    text = environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{TIMEOUT_ENV}={text[:40]!r}: expected a positive number of seconds")
    return value


def block_names(pid: int) -> str:
    """The prefix of the shared memory blocks a rig in process `pid` makes (`ProcessRig.block`)."""
    return f"{BLOCK_PREFIX}{pid}_"


def worker_env(environ: dict) -> dict:
    """A worker's environment: its XLA and malloc settings added.

    XLA_FLAGS as `worker_flags`, JAX on the CPU, and WORKER_MALLOC added to GLIBC_TUNABLES (a tunable `environ`
    already sets keeps its value).
    """
    tunables = _with_defaults([t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t], WORKER_MALLOC)
    return dict(environ, XLA_FLAGS=worker_flags(environ.get("XLA_FLAGS", "")), JAX_PLATFORMS="cpu",
                GLIBC_TUNABLES=":".join(tunables))


def worker_flags(flags: str) -> str:
    """A worker's XLA_FLAGS: no host device count, serial CPU flags.

    The caller's flags without a host device count (a worker has one device), with SERIAL_CPU_FLAGS (one core per
    execution).
    """
    words = [w for w in flags.split() if not w.startswith(HOST_DEVICE_FLAG + "=")]
    return " ".join(_with_defaults(words, SERIAL_CPU_FLAGS))


def _with_defaults(settings: list[str], defaults: Sequence[str]) -> list[str]:
    """`settings`, then the `defaults` none of them names.

    Each is "name=value"; a default is added when no setting has its name.
    """
    named = {w.split("=")[0] for w in settings}
    return settings + [d for d in defaults if d.split("=")[0] not in named]


@contextlib.contextmanager
def one_core(core: int | None = None):
    """Inside the block, every thread of this process runs on one core.

    JAX's thread pools are included, and threads started inside. The core defaults to the first free one; the
    affinity is restored after. For measuring what a worker of the rig, one pinned core, would take: unpinned,
    XLA:CPU runs independent parts of one computation on other cores even with its intra-op threading off.
    """
    before = os.sched_getaffinity(0)
    core = free_cores()[0] if core is None else core
    _set_all_threads({core})
    try:
        yield core
    finally:
        _set_all_threads(before)


def _set_all_threads(cores: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, OSError):  # a thread that ended meanwhile
            pass


def free_cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    return sorted(os.sched_getaffinity(0))


class ProcessRig:
    """D worker processes, one JAX CPU device each.

    Use as a context manager, or call close().
    """

    def __init__(self, n_devices: int, pin: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S):
        if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices < 1:
            raise InputError(f"a process rig needs a positive device count, got {n_devices!r}")
        if not timeout_s > 0:
            raise InputError(f"the rig's timeout must be positive, got {timeout_s!r}")
        self.n_devices, self.pin, self.timeout_s = n_devices, pin, float(timeout_s)
        cores = free_cores()
        self.cores = [cores[d % len(cores)] if pin else None for d in range(n_devices)]
        pipes = {(a, b): multiprocessing.Pipe() for a in range(n_devices) for b in range(a + 1, n_devices)}
        peers = [{b if a == d else a: ends[0] if a == d else ends[1] for (a, b), ends in pipes.items() if d in (a, b)}
                 for d in range(n_devices)]
        self.conns, self.processes, self.blocks = [], [], {}
        self._ids = itertools.count(1)
        self.loaded: list[set] = [set() for _ in range(n_devices)]  # stage ids each worker holds
        self.resident: dict = {}  # (scope, value, device) -> value id held by that worker
        self.closed = False
        self.stage = "its start-up"  # what the rig is used for now, named in a RigError (`during`)
        self._finalizer = weakref.finalize(self, _shutdown, self.processes, self.conns, self.blocks)
        try:  # an interrupt or a failure during the start-up stops the workers started so far
            try:
                for d in range(n_devices):
                    ours, theirs = multiprocessing.Pipe()
                    self.processes.append(_start_worker(d, theirs, peers[d], self.cores[d], self.timeout_s))
                    theirs.close()
                    self.conns.append(ours)
            finally:
                for ends in pipes.values():
                    for end in ends:
                        end.close()
            self.call_all([("put", [(0, _zero())])] * n_devices, START_TIMEOUT_S)  # every worker up, jax imported
        except BaseException:
            self.close()
            raise
        self.stage = ""

    @contextlib.contextmanager
    def during(self, stage: str):
        """Inside, a RigError says the rig failed during `stage` (e.g. "the timed rounds")."""
        before, self.stage = self.stage, stage
        try:
            yield self
        finally:
            self.stage = before

    def __enter__(self) -> "ProcessRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def new_id(self) -> int:
        """A fresh id for a value, stage or plan (unique within this rig)."""
        return next(self._ids)

    def call(self, d: int, request: tuple, timeout_s: float | None = None) -> Any:
        """Sends `request` to worker d and returns its reply's value.

        Raises:
          RigError: the worker failed (and the rig closes).
        """
        return self.call_all({d: request}, timeout_s)[d]

    def call_all(self, requests: dict | Sequence, timeout_s: float | None = None) -> dict:
        """Sends requests to workers at once; returns {worker: reply value}.

        Args:
          requests: {worker: request}, or one per worker in order.
          timeout_s: how long to wait for the replies (default: the rig's timeout + REPLY_SLACK_S).

        Raises:
          RigError: a worker raised, died or timed out (and the rig closes).
        """
        if self.closed:
            raise RigError("the process rig is closed")
        requests = dict(enumerate(requests)) if not isinstance(requests, dict) else requests
        try:
            for d, request in requests.items():
                self.conns[d].send(request)
        except (OSError, ValueError) as e:  # BrokenPipeError: the worker is gone
            self._fail(d, f"worker {d} cannot be reached ({self._exit_note(d) or type(e).__name__})", DIED)
        timeout = self.timeout_s + REPLY_SLACK_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        replies = {}
        for d in requests:
            replies[d] = self._reply(d, deadline, timeout, requests[d][0])
        return replies

    def _reply(self, d: int, deadline: float, timeout: float, what: str) -> Any:
        conn = self.conns[d]
        try:
            ready = conn.poll(max(0.0, deadline - time.monotonic()))
            status, value = conn.recv() if ready else (None, None)
        except (EOFError, OSError):
            self._fail(d, f"worker {d} died during {what!r}, {DOING.get(what, what)} "
                          f"({self._exit_note(d) or 'its pipe closed'})", DIED)
        if status is None:
            self._fail(d, f"worker {d} did not answer {what!r} within {timeout:g} s, {DOING.get(what, what)}",
                       SILENT)
        if status == "error":  # a worker's own wait for a batch that timed out: a peer went silent
            self._fail(d, f"worker {d} failed in {what!r}: {value}", SILENT if value.startswith("TimeoutError")
                       else FAILED)
        return value

    def _exit_note(self, d: int, wait_s: float = 0.5) -> str:
        """"pid P, killed by SIGKILL" or "pid P, exit code C" of a worker that has ended; "" if it runs."""
        try:
            code = self.processes[d].wait(wait_s)
        except subprocess.TimeoutExpired:
            return ""
        how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
            else f"exit code {code}"
        return f"pid {self.processes[d].pid}, {how}"

    def _fail(self, d: int, message: str, advice: str) -> None:
        """Close the rig and raise RigError: `message`, the stage, what was done and `advice`.

        A worker that has died is named first: a peer's failure (its pipe broken, a batch never sent) follows
        from it.
        """
        dead = next((k for k, p in enumerate(self.processes) if k != d and p.poll() is not None), None)
        if dead is not None:
            message, advice = f"worker {dead} died ({self._exit_note(dead)}); worker {d}: {message}", DIED
        stage = f" during {self.stage}" if self.stage else ""
        n = len(self.processes)
        self.close()
        raise RigError(f"process rig{stage}: {message}; its {n} worker processes are stopped and its shared "
                       f"memory freed; {advice}")

    def block(self, size: int) -> str:
        """A new shared memory block of `size` bytes (at least 1): its name.

        The rig owns the block (`release` unlinks it).
        """
        from multiprocessing import shared_memory

        name = f"{block_names(os.getpid())}{next(self._ids)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=max(1, size))
        self.blocks[shm.name] = shm
        return shm.name

    def release(self, name: str) -> None:
        """Unlink a block made by `block`."""
        shm = self.blocks.pop(name, None)
        if shm is not None:
            _unlink(shm)

    def close(self) -> None:
        """Stops the workers and unlinks every block.

        A worker that does not stop within a few seconds is killed.
        """
        if not self.closed:
            self.closed = True
            with deferred():  # a signal now waits until every worker is stopped and every block unlinked
                self._finalizer()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]


# a worker's program: simulator.hardware.rig.worker imported by its name (not run as __main__), so the
# Run/Send/Recv the parent pickles unpickle as that module's classes
WORKER_MAIN = "import sys; from simulator.hardware.rig.worker import main; main(sys.argv[1:])"


def _start_worker(index: int, conn: Any, peers: dict, core: int | None, timeout_s: float) -> subprocess.Popen:
    """Starts worker `index` (WORKER_MAIN) in a fresh interpreter.

    WORKER_MAIN runs `simulator.hardware.rig.worker.main`.

    Its pipes' file descriptors are inherited. A fresh interpreter: not a fork of this process, whose JAX runtime
    may have threads, nor multiprocessing's spawn, which would import the caller's __main__ again. Its environment
    is `worker_env`, with the repository on its path. In a session of its own: signals to the caller's process
    group (a Ctrl-C, `timeout`'s SIGTERM) are the caller's to act on (see the module docstring).
    """
    root = str(Path(__file__).resolve().parents[3])  # the repository: simulator/ importable in the worker
    env = dict(worker_env(dict(os.environ)),
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    argv = [sys.executable, "-c", WORKER_MAIN, str(index), str(conn.fileno()), f"{timeout_s!r}",
            "-" if core is None else str(core)] + [f"{d}:{c.fileno()}" for d, c in peers.items()]
    fds = [conn.fileno()] + [c.fileno() for c in peers.values()]
    return subprocess.Popen(argv, env=env, pass_fds=fds, stdin=subprocess.DEVNULL, start_new_session=True)


def _zero():
    import numpy as np

    return np.zeros((), np.int8)


def _unlink(shm: Any) -> None:
    try:
        shm.close()
        shm.unlink()
    except (FileNotFoundError, BufferError):
        pass


def _shutdown(processes: list, conns: list, blocks: dict) -> None:
    """Stops every worker (killing stragglers) and unlinks the blocks."""
    for conn in conns:
        try:
            conn.send(("stop",))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 5.0
    for p in processes:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5.0)
    for conn in conns:
        conn.close()
    for name in list(blocks):
        _unlink(blocks.pop(name))
