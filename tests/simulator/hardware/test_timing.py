"""simulator.hardware.timing: interleaved timing rotates the order, warms each step and pauses the collector."""


import pytest




def test_interleaved_timing_rotates_the_order_warms_each_step_and_pauses_the_collector(monkeypatch):
    """simulator.hardware.timing.time_interleaved: after the warm-up of every plan, round r starts at plan r mod P; each
    timed step follows `settle` untimed steps of the same plan, back to back: the collector runs before the
    untimed steps, not between them and the timed one, and is off while they all run."""
    import gc

    import simulator.hardware.timing as H

    calls = []
    monkeypatch.setattr(H, "run_plan", lambda plan, threads=True: calls.append((plan, gc.isenabled())))
    monkeypatch.setattr(H.gc, "collect", lambda: calls.append("collect"))
    times = H.time_interleaved(["a", "b", "c"], repeats=2, warmup=1, settle=2)
    assert [len(t) for t in times] == [2, 2, 2] and gc.isenabled()
    warm = [c for p in "abc" for c in ("collect", (p, False), (p, False))]  # one untimed step, one timed
    settled = [c for p in "abc" for c in ("collect", (p, False), (p, False), (p, False))]  # two untimed, one timed
    round0 = settled
    round1 = settled[4:] + settled[:4]  # b, c, a
    assert calls == warm + round0 + round1
    assert len([c for c in calls if c != "collect"]) == H.interleaved_steps(3, 2, 1, settle=2)
    with pytest.raises(H.InputError, match="settle must be >= 1"):
        H.time_interleaved(["a"], repeats=1, settle=0)
