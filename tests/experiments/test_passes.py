"""experiments/reproduce/passes.py on one tiny task with a tiny initialised policy (no update): the rows of n = 1
and 2 passes (their fields, positive ratios to etf, local search and sa given the pass's wall time), the cache
that resumes, the report and its plot."""

from __future__ import annotations

import importlib

import pytest

from placeto import distribution as dist
from simulator.workloads.generated import build, gen_specs


@pytest.fixture(scope="module")
def ps():
    return importlib.import_module("experiments.reproduce.passes")


def test_rows_resume_and_report(ps, tmp_path):
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.train import train

    graph, cluster = build(gen_specs("gen-chain", 1, split="test", max_nodes=60)[0])
    task = dist.Task("gen-chain", graph, cluster)
    train(tiny(init_placement="etf", episodes=0), [(graph, cluster)], None,
          tmp_path / "runs" / "placeto-without-generated")
    csv_path = tmp_path / "passes.csv"
    rows = ps.measure(tmp_path / "runs", ("generated", "recurrent"), passes=(1, 2), csv_path=csv_path,
                      tasks={"generated": [task]})  # recurrent: no run directory, skipped
    assert [int(r["passes"]) for r in rows] == [1, 2]
    for r in rows:
        assert r["key"] == f"generated|{graph.name}|{cluster.name}|{cluster.n_devices}|{r['passes']}"
        for m in ps.METHODS:
            assert float(r[f"{m}_x_etf"]) > 0 and float(r[f"{m}_us"]) > 0
        budget = float(r["placeto_s"])
        assert budget > 0 and float(r["budget_s"]) == budget
        for m in ("local-search", "sa"):  # each searched for the pass's wall time (it stops at the deadline)
            assert float(r[f"{m}_s"]) >= 0.8 * budget - 1e-3
    assert ps.measure(tmp_path / "runs", ("generated",), passes=(1, 2), csv_path=csv_path,
                      tasks={"generated": [task]}) == rows  # read back from the cache, nothing recomputed
    assert len(csv_path.read_text().splitlines()) == 3
    md = ps.write_report(rows, "python -m experiments.reproduce.passes --groups generated", tmp_path).read_text()
    assert "| 1 |" in md and "| 2 |" in md and "passes_generated.png" in md
    assert (tmp_path / "passes_generated.png").stat().st_size > 0
