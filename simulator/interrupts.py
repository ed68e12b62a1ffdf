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
* C code that clears whatever its call raised: a file object that was never closed, finalized by the garbage
  collector, closes itself and drops an error of its `close` without a report (CPython's io finalizer, outside
  its development mode), a signal raised there among them. So once an Interrupted is raised a watchdog thread
  sends the signal again every WATCH_S (a probe): where the main thread is handling an interrupt (in an
  `except` or `finally` on the way out, or what those call) the probe does nothing, and where it is not, the
  interrupt was lost and is raised again. The watchdog ends with the outermost `stop_on_signals`, or when the
  command has caught the interrupt for good (`acknowledge`);
* clean-up and writes that must not be cut in half (unlinking shared memory, writing a checkpoint or a log
  record): inside `deferred()` a signal is held and raised when the block ends, unless the run is already
  stopping (a block that ends by another exception gets the signal sent again just after).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import signal
import sys
import threading
import time
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_S = 0.01  # a signal that arrived inside a callback is sent again this much later (seconds)
WATCH_S = 1.0  # once an Interrupted is raised, the watchdog checks this often that it was not lost (seconds)


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
    acknowledged = False  # the command caught the Interrupted for good: the watchdog stops (acknowledge())
    probe = False  # the pending signal is the watchdog's probe, not one from outside
    watchdog: threading.Thread | None = None
    lock = threading.Lock()  # the watchdog sends a probe only while the handlers are ours


def _handler(signum: int, frame) -> None:
    if _State.probe:  # the watchdog asks whether the Interrupted raised before is still on its way out
        _State.probe = False
        if _State.stopping is None or _handling_interrupt():
            return
        signum, _State.stopping = _State.stopping, None  # it is not: something swallowed it; raise it again
    if _inside_callback(frame):  # raised here, it would be reported and dropped: raise it after the callback
        _deliver_later(signum)
        return
    if _State.defer:
        _State.held = _State.held or signum
        return
    _raising(signum)


def _raising(signum: int):
    """Raise Interrupted(signum), watched (the module docstring)."""
    _State.stopping = signum
    _watch()
    raise Interrupted(signum)


def acknowledge() -> None:
    """The caller has caught the Interrupted and ends the run (the CLI, printing its line): no more probes."""
    _State.acknowledged = True


def _handling_interrupt() -> bool:
    """Whether the main thread (where a signal handler runs) is handling a KeyboardInterrupt, or an exception
    raised while handling one (its __context__ or __cause__ chain)."""
    e, seen = sys.exc_info()[1], set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _watch() -> None:
    """Start the watchdog, if it is not running: while the handlers are ours and an interrupt is on its way
    out, not acknowledged, it sends that signal to the main thread every WATCH_S, as a probe."""
    if _State.watchdog is not None and _State.watchdog.is_alive():
        return
    _State.watchdog = threading.Thread(target=_watchdog, name="interrupts-watchdog", daemon=True)
    _State.watchdog.start()


def _watchdog() -> None:
    while True:
        time.sleep(WATCH_S)
        with _State.lock:
            signum = _State.stopping
            if not _State.active or _State.acknowledged or signum is None:
                return
            _State.probe = True
            signal.pthread_kill(_main_thread_id(), signum)


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
        _State.acknowledged = _State.probe = False
        sys.unraisablehook = _unraisable
    _State.active += 1
    for s in STOP_SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        with _State.lock:  # no probe after this (one already sent runs in our handler: signal.signal runs
            _State.active -= 1  # pending signals' handlers before it changes one)
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if not _State.active:
            sys.unraisablehook = hook


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a stop signal is held; it is raised when the block ends, unless the run is already stopping.

    For clean-up and writes that must finish (unlinking shared memory, a checkpoint, a log record) and are short.
    A block that ends by another exception (which a caller may handle) gets the held signal sent again just after.
    Outside `stop_on_signals` (or off the main thread) it does nothing.
    """
    if not _State.active or threading.get_ident() != _main_thread_id():
        yield
        return
    _State.defer += 1
    raised = False
    try:
        yield
    except BaseException:
        raised = True
        raise
    finally:
        _State.defer -= 1
        held, stopping = _State.held, _State.stopping
        if not _State.defer and held is not None:
            _State.held = None
            if stopping is None and raised:  # the block raised something else, which a caller may handle: after it
                _deliver_later(held)
            elif stopping is None:  # not already on the way out: stop now
                _raising(held)


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
