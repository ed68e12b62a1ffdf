"""A process rig's worker: one JAX CPU device, its share of steps.

A worker is started by `simulator.hardware.rig.pool.ProcessRig` (`python -c WORKER_MAIN INDEX FD TIMEOUT CORE
PEER:FD...`: a fresh interpreter, never a fork of a process whose JAX runtime has threads; FD: the inherited end
of its pipe to the parent, PEER:FD one per other worker), with XLA_FLAGS set by the parent so that its CPU client
has one device and no intra-op threading (`simulator.hardware.devices.SERIAL_CPU_FLAGS`): one worker, one core's
worth of work. It may be pinned to one core (`os.sched_setaffinity`).

It serves requests from the parent, one at a time, over its `Connection` (`serve`): a request is a tuple whose
first item names it, the reply is ("ok", value) or ("error", one line with the exception's type and message):

    ("load", stages)                 deserialize each (stage, blob) of `stages` (`jax.export` blobs,
                                     `Exported.serialize()`); each compiles in its first run
    ("put", items)                   keep each (key, array) of `items` (numpy arrays) on the device, resident
    ("drop", keys)                   forget resident values
    ("plan", plan, program, shm, keep)  a step's instruction list (`Recv`, `Run`, `Send`); `shm` names the shared
                                     memory block its transfers go through; `keep`: values to keep after a step
    ("run", plan)                    run one step of `plan`; the reply's value: the events of the step (`Event`)
    ("fetch", plan, keys)            the kept values of the last step, as numpy arrays
    ("free", plan)                   forget a plan, detach from its shared memory
    ("stop",)                        exit

Transfers: a `Send` copies values into the plan's shared memory block (`multiprocessing.shared_memory`, at
offsets the parent chose) and then tells the receiving worker over a direct pipe (`peers[dst]`) that batch
`batch` of this step is there; a `Recv` waits (up to the rig's timeout) for that message and copies the values
onto the device, the batch in one call (`jax.device_put([...], may_alias=False)`: a copy, since the block is
rewritten next step; one call for the batch is faster than one per value: docs/hardware.md, "Measured facts
behind design choices"). The parent runs one step at a time and waits for every worker before the next, so a
block is never rewritten while read.

Stopping: the worker runs in a session of its own and ignores SIGINT (a Ctrl-C is the parent's to act on: it
sends ("stop",) or closes the pipe); a worker whose parent has gone (killed, so it never said stop) exits within
PARENT_CHECK_S by itself (`watch_parent`), and one whose parent's pipe is closed exits without a word (no
BrokenPipeError traceback on a terminal the parent shares).

Events carry `time.perf_counter_ns()` (CLOCK_MONOTONIC, the same clock in every process of a Linux machine), so
the parent can lay every worker's stages on one time axis (a measured Gantt chart).
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import traceback
from typing import Any, NamedTuple

import numpy as np

from simulator.measure.compile_heal import heal_compile_cache_reads

PARENT_CHECK_S = 1.0  # how often a worker checks that its parent is alive


class Slot(NamedTuple):
    """Where one transferred value lives in a plan's shared memory block."""

    key: int  # the value's id in the step's environment
    offset: int  # bytes from the block's start
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name


class Recv(NamedTuple):
    """Waits for batch `batch` from worker `src`, copies it here."""

    src: int
    batch: int
    slots: tuple[Slot, ...]


class Run(NamedTuple):
    """Runs stage `stage`, fn(token, *inputs) -> (token, *outputs).

    `label` names it in the events.
    """

    stage: int
    label: int  # the plan's task index
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    donated: tuple[int, ...] = ()  # inputs whose buffers the stage takes over: dropped after it runs


class Send(NamedTuple):
    """Copies values into the shared memory block, then tells worker `dst`.

    The message says that batch `batch` is there.
    """

    dst: int
    batch: int
    label: int  # the plan's task index of the producer
    slots: tuple[Slot, ...]


class Event(NamedTuple):
    """One timed piece of a worker's step: a run, a send or a receive.

    A send is the copy into shared memory; a receive is the wait for the batch and the copy onto the device. Times
    are nanoseconds of `time.perf_counter_ns()`.
    """

    kind: str  # "run", "send" or "recv"
    label: int  # task index (run, send) or batch (recv)
    start_ns: int
    end_ns: int


