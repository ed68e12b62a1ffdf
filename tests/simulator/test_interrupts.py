"""simulator.interrupts: a stop signal is an exception in the main thread, never swallowed, never cut in half."""

import gc
import os
import signal
import time

import pytest

from simulator.interrupts import WATCH_S, Interrupted, acknowledge, deferred, stop_on_signals


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_is_interrupted_with_its_exit_code(sig):
    before = signal.getsignal(sig)
    with pytest.raises(Interrupted) as e, stop_on_signals():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # a blocking wait ends at once
    assert e.value.signum == sig and e.value.exit_code == 128 + sig
    assert e.value.adding("train: kept 3").line() == f"interrupted ({signal.Signals(sig).name}): train: kept 3"
    assert signal.getsignal(sig) is before  # restored


def test_a_signal_inside_a_garbage_collector_callback_is_raised_after_it(capsys):
    """JAX's _xla_gc_callback once swallowed a Ctrl-C ("Exception ignored in: <function _xla_gc_callback>") and
    `compare` ran on: raised after the callback instead, even into a blocking wait."""
    def callback(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # bytecodes where the handler runs

    gc.callbacks.append(callback)
    try:
        t0 = time.monotonic()
        with pytest.raises(Interrupted), stop_on_signals():
            gc.collect()
            gc.callbacks.remove(callback)
            time.sleep(10)
        assert time.monotonic() - t0 < 5
    finally:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    assert "Exception ignored" not in capsys.readouterr().err


def test_an_interrupt_a_callback_swallowed_is_delivered_again(capsys):
    """A finalizer that catches nothing: the interrupt raised in it reaches sys.unraisablehook, which sends the
    signal again."""
    class Finalized:
        def __del__(self):
            raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted) as e, stop_on_signals():
        Finalized()  # dropped at once: __del__ runs, its exception is "ignored"
        time.sleep(10)
    assert e.value.signum == signal.SIGTERM
    assert "Exception ignored" not in capsys.readouterr().err


def test_an_interrupt_something_swallowed_is_raised_again():
    """C code may clear what its call raised without a word (CPython's io finalizer drops an error of the `close`
    of a file collected unclosed, the signal's Interrupted among them): the watchdog raises it again."""
    t0 = time.monotonic()
    with pytest.raises(Interrupted) as e, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # bytecodes where the handler runs
        except BaseException:  # noqa: BLE001 -- swallowed, as that finalizer does
            pass
        time.sleep(10)
    assert time.monotonic() - t0 < 1 + 2 * WATCH_S and e.value.signum == signal.SIGTERM


def test_the_watchdog_leaves_an_interrupt_on_its_way_out_alone():
    """Its probes during the clean-up of a stopping run (a `finally`, and what it calls) do nothing."""
    done = []

    def clean_up():
        time.sleep(1.5 * WATCH_S)  # probed (a sleep a signal ends is resumed, PEP 475)
        try:
            raise OSError("handled by the clean-up")
        except OSError:  # handling something else, raised while handling the interrupt (its __context__)
            time.sleep(1.5 * WATCH_S)  # probed again
        done.append(True)

    with pytest.raises(Interrupted), stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))
        finally:
            clean_up()
    assert done == [True]


def test_an_acknowledged_interrupt_is_not_raised_again():
    with stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))
        except Interrupted:
            acknowledge()  # as the command line, printing its line
        time.sleep(2.5 * WATCH_S)  # no probe raises it again


def test_a_signal_inside_deferred_waits_for_its_end():
    done = []
    with pytest.raises(Interrupted), stop_on_signals():
        with deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            done.append("clean-up finished")
    assert done == ["clean-up finished"]


def test_a_signal_inside_deferred_is_raised_even_where_an_exception_is_being_handled():
    """A write held inside an `except` block (sys.exc_info() is set there) once dropped the signal it held."""
    with pytest.raises(Interrupted) as e, stop_on_signals():
        try:
            raise ValueError("handled")
        except ValueError:
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
        time.sleep(5)  # not reached
    assert e.value.signum == signal.SIGTERM


def test_a_signal_held_by_a_block_that_raised_something_else_comes_after_it():
    """The other exception goes first (a caller may handle it: a full disk warned about); the signal follows."""
    handled = []
    with pytest.raises(Interrupted) as e, stop_on_signals():
        try:
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                raise OSError("disk full")
        except OSError as err:
            handled.append(str(err))
        time.sleep(5)  # a blocking wait the signal, sent again, ends
    assert handled == ["disk full"] and e.value.signum == signal.SIGINT


def test_a_second_signal_during_the_clean_up_of_the_first_is_dropped():
    done = []
    with pytest.raises(Interrupted) as e, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                done.append("clean-up finished")
    assert done == ["clean-up finished"] and e.value.signum == signal.SIGTERM
