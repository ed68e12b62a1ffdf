"""How well a Placeto policy has learned its teacher, on graphs it never trained on.

The teacher (placeto.methods.placeto.teacher) is the best single move at each step of the pass; training imitates
it on the states the policy visits. For each policy and task this runs the policy's greedy one pass (every device
also simulated at every step, for the teacher's targets there) and the teacher's own sweep from the same start,
and reports: agreement with the teacher's accepted devices (all steps; the steps whose best is a move: recall;
the policy's moves: precision), and the pass, the teacher's sweep and the start against m-ETF (geometric means).

    python -m experiments.reproduce.imitation --policy general --policy runs/generalization/placeto-without-none \
        --tasks validation --held-out none

Tasks: `validation` (experiments.reproduce.generalization.validation_tasks: train-split graphs past those trained
on, of the families a run held out of GROUP trains on) or `test` (the test splits of GROUP's families, or of every
family for none) on the identical-K80 clusters. Writes experiments/results/reproduce/imitation_<tasks>_<group>.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.reproduce import generalization as G  # noqa: E402
from placeto import distribution as dist  # noqa: E402
from placeto.baselines import run_method  # noqa: E402
from placeto.methods.placeto import env as E  # noqa: E402
from placeto.methods.placeto.config import parse_overrides  # noqa: E402
from placeto.methods.placeto.place import load_policy_params  # noqa: E402
from placeto.methods.placeto.policy import make_policy  # noqa: E402
from placeto.methods.placeto.teacher import imitation  # noqa: E402
from placeto.objective import score_batch  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "reproduce"
K80 = (("placeto-k80", 2), ("placeto-k80", 4), ("placeto-k80", 8))
MAX_NODES = 600  # larger graphs are placed coarsened by `place`; the teacher's D calls per step grow with N


def tasks_of(kind: str, held_out: str, max_graphs: int) -> list[dist.Task]:
    """The tasks of `--tasks kind` (see the module docstring), at most MAX_NODES nodes."""
    if kind == "validation":
        tasks = [t for t in G.validation_tasks(held_out) if t.cluster.name == "placeto-k80"]
    else:
        fams = [f for f in dist.families() if held_out == "none" or dist.group_of(f) == held_out]
        tasks = [t for f in fams for t in dist.family_tasks(f, "test", clusters=K80, max_graphs=max_graphs)]
    return [t for t in tasks if t.graph.n_nodes <= MAX_NODES]


def measure(policy_name: str, tasks: list[dist.Task], overrides: dict | None = None) -> list[dict]:
    """One row per task: the imitation figures and the objectives (us) of etf, the start, the pass, the teacher.

    overrides: PlacetoConfig fields to place with (e.g. passes, undo_worse), not the model's.
    """
    config, params = load_policy_params(policy_name)
    config = config.replace(**(overrides or {}))
    policy = make_policy(config)
    rows = []
    for t in tqdm(tasks, desc=Path(policy_name).name, unit="task"):
        ctx = E.make_context(t.graph, t.cluster, config)
        t0 = time.perf_counter()
        im = imitation(policy, params, ctx)
        etf = float(score_batch(t.graph, run_method("etf", t.graph, t.cluster, 0).placement[None], t.cluster)[0])
        rows.append({"family": t.family, "graph": t.graph.name, "devices": t.cluster.n_devices, "etf": etf,
                     **im._asdict(), "seconds": time.perf_counter() - t0})
    return rows


def _mean(v) -> float:
    v = np.asarray([x for x in v if not math.isnan(x)], np.float64)
    return float(v.mean()) if v.size else math.nan


def table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| policy | family | tasks | agreement | move recall | move precision | start | pass | teacher's sweep "
             "| pass / sweep |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in results.items():
        fams = sorted({r["family"] for r in rows})
        for fam in [*fams, "all"]:
            sel = [r for r in rows if fam in ("all", r["family"])]
            cell = f"**{fam}**" if fam == "all" else fam
            lines.append(
                f"| {name} | {cell} | {len(sel)} | {_mean(r['agreement'] for r in sel):.3f} | "
                f"{_mean(r['move_recall'] for r in sel):.3f} | {_mean(r['move_precision'] for r in sel):.3f} | "
                f"{G._gm(r['start_objective'] / r['etf'] for r in sel):.3f} | "
                f"{G._gm(r['policy_objective'] / r['etf'] for r in sel):.3f} | "
                f"{G._gm(r['teacher_objective'] / r['etf'] for r in sel):.3f} | "
                f"{G._gm(r['policy_objective'] / r['teacher_objective'] for r in sel):.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", action="append", required=True, help="shipped name or run directory (repeatable)")
    p.add_argument("--tasks", choices=("validation", "test"), default="validation")
    p.add_argument("--held-out", default="none", help="group (placeto.distribution.GROUPS) or none")
    p.add_argument("--max-graphs", type=int, default=4, help="test graphs per family (--tasks test)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="PlacetoConfig fields to place with (not model fields), e.g. undo_worse=true")
    args = p.parse_args(argv)
    overrides = parse_overrides(args.set)
    tasks = tasks_of(args.tasks, args.held_out, args.max_graphs)
    results = {name: measure(name, tasks, overrides) for name in args.policy}
    command = "python -m experiments.reproduce.imitation " + " ".join(sys.argv[1:] if argv is None else argv)
    text = "\n".join([
        f"# Imitation of the teacher ({args.tasks} tasks, held out: {args.held_out})", "",
        f"Command: `{command}` (this 2-core CPU machine; simulated objectives, identical K80s).", "",
        "The teacher is the best single move at each step (placeto.methods.placeto.teacher); `agreement`: steps "
        "where the policy's greedy device is one the teacher accepts; `move recall`: of the steps whose best is a "
        "move, those where the policy made an accepted move; `move precision`: of the policy's moves, the accepted "
        "ones. `start`, `pass`, `teacher's sweep`: objectives over m-ETF's (geometric means); `pass / sweep`: the "
        "policy's one pass over the teacher's sweep from the same start (1.00: learned perfectly).", "",
        *table(results), ""])
    out = RESULTS / f"imitation_{args.tasks}_{args.held_out}.md"
    atomic_write_bytes(out, text.encode())
    print(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