def main(argv: list[str]) -> None:
    """The worker's entry point (`simulator.hardware.rig.pool.WORKER_MAIN`).

    argv: INDEX FD TIMEOUT CORE PEER:FD... (CORE "-": not pinned).
    """
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's to act on (see the module docstring)
    watch_parent(os.getppid())
    index, fd, timeout_s, core = int(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    conn = Connection(fd)
    peers = {int(d): Connection(int(f)) for d, f in (p.split(":") for p in argv[4:])}
    if core != "-":
        os.sched_setaffinity(0, {int(core)})
    heal_compile_cache_reads()  # a damaged entry of the compilation cache its stages use: one line, replaced
    import jax  # noqa: F401  -- the CPU client starts with the flags the parent set

    state = {"stages": {}, "values": {}, "plans": {}, "peers": peers, "timeout_s": timeout_s, "index": index,
             "arrived": {d: set() for d in peers}}
    serve(conn, state)


def watch_parent(parent: int, every_s: float = PARENT_CHECK_S) -> threading.Thread:
    """A daemon thread that ends this process (exit 0, at once) once its parent `parent` is gone.

    A killed parent never says stop, and a worker waiting for a batch would wait out the rig's timeout.
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def serve(conn: Any, state: dict) -> None:
    """Answers requests until ("stop",) or the parent's pipe closes.

    The garbage collector is off while steps run (a step makes a few thousand objects, none in a cycle, so none
    waits for it; a collection of this JAX process would land in some step's time) and collects after every other
    request, between plans.
    """
    gc.disable()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request[0] == "stop":
            break
        try:
            reply = ("ok", HANDLERS[request[0]](state, *request[1:]))
        except Exception as e:  # noqa: BLE001 -- reported to the parent, which raises it there
            last = traceback.extract_tb(e.__traceback__)[-1:]
            where = f" ({os.path.basename(last[0].filename)}:{last[0].lineno})" if last else ""
            reply = ("error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}")
        try:
            conn.send(reply)
        except OSError:  # BrokenPipeError: the parent is gone, or stopped listening; nothing to say
            break
        if request[0] != "run":
            gc.collect()
    for plan in list(state["plans"]):
        _free(state, plan)


def _load(state: dict, stages: list) -> None:
    """Deserializes every (stage id, blob) of `stages` as a jitted function.

    Each compiles in its first run. Compiled ahead of time instead (`jit(...).lower(...).compile()`), the stages ran
    through another call path, where in some runs a worker's freed buffer was faulted in again every step
    (tests/simulator/hardware/rig/test_pool.py's fault test).
    """
    import jax

    for stage, blob in stages:
        state["stages"][stage] = jax.jit(jax.export.deserialize(bytearray(blob)).call)


def _put(state: dict, items: list) -> None:
    import jax

    for key, array in items:
        state["values"][key] = jax.device_put(array, may_alias=False)


def _drop(state: dict, keys: tuple) -> None:
    for k in keys:
        state["values"].pop(k, None)


def _plan(state: dict, plan: int, program: tuple, shm_name: str | None, keep: tuple) -> None:
    from multiprocessing import shared_memory

    import jax
    import jax.numpy as jnp

    shm = None
    if shm_name:
        from multiprocessing import resource_tracker

        shm = shared_memory.SharedMemory(name=shm_name)
        # Python < 3.13 registers an attached block with this process's own resource tracker, which would unlink
        # it (and warn of a leak) when the worker exits: the parent owns it and unlinks it
        resource_tracker.unregister(shm._name, "shared_memory")
    # the token committed to the device, as a stage returns it: an uncommitted one in the first step made jit
    # compile the plan's first stage again in the second (its cache is keyed on that)
    state["plans"][plan] = {"program": program, "shm": shm, "keep": keep, "last": {},
                            "token": jax.device_put(jnp.zeros((), jnp.int8), jax.devices()[0])}


def _free(state: dict, plan: int) -> None:
    entry = state["plans"].pop(plan, None)
    if entry is not None and entry["shm"] is not None:
        entry["shm"].close()


def _fetch(state: dict, plan: int, keys: tuple) -> list:
    last = state["plans"][plan]["last"]
    return [np.asarray(last[k]) for k in keys]


def _view(shm: Any, slot: Slot) -> np.ndarray:
    dtype = np.dtype(slot.dtype)
    count = int(np.prod(slot.shape, dtype=np.int64))
    return np.ndarray(slot.shape, dtype, buffer=shm.buf, offset=slot.offset) if count else np.zeros(slot.shape,
                                                                                                     dtype)


def _run(state: dict, plan: int) -> list[Event]:
    """Runs one step of `plan`, every stage waited for.

    Its instructions run in order, so a stage's end time is real.
    """
    import jax

    entry = state["plans"][plan]
    env = dict(state["values"])
    events = []
    clock = time.perf_counter_ns
    for ins in entry["program"]:
        t0 = clock()
        if isinstance(ins, Run):
            token, *outs = state["stages"][ins.stage](entry["token"], *[env[k] for k in ins.inputs])
            jax.block_until_ready(outs)
            entry["token"] = token
            for k in ins.donated:
                env.pop(k, None)
            env.update(zip(ins.outputs, outs))
            events.append(Event("run", ins.label, t0, clock()))
        elif isinstance(ins, Send):
            for slot in ins.slots:
                _view(entry["shm"], slot)[...] = np.asarray(env[slot.key])
            state["peers"][ins.dst].send((plan, ins.batch))
            events.append(Event("send", ins.label, t0, clock()))
        else:
            _wait(state, ins.src, (plan, ins.batch))  # the batch's values in one call: faster than one each
            views = [_view(entry["shm"], slot) for slot in ins.slots]
            env.update(zip([slot.key for slot in ins.slots], jax.device_put(views, may_alias=False)))
            events.append(Event("recv", ins.batch, t0, clock()))
    entry["last"] = {k: env[k] for k in entry["keep"] if k in env}
    return events


def _wait(state: dict, src: int, batch: tuple) -> None:
    """Blocks until worker `src` said `batch` is in shared memory.

    Raises:
      TimeoutError: no such message within the rig's timeout.
    """
    arrived, conn = state["arrived"][src], state["peers"][src]
    deadline = time.monotonic() + state["timeout_s"]
    while batch not in arrived:
        left = deadline - time.monotonic()
        if left <= 0 or not conn.poll(left):
            raise TimeoutError(f"worker {state['index']}: no batch {batch[1]} from worker {src} within "
                               f"{state['timeout_s']:g} s")
        arrived.add(conn.recv())
    arrived.discard(batch)


HANDLERS = {"load": _load, "put": _put, "drop": _drop, "plan": _plan, "free": _free, "fetch": _fetch, "run": _run}

