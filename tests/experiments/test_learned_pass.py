"""experiments/reproduce/learned_pass.py on one tiny task with an initialised policy: the row (the pass, its
start, local search and sa given the pass's wall time) and the report's figures computed from it."""

from __future__ import annotations

import importlib

import pytest

from placeto import distribution as dist
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.train import train
from simulator.workloads.generated import build, gen_specs


@pytest.fixture(scope="module")
def lp():
    return importlib.import_module("experiments.reproduce.learned_pass")


def test_row_and_report(lp, tmp_path):
    graph, cluster = build(gen_specs("gen-chain", 1, split="test", max_nodes=60)[0])
    task = dist.Task("gen-chain", graph, cluster)
    run = tmp_path / "placeto-without-generated"
    train(tiny(init_placement="etf", undo_worse=True, episodes=0), [(graph, cluster)], None, run)
    row = lp.policy_row(task, run)
    for m in ("placeto", "start", "ls@policy", "sa@policy"):
        assert float(row[f"{m}_us"]) > 0
    assert row["placeto_us"] <= row["start_us"]  # the pass keeps the best placement it visits
    for m in ("ls@policy", "sa@policy"):  # searched for the pass's wall time
        assert float(row[f"{m}_s"]) >= 0.8 * float(row["placeto_s"]) - 1e-3
    full = {"family": "gen-chain", "devices": str(cluster.n_devices), "cluster": cluster.name,
            "single_us": row["start_us"] * 2, "etf_us": row["start_us"], "m-sct_us": row["start_us"], **row}
    md = lp.write_report({"heldout": [full]}, "cmd", {row["key"]: task}, tmp_path).read_text()
    gain = 100 * (1 - row["placeto_us"] / row["start_us"])
    assert f"{gain:.1f}%" in md and "| gen-chain | 1 |" in md
