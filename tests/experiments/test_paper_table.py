"""experiments/reproduce/paper_table.py on synthetic runs: metrics parsing across resumed calls, the target, the training
needed to reach it and the RNN / Placeto ratios (no training is launched)."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import pytest

PLACETO_FIELDS = ["update", "episode", "graph", "sim_calls", "initial_runtime", "final_runtime", "best_in_batch",
                  "best_runtime", "lower_bound", "wall_s"]
RNN_FIELDS = ["update", "samples", "seconds", "loss", "entropy", "mean_reward", "baseline", "mean_objective_us",
              "batch_best_us", "best_us", "oom_fraction", "sim_calls_per_s"]


@pytest.fixture(scope="module")
def pt():
    return importlib.import_module("experiments.reproduce.paper_table")


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, 0) for k in fields})


def _placeto_run(run: Path, best_us: list[float], wall_s: list[float], calls: list[dict] | None) -> None:
    rows = [{"update": i + 1, "episode": 8 * (i + 1), "graph": "g", "sim_calls": 100 * (i + 1), "best_runtime": b,
             "initial_runtime": 5.5e4, "wall_s": t} for i, (b, t) in enumerate(zip(best_us, wall_s))]
    _write_csv(run / "metrics.csv", PLACETO_FIELDS, rows)
    (run / "config.json").write_text(json.dumps({"passes": 2, "episodes_per_update": 8}))
    if calls is not None:
        (run / "paper_table.json").write_text(json.dumps({"calls": calls}))


def _rnn_run(run: Path, best_us: list[float], seconds: list[float]) -> None:
    rows = [{"update": i, "samples": 16 * (i + 1), "seconds": t, "best_us": b, "batch_best_us": b}
            for i, (b, t) in enumerate(zip(best_us, seconds))]
    _write_csv(run / "metrics.csv", RNN_FIELDS, rows)


def test_resumed_calls_accumulate_wall_time(pt, tmp_path):
    run = tmp_path / "p"
    # call 1: updates 1-2 (clock 10, 20 s); call 2 killed after its checkpoint at update 3 (its clock 12 s);
    # call 3 resumed from update 3 and wrote updates 4-5 on a fresh clock (30, 40 s: compile + updates)
    calls = [{"prior_last_update": None, "first_update": 1, "last_update": 2, "finished": True, "train_s": 20},
             {"prior_last_update": 2, "first_update": None, "last_update": None, "finished": False},
             {"prior_last_update": 4, "first_update": 4, "last_update": 5, "finished": True, "train_s": 40}]
    _placeto_run(run, [5e4, 4.5e4, 4.4e4, 4.2e4, 4e4], [10, 20, 12, 30, 40], calls)
    curve = pt.run_curve(run, "placeto", n_nodes=100)
    assert [p["wall_s"] for p in curve["points"]] == [10, 20, 32, 62, 72]
    assert curve["wall_s"] == 72
    assert [p["mdp_steps"] for p in curve["points"]] == [1600, 3200, 4800, 6400, 8000]  # episodes x 2 passes x 100
    assert curve["placements"] == 40 and curve["sim_calls"] == 500 and curve["best_ms"] == 40.0


def test_clock_resets_without_state(pt, tmp_path):
    run = tmp_path / "r"
    _rnn_run(run, [6e4, 5e4, 4.9e4, 4.8e4], [3, 6, 4, 8])  # a second call without paper_table.json
    curve = pt.run_curve(run, "rnn", n_nodes=None)
    assert [p["wall_s"] for p in curve["points"]] == [3, 6, 10, 14]
    assert [p["sim_calls"] for p in curve["points"]] == [16, 32, 48, 64]
    assert curve["mdp_steps"] is None


def test_parse_summary(pt):
    placeto = ("/tmp/x: 16 episodes (8 now, 47 s, 0.17 episodes/s, 33 simulator calls/s)\n"
               "  best nmt_l2: 48.367 ms -> /tmp/x/best/nmt_l2.json\n")
    rnn = ("/tmp/y: rnn, 2 updates, 32 placements (1 updates now, 41 s, 0 simulator calls/s)\n"
           "  best nmt_l2@2d: 47.631 ms -> /tmp/y/best/nmt_l2@2d.json\n")
    assert pt.parse_summary(placeto, "placeto", 8) == (1, 47.0)
    assert pt.parse_summary(rnn, "rnn") == (1, 41.0)
    assert pt.parse_summary("Traceback ...", "rnn") == (None, None)


def test_report_target_reached_and_ratios(pt, tmp_path):
    runs = tmp_path / "runs"
    # Placeto: best 40 ms; first at or below the target 42 ms (1.05 x 40) at update 3: 24 episodes, 300 calls
    _placeto_run(runs / "g_2d_placeto_s0", [5e4, 4.5e4, 4.1e4, 4e4], [10, 20, 30, 40],
                 [{"prior_last_update": None, "first_update": 1, "last_update": 4, "finished": True, "train_s": 40}])
    # RNN: best 41 ms, reaches 42 ms at its 8th update: 128 placements, 24 s
    _rnn_run(runs / "g_2d_rnn_s0", [6e4, 5.5e4, 5e4, 4.8e4, 4.6e4, 4.4e4, 4.3e4, 4.2e4, 4.15e4, 4.1e4],
             [3.0 * (i + 1) for i in range(10)])
    # a second row where the RNN never reaches Placeto's target
    _placeto_run(runs / "g_4d_placeto_s0", [5e4, 3e4], [10, 20],
                 [{"prior_last_update": None, "first_update": 1, "last_update": 2, "finished": True, "train_s": 20}])
    _rnn_run(runs / "g_4d_rnn_s0", [6e4, 5e4, 4e4], [5, 10, 15])
    entries = [{"graph": "g", "devices": d, "seed": 0, "method": m, "run_dir": runs / f"g_{d}d_{m}_s0"}
               for d in (2, 4) for m in ("placeto", "rnn")]
    refs = {("g", 2): {"single_ms": 60.0, "expert_ms": 45.0, "n_nodes": 100},
            ("g", 4): {"single_ms": 60.0, "expert_ms": 25.0, "n_nodes": 100}}
    out = tmp_path / "results"
    rows = pt.build_report(entries, refs, out, plots=True, budgets={"placeto": (20, 2000), "rnn": (20, 10**6)})
    by = {(r["devices"], r["method"]): r for r in rows}
    p, r = by[(2, "placeto")], by[(2, "rnn")]
    assert p["target_ms"] == pytest.approx(42.0)
    assert (p["reached"], p["placements_to_target"], p["sim_calls_to_target"], p["mdp_steps_to_target"],
            p["wall_s_to_target"]) == (True, 24, 300, 24 * 2 * 100, 30)
    assert (r["reached"], r["placements_to_target"], r["sim_calls_to_target"], r["wall_s_to_target"]) == \
        (True, 128, 128, 24)
    assert by[(4, "rnn")]["reached"] is False and by[(4, "placeto")]["placements_to_target"] == 16

    md = (out / "paper_table.md").read_text()
    assert "| g | 2 | 0 | 60.00 | 45.00 | 55.00 | 50.00 | 40.00 | 60.00 | 41.00 | 42.00 | yes | yes | 0.80 | 5.33 |" in md
    assert "| g | 2 | 0 | 24 | 4,800 | 300 | 30 | 128 | 24 | 5.33x | 0.43x | 0.80x |" in md
    assert ">3.00x" in md  # 4 devices: the RNN's 48 placements over Placeto's 16 episodes, not reached
    assert "6.1x" in md and "training steps" in md
    assert "fewer placements than the RNN to reach the target in 2 of 2 rows" in md
    assert "beats the human expert in 1 of 2 rows" in md  # 40 ms vs 45 (yes), 30 ms vs 25 (no)
    assert (out / "paper_table_g_2d.png").stat().st_size > 0 and (out / "paper_table_g_4d.png").exists()

    with (out / "paper_table.csv").open() as f:
        saved = list(csv.DictReader(f))
    assert len(saved) == 4 and json.loads(saved[0]["curve"])[2]["best_ms"] == 41.0

    table = [{"graph": "g", "devices": 2, "seed": 0, "expert_ms": 45.0,
              "placeto": {"curve": {"best_ms": 40.0}, "hit": {"placements": 24}},
              "rnn": {"curve": {"best_ms": 41.0, "placements": 160}, "hit": {"placements": 128}}}]
    table[0]["placeto"]["curve"]["placements"] = 32
    s = pt.summarize(table)
    assert s["within_5pct"] == ["g 2d"] and s["beats_expert"] == ["g 2d"]
    assert s["ratios"]["g 2d"][1] == pytest.approx(128 / 24)


def test_reuse_takes_missing_curves_from_an_earlier_csv(pt, tmp_path):
    """--reuse: a run directory that is gone (here the RNN's) gets its curve and budget from an earlier CSV; the
    table is the same and says where those rows came from; a run with metrics of its own keeps them."""
    runs = tmp_path / "runs"
    _placeto_run(runs / "g_2d_placeto_s0", [5e4, 4.5e4, 4.1e4, 4e4], [10, 20, 30, 40],
                 [{"prior_last_update": None, "first_update": 1, "last_update": 4, "finished": True, "train_s": 40}])
    _rnn_run(runs / "g_2d_rnn_s0", [6e4, 5e4, 4.3e4, 4.15e4], [3.0, 6.0, 9.0, 12.0])
    entries = [{"graph": "g", "devices": 2, "seed": 0, "method": m, "run_dir": runs / f"g_2d_{m}_s0"}
               for m in ("placeto", "rnn")]
    refs = {("g", 2): {"single_ms": 60.0, "expert_ms": 45.0, "n_nodes": 100}}
    budgets = {"placeto": (12, 2000), "rnn": (12, 10**6)}
    first = pt.build_report(entries, refs, tmp_path / "a", plots=False, budgets=budgets)
    (runs / "g_2d_rnn_s0" / "metrics.csv").unlink()
    _placeto_run(runs / "g_2d_placeto_s0", [5e4, 3.9e4], [10, 20],  # a new Placeto run: its own curve counts
                 [{"prior_last_update": None, "first_update": 1, "last_update": 2, "finished": True, "train_s": 20}])
    reused = pt.read_reuse(tmp_path / "a" / "paper_table.csv")
    again = pt.build_report(entries, refs, tmp_path / "b", plots=False, budgets=budgets, reused=reused)
    old_rnn, new_rnn = [[r for r in rows if r["method"] == "rnn"][0] for rows in (first, again)]
    assert json.loads(new_rnn["curve"]) == json.loads(old_rnn["curve"])
    assert (new_rnn["best_ms"], new_rnn["wall_s"], new_rnn["budget_minutes"]) == (41.5, 12.0, 12)
    new_p = [r for r in again if r["method"] == "placeto"][0]
    assert new_p["best_ms"] == 39.0 and new_p["target_ms"] == pytest.approx(39.0 * 1.05)
    md = (tmp_path / "b" / "paper_table.md").read_text()
    assert "Curves taken from " + str((tmp_path / "a" / "paper_table.csv").resolve()) in md and "rnn g 2d." in md
    assert "Curves taken from" not in (tmp_path / "a" / "paper_table.md").read_text()
