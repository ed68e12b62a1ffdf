"""One way to stop: SIGINT and SIGTERM raise `Interrupted` in the main thread.

A run stops the way Orbax's checkpoint-on-preemption does: the signal becomes an exception where the main thread
is, every `finally` and `with` on the way out runs (a training run writes its checkpoint, the process rig stops its
workers and unlinks its shared memory), and the command prints one line and exits with 128 + the signal's number
(130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal killed.

`Interrupted` is a KeyboardInterrupt, so no `except Exception` on the way swallows it. Two places could swallow it
all the same, and both are covered while `stop_on_signals` is active:
* a callback whose exceptions Python only reports ("Exception ignored in: <function _xla_gc_callback>": JAX's
  garbage-collector callback, weakref finalizers, `__del__`): a signal that arrives inside a garbage-collector
  callback is not raised there, and an interrupt some other such callback swallowed reaches `sys.unraisablehook`;
  either way the signal is sent again to the main thread REDELIVER_S later (`signal.pthread_kill`, from a timer
  thread: a real signal, so a blocking wait the main thread is in by then ends too), and raised in the code that
  runs then;
* a pool of processes (`spawned_pool`): its workers ignore both signals (a Ctrl-C reaches the whole process group:
  the parent acts on it), and on the way out of an interrupt the parent kills them rather than waiting for their
  tasks;
* clean-up that must not be cut in half (unlinking shared memory, writing a checkpoint): inside `deferred()` a
  signal is held and raised when the block ends, unless the run is already stopping.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import signal
import sys
import threading
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_S = 0.01  # a signal that arrived inside a callback is sent again this much later (seconds)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: the run stops.

    `what` says what was running and what was kept (one line, no trailing period); a library that catches it on
    the way out re-raises `adding(...)` with what it saved.
    """

    def __init__(self, signum: int = signal.SIGINT, what: str = ""):
        super().__init__(signum, what)
        self.signum, self.what = int(signum), what

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    def adding(self, what: str) -> "Interrupted":
        """The same signal, `what` said first (and what was said before, after a semicolon)."""
        return Interrupted(self.signum, "; ".join(w for w in (what, self.what) if w))

    def line(self) -> str:
        """"interrupted (SIGINT): <what>"."""
        return f"interrupted ({self.signal_name})" + (f": {self.what}" if self.what else "")

    def __str__(self) -> str:
        return self.line()


def as_interrupted(e: KeyboardInterrupt) -> Interrupted:
    """`e` as an Interrupted (a plain KeyboardInterrupt: Python's own SIGINT handler, so SIGINT)."""
    return e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)


class _State:
    """The handlers' state, in the main thread only (signal handlers run there)."""

    active = 0  # nesting depth of stop_on_signals
    stopping: int | None = None  # the signal an Interrupted was raised for (None: none yet)
    defer = 0  # nesting depth of deferred()
    held: int | None = None  # a signal that arrived inside deferred()
    previous_hook = None


def _handler(signum: int, frame) -> None:
    if _inside_callback(frame):  # raised here, it would be reported and dropped: raise it after the callback
        _deliver_later(signum)
        return
    if _State.defer:
        _State.held = _State.held or signum
        return
    _State.stopping = signum
    raise Interrupted(signum)


def _unraisable(hook_args) -> None:
    """Deliver again an interrupt a callback swallowed; report anything else as before."""
    if isinstance(hook_args.exc_value, KeyboardInterrupt) and _State.active:
        _deliver_later(getattr(hook_args.exc_value, "signum", signal.SIGINT))
        return
    (_State.previous_hook or sys.__unraisablehook__)(hook_args)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM raise Interrupted in the main thread (see the module docstring).

    The handlers and sys.unraisablehook before it are restored at the end. Called from another thread it does
    nothing (Python sets signal handlers from the main thread only).
    """
    if threading.get_ident() != _main_thread_id():
        yield
        return
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    hook = sys.unraisablehook
    if not _State.active:
        _State.previous_hook, _State.stopping, _State.held = hook, None, None
        sys.unraisablehook = _unraisable
    _State.active += 1
    for s in STOP_SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        _State.active -= 1
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if not _State.active:
            sys.unraisablehook = hook


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a stop signal is held; it is raised when the block ends, unless the run is already stopping.

    For clean-up that must finish (unlinking shared memory, writing a checkpoint) and is short. Outside
    `stop_on_signals` (or off the main thread) it does nothing.
    """
    if not _State.active or threading.get_ident() != _main_thread_id():
        yield
        return
    _State.defer += 1
    try:
        yield
    finally:
        _State.defer -= 1
        held, stopping = _State.held, _State.stopping
        if not _State.defer and held is not None:
            _State.held = None
            if stopping is None and sys.exc_info()[1] is None:  # not already on the way out: stop now
                _State.stopping = held
                raise Interrupted(held)


def _inside_callback(frame) -> bool:
    """Whether `frame` runs inside a garbage-collector callback (or this module's unraisable hook)."""
    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks} | {_unraisable.__code__}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _deliver_later(signum: int) -> None:
    """Send `signum` to the main thread REDELIVER_S from now, from a timer thread."""
    timer = threading.Timer(REDELIVER_S, _redeliver, args=(signum,))
    timer.daemon = True
    timer.start()


def _redeliver(signum: int) -> None:
    if _State.active:  # (not once the handlers are gone: the signal's default would act)
        signal.pthread_kill(_main_thread_id(), signum)


def _main_thread_id() -> int:
    return threading.main_thread().ident


def ignore_stop_signals() -> None:
    """A pool worker's initializer: SIGINT and SIGTERM are its parent's to act on (`spawned_pool`)."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def spawned_pool(workers: int) -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """A ProcessPoolExecutor of `workers` spawned processes (JAX starts fresh in each) that stops as the run does.

    Its workers ignore stop signals; when the block ends by an exception (an Interrupted among them) its queued
    tasks are cancelled and its workers killed at once, not waited for (a task may take minutes); else it is shut
    down as usual.
    """
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=ignore_stop_signals)
    try:
        yield pool
    except BaseException:
        with deferred():
            processes = list((pool._processes or {}).values())  # (the stdlib's: no public way before 3.14)
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                p.kill()
            for p in processes:
                p.join(10)
        raise
    pool.shutdown(wait=True)
