"""experiments/reproduce/learned_pass.py on one tiny task with an initialised policy: the row (the pass, its
start, local search and sa given the pass's wall time) and the report's figures computed from it."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from placeto import distribution as dist
from placeto.baselines import METHODS
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.env import LIST_STARTS
from placeto.methods.placeto.train import train
from placeto.objective import fits_threshold, score_batch
from simulator import simulate
from simulator.model.cluster import with_memory
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


def test_earlier_rows_rescored_only_where_their_placement_is_known_and_does_not_fit(lp, tmp_path):
    """The earlier recipe's row keeps its figure unless it returned its start and that start matches no list
    candidate that fits today: then it scores as the least candidate that does not fit (devices too small for the
    single device's placement, so at least one candidate does not)."""
    graph, cluster = build(gen_specs("gen-chain", 1, split="test", max_nodes=60)[0])
    one = simulate(graph, METHODS["single"](graph, cluster), cluster)
    small = with_memory(cluster, 0.6 * float(np.max(one.peak_memory)))
    task = dist.Task("gen-chain", graph, small)
    names = (*LIST_STARTS["list"], "single")
    scores = score_batch(graph, np.stack([np.asarray(METHODS[m](graph, small), np.int32) for m in names]), small)
    fits = scores < fits_threshold(graph, small)
    assert not fits.all()
    moved = lp.earlier_row(task, {"placeto_us": "10.0", "start_us": "20.0"})
    assert (moved["rescored_us"], moved["how"]) == (10.0, "as recorded")
    unknown = lp.earlier_row(task, {"placeto_us": "1.5", "start_us": "1.5"})  # a start no fitting candidate scores
    assert unknown["rescored_us"] == round(float(scores[~fits].min()), 3) and unknown["how"].startswith("its start")
    for s in scores[fits]:  # a start that fits scored the same then: kept
        kept = lp.earlier_row(task, {"placeto_us": str(s), "start_us": str(s)})
        assert kept["how"] == "as recorded"
    rows = [{"key": unknown["key"], "family": "gen-chain", "etf_us": "3.0", "placeto_us": "2.0"}]
    (tmp_path / lp.EARLIER).write_text("key,placeto_us,start_us\n" + f"{unknown['key']},1.5,1.5\n")
    table = "\n".join(lp.earlier_table(rows, {unknown["key"]: task}, tmp_path))
    assert "| gen-chain | 1 | 0.500 |" in table and "| yes |" in table
