"""The shipped policies alone (one greedy episode or forward pass, no search) on every family's test split at
4 devices, next to single device and local search with 1,000 simulator calls; and the greedy placement's wall
time. Placeto policies (general and per family) and gdp policies (gdp-general, gdp-<family>).

    python -m experiments.reproduce.policy_eval

Writes experiments/results/reproduce/shipped_policies.md: per family, mean runtime ratios (policy greedy / local search,
general / the family's own policy), greedy seconds after compilation, compilation seconds; and the greedy time
of every test graph of 250-350 groups.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto.baselines import run_method  # noqa: E402
from simulator.workloads.families import FAMILIES, load_family  # noqa: E402
from placeto.methods.gdp.place import is_gdp_checkpoint, load_run, timed_greedy  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.policies import resolve_checkpoint, shipped_policies  # noqa: E402
from placeto.methods.placeto import guided  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402


def greedy(name: str, graph, cluster) -> tuple[float, float, float]:
    """(runtime us, greedy seconds after compilation, compile seconds) of policy `name` on graph: one greedy
    episode of a Placeto policy, one forward pass (argmax per node) of a gdp policy."""
    if is_gdp_checkpoint(name):
        t0 = time.perf_counter()
        config, params = load_run(resolve_checkpoint(name))
        placement, seconds, first = timed_greedy(config, params, graph, cluster)
        load_s = time.perf_counter() - t0 - seconds - first
        return float(simulate(graph, placement, cluster).runtime), seconds, load_s + first  # compile: load + 1st
    prep = guided.prepare(name, graph, cluster, sampling=False)
    with metered():
        t0 = time.perf_counter()
        placement, _, _ = guided.greedy_with_prior(prep)
        seconds = time.perf_counter() - t0
    return float(simulate(graph, placement, cluster).runtime), seconds, prep.compile_seconds


KINDS = (("Placeto", "general", ""), ("gdp", "gdp-general", "gdp-"))  # (kind, general policy, family prefix)


def main(argv: list[str] | None = None) -> int:
    from simulator.arguments import OneLineParser

    OneLineParser(description="The shipped policies alone (one greedy episode or forward pass, no search) on every "
                  "family's test split at 4 devices -> experiments/results/reproduce/shipped_policies.md (no "
                  "options)").parse_args(argv)
    cluster = cluster_preset("placeto-k80", 4)
    names = [p.name for p in shipped_policies()]
    kinds = [k for k in KINDS if k[1] in names]
    if not kinds:
        print("policy_eval: no shipped general policy (run python -m experiments.reproduce.train_policies first)",
              file=sys.stderr)
        return 2
    lines = ["# Shipped policies alone: greedy zero-shot on the test splits (4 K80s)", "",
             "`python -m experiments.reproduce.policy_eval`: one greedy episode per graph for a Placeto policy, "
             "one forward pass (argmax per node) for a gdp policy; no search, no sampling. Runtimes as a ratio; "
             "mean over the 8 test graphs of each family. Own policy: the family's policy of the same kind (`nmt`, "
             "`gdp-nmt`, ...; — if none is shipped).", "",
             "| kind | family | general x single | general x local-search (1,000 calls) | own policy x local-search | "
             "general x own policy | greedy s (general) | compile s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    timing = []
    ls_cache: dict[str, float] = {}
    for kind, general, prefix in kinds:
        for fam in FAMILIES:
            rows = []
            for g in load_family(fam, "test"):
                single = simulate(g, np.zeros(g.n_nodes, np.int32), cluster).runtime
                if g.name not in ls_cache:
                    ls_cache[g.name] = simulate(g, run_method("local-search", g, cluster, 0, budget=1000).placement,
                                                cluster).runtime
                ls = ls_cache[g.name]
                gen, secs, comp = greedy(general, g, cluster)
                own = greedy(prefix + fam, g, cluster)[0] if prefix + fam in names else np.nan
                rows.append((gen / single, gen / ls, own / ls, gen / own, secs, comp))
                if 250 <= g.n_nodes <= 350:
                    timing.append((kind, g.name, g.n_nodes, secs, comp))
            m = np.nanmean(np.asarray(rows), axis=0)
            cells = ["—" if np.isnan(v) else f"{v:.3f}" for v in m[:4]]
            lines.append(f"| {kind} | {fam} | " + " | ".join(cells) + f" | {m[4]:.3f} | {m[5]:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", "Greedy zero-shot time of the general policies on the test graphs of 250-350 groups (after "
                  "compilation; compilation apart):", "", "| kind | graph | groups | greedy s | compile s |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| {k} | {n} | {c} | {s:.3f} | {comp:.1f} |" for k, n, c, s, comp in timing]
    out = ROOT / "experiments" / "results" / "reproduce" / "shipped_policies.md"
    atomic_write_bytes(out, ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
