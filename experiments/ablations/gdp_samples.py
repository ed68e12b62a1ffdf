"""Why gdp's PPO adds nothing to its start: what its sampled placements tell PPO.

    python -m experiments.ablations.gdp_samples        # -> experiments/results/ablations/gdp_samples.md

gdp (placeto.methods.gdp) is judged by its one greedy decoding; PPO learns from sampled decodings, each scored
against that greedy one (GdpConfig.baseline "greedy": advantage = greedy objective - sample's), one reward for the
N decisions of a placement. Its list decoder's initialisation decodes m-ETF exactly. For the shipped
`gdp-general` and for the same config at its initialisation (fresh parameters: what PPO starts from), on the first
`--max-graphs` test graphs of every traced family at `--devices` identical K80s: the greedy decoding, `--samples`
sampled decodings (one key per sample), the share of samples better than the policy's own greedy decoding (PPO's
positive advantages), and the greedy, the mean sample (geometric) and the best sample, each as a ratio to the
initialisation's greedy decoding. It tells apart two reasons PPO could fail to move the greedy decoding: samples
that are rarely better (no signal), or better samples whose gain PPO cannot attribute to the decisions that made
it (a signal spread over N decisions). Objectives: placeto.objective (the simulated step time where it fits).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto import distribution as dist  # noqa: E402
from placeto.methods.gdp.model import make_net  # noqa: E402
from placeto.methods.gdp.place import load_run  # noqa: E402
from placeto.methods.gdp.ppo import draw_range, greedy_decoding, init_params, make_task  # noqa: E402
from placeto.policies import resolve_checkpoint  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "ablations"
POLICY = "gdp-general"
K80 = "placeto-k80"


def task_row(config, net, params, task, samples: int, seed: int = 0) -> dict:
    """{greedy_us, better, mean_ratio, best_ratio} of one task: the greedy decoding against `samples` samples."""
    greedy = greedy_decoding(config, net, params, task).acts[0]
    g = float(task.score(greedy[None])[0])
    drawn = draw_range(net, config, params, task, jax.random.key(seed), 0, samples)
    ratio = np.asarray(drawn.objective, np.float64) / g
    return {"greedy_us": g, "better": float(np.mean(ratio < 1.0 - 1e-9)),
            "mean_ratio": float(np.exp(np.mean(np.log(ratio)))), "best_ratio": float(ratio.min())}


def measure(max_graphs: int, devices: int, samples: int, policy: str = POLICY) -> dict[str, list[dict]]:
    """{"shipped": rows, "initialisation": rows}: `task_row` of every test task, per family."""
    config, shipped = load_run(resolve_checkpoint(policy))
    net = make_net(config)
    tasks = [t for fam in dist.families() if not fam.startswith("gen-")
             for t in dist.family_tasks(fam, "test", clusters=((K80, devices),), max_graphs=max_graphs)]
    out = {"shipped": [], "initialisation": []}
    for i, t in enumerate(tasks, 1):
        task = make_task(t.graph, t.cluster, config)
        for label, params in (("shipped", shipped), ("initialisation", init_params(config, task))):
            out[label].append({"family": t.family, "graph": t.graph.name,
                               **task_row(config, net, params, task, samples)})
        print(f"[{i}/{len(tasks)}] {t.graph.name}: better {out['shipped'][-1]['better']:.2f} (shipped), "
              f"{out['initialisation'][-1]['better']:.2f} (initialisation)", flush=True)
    return out


def _gmean(xs) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(xs, np.float64)))))


def report(rows: dict[str, list[dict]], command: str, samples: int, devices: int) -> str:
    init_greedy = {r["graph"]: r["greedy_us"] for r in rows["initialisation"]}
    lines = ["# Why gdp's PPO adds nothing to its start: what its samples tell PPO", "",
             f"Command: `{command}` (this 2-core CPU machine). {samples} sampled decodings per task against the "
             f"greedy decoding, {devices} identical K80s; see the script's docstring.", "",
             "| policy | family | tasks | samples better than own greedy | greedy x init. greedy | "
             "mean sample x init. greedy | best sample x init. greedy |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for label in ("initialisation", "shipped"):
        fams = list(dict.fromkeys(r["family"] for r in rows[label]))
        for fam in [*fams, None]:
            rs = [r for r in rows[label] if fam is None or r["family"] == fam]
            rel = [r["greedy_us"] / init_greedy[r["graph"]] for r in rs]
            name = "**all**" if fam is None else fam
            lines.append(f"| {'gdp-general' if label == 'shipped' else 'initialisation (m-ETF)'} | {name} | "
                         f"{len(rs)} | {100 * np.mean([r['better'] for r in rs]):.1f}% | {_gmean(rel):.3f} | "
                         f"{_gmean([x * r['mean_ratio'] for x, r in zip(rel, rs)]):.3f} | "
                         f"{_gmean([x * r['best_ratio'] for x, r in zip(rel, rs)]):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-graphs", type=int, default=2, help="test graphs per traced family (default %(default)s)")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--samples", type=int, default=64, help="sampled decodings per task (default %(default)s)")
    ap.add_argument("--out", default=str(RESULTS / "gdp_samples.md"))
    args = ap.parse_args(argv)
    rows = measure(args.max_graphs, args.devices, args.samples)
    command = "python -m experiments.ablations.gdp_samples " + shlex.join(argv if argv is not None else sys.argv[1:])
    atomic_write_bytes(Path(args.out), report(rows, command.strip(), args.samples, args.devices).encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
