"""experiments.benchmarks.staged_refit: the staged model simulated again on measurements staged_fidelity dumped."""

from pathlib import Path

import numpy as np
import pytest

from experiments.benchmarks.staged_refit import (committed, fixed_times, load_record, per_value_receives,
                                                 reproduced, resimulate, statistics)
from simulator.measure.boundary_costs import Observed
from simulator.engine.staged import RigCosts

DUMP = Path(__file__).resolve().parents[2] / "experiments" / "results" / "benchmarks" / "staged_fidelity_dump"
CACHED = RigCosts(launch_us=20.0, launch_us_per_input=5.0, step_us=100.0, send_us=40.0, send_us_per_value=10.0,
                  send_us_per_mb=80.0, recv_us=50.0, recv_us_per_value=30.0, recv_us_per_mb=90.0, latency_us=120.0)


def test_the_committed_fit_simulates_again_what_eval_simulated():
    """The dumped ptb_006 (staged_fidelity --dump): the committed fit re-simulates every placement's recorded staged
    time (eval's column), the single device at its measured median (the anchor); a changed staged model breaks
    this until the dump is taken again."""
    rec = load_record(DUMP / "ptb_006.json")
    assert reproduced(rec) < 1e-6
    rows = resimulate(rec, per_value_receives, drift=True)
    assert [r[0] for r in rows] == [p["name"] for p in rec.placements]
    single = next(r for r in rows if not r[3])
    assert single[1] == pytest.approx(single[2], rel=1e-9)
    spearman, median_err = statistics(rows)
    assert -1.0 <= spearman <= 1.0 and median_err >= 0.0


def test_per_value_receives_fits_a_factor_of_the_cached_charges_and_a_per_value_cost():
    rng = np.random.default_rng(0)
    values, mb = rng.integers(1, 200, 30).astype(float), rng.uniform(0.1, 20.0, 30)
    waited = rng.random((30, 3)) < 0.5
    charged = np.asarray([[CACHED.send_cost(m * 1e6, v) + CACHED.recv_cost(m * 1e6, v) + CACHED.latency_us * w
                           for w in ws] for v, m, ws in zip(values, mb, waited)])
    taken = 0.7 * charged + 45.0 * values[:, None]
    none = np.zeros(0)
    obs = Observed(none, none, none, none, none, values, mb, taken, waited)
    got = per_value_receives(obs, CACHED)
    assert got.recv_us_per_value == pytest.approx(0.7 * CACHED.recv_us_per_value + 45.0, rel=1e-6)
    assert got.latency_us == pytest.approx(0.7 * CACHED.latency_us, rel=1e-6)
    assert got.send_us_per_mb == pytest.approx(0.7 * CACHED.send_us_per_mb, rel=1e-6)
    assert committed(obs, CACHED).recv_us_per_value != pytest.approx(got.recv_us_per_value)  # one factor only
    moved = fixed_times(got, 2.0)
    assert (moved.launch_us, moved.latency_us, moved.step_us) == (2 * got.launch_us, 2 * got.latency_us, 200.0)
    assert moved.recv_us_per_mb == got.recv_us_per_mb  # per MB: not a fixed cost


@pytest.mark.parametrize("text,says", [
    ("not json", "not valid JSON"),
    ("[1, 2]", "the record: expected an object"),
    ('{"graph": "ptb_006"}', "the record: missing field 'kind'"),
])
def test_a_malformed_dump_is_one_line_naming_the_file(tmp_path, text, says):
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        load_record(path)
    message = str(exit_.value)
    assert message.startswith(f"{path}: not a staged_fidelity dump") and says in message and "\n" not in message


def test_a_dump_without_a_placement_field_names_it(tmp_path):
    import json

    rec = json.loads((DUMP / "ptb_006.json").read_text())
    del rec["placements"][2]["order"]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(SystemExit, match=r"placements\[2\]: missing field 'order'"):
        load_record(path)
