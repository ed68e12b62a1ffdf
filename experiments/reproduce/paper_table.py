"""The Placeto paper's headline table (Addanki et al., NeurIPS 2019): Placeto and the 2017 RNN placer
(Mirhoseini et al.) each trained FROM SCRATCH on one graph, on the paper's rows (Inception-V3, NMT and NASNet at 2
and 4 K80s, cluster preset placeto-k80), and the training each needs to find a placement on par with the best.
The paper: "Placeto requires up to 6.1x fewer training steps than the RNN-based approach to find placements on par
or better".

Every (graph, devices, method, seed) is one ordinary training run, driven through the `placeto` command line:

    placeto train --graph G --devices D --method placeto|rnn --out RUN --minutes M --episodes E --seed S [--set ...]

in its own run directory (default runs/paper_table/<graph>_<D>d_<method>_s<seed>). A run's budget is
--minutes-per-run minutes of accumulated training wall time or its episode budget (--episodes-placeto /
--episodes-rnn), whichever comes first. `placeto train` resumes from the run's checkpoint, so a killed script
continues where it stopped: RUN/paper_table.json records every call (its metric rows and training seconds) and the
next call gets the remaining minutes. The subprocesses' output goes to RUN/paper_table.log.

Units of training (the paper counts "training steps"; we report both of our units and wall time):
  placements     complete placements sampled: Placeto episodes (an episode places every node once per pass, starting
                 from the config's init_placement), RNN samples (one sample = one complete placement)
  simulator calls  RNN: one per sample; Placeto: one per MDP step that changed the placement (its metrics'
                 sim_calls). Placeto's best-so-far is over every placement it simulated, intermediate ones included.
  MDP steps      Placeto only: episodes x passes x N (N = nodes of the simulated graph)
  wall seconds   accumulated training time of the calls (`placeto train`'s own clock: jit compilation included, JAX
                 start-up excluded); work lost to a kill (rows after the last checkpoint) is redone and not counted
Both methods log one metrics row per update (Placeto: episodes_per_update episodes, 1 by default; RNN: 16
samples by default), so the training needed to reach a target is resolved to an update.

Per (graph, devices, seed) the target is 1.05 x the better of the two methods' best runtimes; for each method the
training at its first metrics row whose best-so-far is at or below the target ("not reached" with its budget
otherwise), and the ratios RNN / Placeto. Placeto reaches the target exactly when it is within 5% of the best
learned placement.

    python -m experiments.reproduce.paper_table                    # the full table (hours: 12 runs x 20 min)
    python -m experiments.reproduce.paper_table --report           # rebuild the table and plots from the runs
    python -m experiments.reproduce.paper_table --methods placeto  # rerun Placeto alone, then the table with the
    python -m experiments.reproduce.paper_table --report --reuse experiments/results/reproduce/paper_table.csv
                                                                   # earlier runs' RNN curves from the shipped CSV
    python -m experiments.reproduce.paper_table --graphs nmt_l2 --devices 2 --minutes-per-run 0.5 \\
        --runs /tmp/pt_smoke --out-dir /tmp/pt_smoke_results           # a smoke test

Writes <out-dir>/paper_table.md (the table), paper_table.csv (a row per run, its curve as JSON) and
paper_table_<graph>_<D>d.png (best-so-far curves); `--name` changes the stem. The Placeto runs of the paper's own
recipe (the single-device start, every move kept; before the schedule inputs existed), kept as
paper_table_paper_recipe.md:

    python -m experiments.reproduce.paper_table --placeto-set init_placement=single undo_worse=false \
        schedule_features=false --runs runs/paper_table_paper --name paper_table_paper_recipe
    python -m experiments.reproduce.paper_table --report --runs runs/paper_table_paper \
        --reuse experiments/results/reproduce/paper_table_paper_recipe.csv --name paper_table_paper_recipe Imports only the simulator (single-device and expert runtimes);
training runs in subprocesses.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "datasets" / "benchmarks"
GRAPHS = ["inception_v3", "nmt_l2", "nasnet"]  # the paper's rows (nmt_l4 is an optional extra row)
METHODS = ["placeto", "rnn"]
PRESET = "placeto-k80"
WITHIN = 1.05
PAPER_RATIO = 6.1
# Placeto's settings here: generalization.placeto_config's recipe (the list-scheduler start, a move that does not
# help undone, the schedule inputs, the "improving" counterfactual target). The paper's own recipe (the single
# device start, every move kept) is `--placeto-set init_placement=single undo_worse=false` (paper_table_paper_recipe.md).
PLACETO_SET = ["init_placement=list", "undo_worse=true", "schedule_features=true", "counterfactual=true",
               "counterfactual_loss=improving", "gamma=0.0", "entropy=0.003", "entropy_end=0.0", "grad_steps=32"]
NAME = "paper_table"  # the stem of the files written (--name)
STATE = "paper_table.json"
LOG = "paper_table.log"
CSV_FIELDS = ["graph", "devices", "seed", "method", "run_dir", "single_ms", "expert_ms", "start_ms", "best_ms", "target_ms",
              "reached", "placements_to_target", "sim_calls_to_target", "mdp_steps_to_target", "wall_s_to_target",
              "placements", "sim_calls", "mdp_steps", "wall_s", "budget_minutes", "budget_placements",
              "budget_reached_by", "calls", "curve"]


# ---- the runs ------------------------------------------------------------------------------------------------------
def graph_file(graph: str) -> Path:
    """A benchmark name (nmt_l2) or a graph file path."""
    p = Path(graph)
    if p.suffix in (".gz", ".json") or p.exists():
        return p
    return BENCHMARKS / f"{graph}.json.gz"


def graph_name(graph: str) -> str:
    name = Path(graph).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def run_dir(runs: Path, graph: str, devices: int, method: str, seed: int) -> Path:
    return Path(runs) / f"{graph_name(graph)}_{devices}d_{method}_s{seed}"


def placeto_command() -> list[str]:
    """The `placeto` console script beside this interpreter (there is no placeto/__main__.py)."""
    script = Path(sys.executable).parent / "placeto"
    if script.exists():
        return [str(script)]
    found = shutil.which("placeto")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from placeto.cli.main import main; sys.exit(main())"]


def read_metrics(run: Path) -> list[dict[str, str]]:
    """RUN/metrics.csv as dict rows (empty when absent); rows without an integer update are skipped."""
    path = Path(run) / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if (r.get("update") or "").strip().lstrip("-").isdigit()]


def load_state(run: Path) -> dict:
    path = Path(run) / STATE
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    return {"calls": []}


def save_state(run: Path, state: dict) -> None:
    path = Path(run) / STATE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    os.replace(tmp, path)


def time_field(method: str) -> str:
    return "wall_s" if method == "placeto" else "seconds"


def placements_field(method: str) -> str:
    return "episode" if method == "placeto" else "samples"


def last_update(rows: list[dict]) -> int | None:
    return int(rows[-1]["update"]) if rows else None


SUMMARY = {  # the last lines `placeto train` prints
    "placeto": re.compile(r"(\d+) episodes \((\d+) now, ([\d.]+) s"),
    "rnn": re.compile(r"(\d+) updates, (\d+) placements \((\d+) updates now, ([\d.]+) s"),
}


def parse_summary(text: str, method: str, episodes_per_update: int = 8) -> tuple[int | None, float | None]:
    """(updates done in this call, its seconds) from `placeto train`'s summary line, (None, None) without one."""
    found = SUMMARY[method].findall(text)
    if not found:
        return None, None
    last = found[-1]
    if method == "placeto":
        return int(last[1]) // max(episodes_per_update, 1), float(last[2])
    return int(last[2]), float(last[3])


def segments(rows: list[dict], state: dict, method: str) -> tuple[list[float], float]:
    """(cumulative training seconds of every row, total seconds). A row's time is its call's own clock (which
    restarts at every call) plus the seconds of the calls before. A row belongs to the last recorded call whose
    first update is <= its update; rows before any recorded call (or a run without paper_table.json) are split
    where the clock goes back."""
    tf = time_field(method)
    firsts = []
    for c in state.get("calls", []):
        first = c.get("first_update")
        if first is None:
            prior = c.get("prior_last_update")
            first = (prior + 1) if prior is not None else -(10**9)
        firsts.append(first)
    seg_of, prev_t, extra = [], None, 0  # extra: clock resets among unrecorded rows
    for r in rows:
        u, t = int(r["update"]), float(r[tf])
        k = max((i for i, f in enumerate(firsts) if f <= u), default=-1)
        if k == -1:
            if prev_t is not None and t < prev_t:
                extra += 1
            seg = (-1, extra)
        else:
            seg = (k, 0)
        seg_of.append(seg)
        prev_t = t
    seg_time: dict[tuple, float] = {}
    for r, seg in zip(rows, seg_of):
        seg_time[seg] = max(seg_time.get(seg, 0.0), float(r[tf]))
    for i, c in enumerate(state.get("calls", [])):  # a finished call without rows still took its time
        if (i, 0) not in seg_time and c.get("finished"):
            seg_time[(i, 0)] = float(c.get("train_s") or 0.0)
    order = sorted(seg_time)
    offset, acc = {}, 0.0
    for seg in order:
        offset[seg] = acc
        acc += seg_time[seg]
    return [offset[seg] + float(r[tf]) for r, seg in zip(rows, seg_of)], acc


def run_curve(run: Path, method: str, n_nodes: int | None, state: dict | None = None) -> dict:
    """The run's best-so-far curve: points {placements, sim_calls, mdp_steps, wall_s, best_ms} (one per metrics
    row) and its totals."""
    run = Path(run)
    rows = read_metrics(run)
    state = load_state(run) if state is None else state
    cum, total_s = segments(rows, state, method)
    passes = 1
    cfg = run / "config.json"
    if cfg.exists():
        try:
            passes = int(json.loads(cfg.read_text()).get("passes", 1) or 1)
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
    points, best = [], math.inf
    for r, t in zip(rows, cum):
        if method == "placeto":
            placements = int(float(r["episode"]))
            calls = int(float(r["sim_calls"]))
            steps = placements * passes * n_nodes if n_nodes else None
            value = float(r["best_runtime"])
        else:
            placements = int(float(r["samples"]))
            calls, steps, value = placements, None, float(r["best_us"])
        best = min(best, value)
        points.append({"placements": placements, "sim_calls": calls, "mdp_steps": steps, "wall_s": round(t, 3),
                       "best_ms": best / 1e3})
    last = points[-1] if points else {"placements": 0, "sim_calls": 0, "mdp_steps": 0 if method == "placeto" else None}
    start = float(rows[0]["initial_runtime"]) / 1e3 if method == "placeto" and rows else None
    return {"points": points, "best_ms": points[-1]["best_ms"] if points else None, "start_ms": start,
            "placements": last["placements"],
            "sim_calls": last["sim_calls"], "mdp_steps": last["mdp_steps"], "wall_s": round(total_s, 3),
            "calls": len(state.get("calls", []))}


def reached_at(points: list[dict], target_ms: float) -> dict | None:
    """The first point whose best-so-far is at or below the target."""
    for p in points:
        if p["best_ms"] <= target_ms * (1 + 1e-12):
            return p
    return None


def budget_state(run: Path, method: str, minutes: float, episodes: int, n_nodes: int | None = None):
    """(done, remaining seconds, curve, which budget was reached)."""
    curve = run_curve(run, method, n_nodes)
    budget_s = 60.0 * minutes
    remaining = budget_s - curve["wall_s"]
    if curve["placements"] >= episodes:
        return True, remaining, curve, "episodes"
    if remaining <= max(5.0, 0.01 * budget_s):
        return True, remaining, curve, "minutes"
    return False, remaining, curve, None


def train_run(graph: str, devices: int, method: str, seed: int, run: Path, minutes: float, episodes: int,
              sets: list[str], preset: str = PRESET, max_calls: int = 50) -> dict:
    """Train (or continue) one run until its budget is used; returns its curve."""
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    state = load_state(run)
    settings = {"graph": str(graph_file(graph)), "devices": devices, "method": method, "seed": seed,
                "preset": preset, "minutes": minutes, "episodes": episodes, "set": list(sets)}
    if state.get("settings") and state["settings"] != settings:
        print(f"  note: {run} was started with {state['settings']}; continuing with {settings}", flush=True)
    state["settings"] = settings
    save_state(run, state)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    for _ in range(max_calls):
        done, remaining, curve, why = budget_state(run, method, minutes, episodes)
        if done:
            print(f"  done ({why} budget): {curve['placements']} placements, {curve['sim_calls']} simulator calls, "
                  f"{curve['wall_s']:.0f} s, best {_fmt(curve['best_ms'], 3)} ms", flush=True)
            return curve
        call_min = max(remaining / 60.0, 0.05)
        cmd = placeto_command() + ["train", "--graph", str(graph_file(graph)), "--devices", str(devices),
                                   "--preset", preset, "--method", method, "--out", str(run),
                                   "--minutes", f"{call_min:.4f}", "--episodes", str(episodes), "--seed", str(seed)]
        if sets:
            cmd += ["--set", *sets]
        rows = read_metrics(run)
        state = load_state(run)
        call = {"prior_last_update": last_update(rows), "first_update": None, "last_update": None,
                "minutes": round(call_min, 4), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "finished": False}
        state["calls"].append(call)
        save_state(run, state)
        print(f"  call {len(state['calls'])}: {call_min:.2f} min left, {curve['placements']} placements so far",
              flush=True)
        log = run / LOG
        start = log.stat().st_size if log.exists() else 0
        t0 = time.time()
        with log.open("a") as f:
            f.write(f"\n$ {' '.join(cmd)}\n")
            f.flush()
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        proc_s = time.time() - t0
        with log.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        epu = 8
        try:
            epu = int(json.loads((run / "config.json").read_text()).get("episodes_per_update", 8)) \
                if method == "placeto" else 16
        except (OSError, json.JSONDecodeError, ValueError, TypeError):
            pass
        now_updates, call_s = parse_summary(text, method, epu)
        rows = read_metrics(run)
        last = last_update(rows)
        if now_updates is not None and last is not None:
            first = last - now_updates + 1
        else:
            first = (call["prior_last_update"] + 1) if call["prior_last_update"] is not None else None
        state = load_state(run)
        mine = [r for r in rows if first is not None and int(r["update"]) >= first]
        train_s = max((float(r[time_field(method)]) for r in mine), default=None)
        state["calls"][-1].update(first_update=first, last_update=last, rc=rc, proc_s=round(proc_s, 3),
                                  train_s=round(train_s if train_s is not None else (call_s or proc_s), 3),
                                  finished=rc == 0)
        save_state(run, state)
        if rc != 0:
            tail = "\n".join(text.strip().splitlines()[-5:])
            print(f"  FAILED (exit {rc}), see {log}:\n{tail}", flush=True)
            return run_curve(run, method, None)
        if not mine and now_updates == 0:
            print("  no progress in this call; stopping this run", flush=True)
            return run_curve(run, method, None)
    return run_curve(run, method, None)


# ---- the reference runtimes ----------------------------------------------------------------------------------------
def reference_runtimes(graph: str, devices: int, preset: str = PRESET) -> dict:
    """{single_ms, expert_ms (None without one), n_nodes} of the graph on `devices` devices of the preset."""
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from simulator import cluster_preset, load_graph, load_placement, simulate

    g = load_graph(str(graph_file(graph)))
    cluster = cluster_preset(preset, devices)
    gpus = [i for i, d in enumerate(cluster.devices) if getattr(d, "kind", "") != "cpu"] or [0]
    single = simulate(g, np.full(g.n_nodes, gpus[0], dtype=np.int32), cluster).runtime
    expert = None
    shipped = (g.meta.get("expert_placement") or {}).get(str(devices))
    if shipped is not None:
        expert = simulate(g, np.asarray(shipped, dtype=np.int32), cluster).runtime
    else:
        f = graph_file(graph).parent / f"{graph_name(graph)}.expert_{devices}dev.json"
        if f.exists():
            expert = simulate(g, load_placement(str(f), g, devices).assignment.astype(np.int32), cluster).runtime
    return {"single_ms": single / 1e3, "expert_ms": None if expert is None else expert / 1e3, "n_nodes": g.n_nodes}


# ---- the report ----------------------------------------------------------------------------------------------------
def _fmt(x, digits=1):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def _ratio(rnn, placeto, rnn_budget, placeto_budget):
    """RNN / Placeto training to the target: '3.2x', '>3.2x' (RNN not reached: its budget over Placeto's),
    '<0.5x' (Placeto not reached), '-' without numbers."""
    if rnn is not None and placeto is not None:
        return f"{rnn / max(placeto, 1e-12):.2f}x", rnn / max(placeto, 1e-12)
    if rnn is None and placeto is not None and rnn_budget:
        return f">{rnn_budget / max(placeto, 1e-12):.2f}x", None
    if placeto is None and rnn is not None and placeto_budget:
        return f"<{rnn / max(placeto_budget, 1e-12):.2f}x", None
    return "-", None


def _shown(path: str) -> str:
    """`path` relative to the repository where it is inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


def read_reuse(path: Path) -> dict[tuple, dict]:
    """{(graph, devices, seed, method): {curve, minutes, episodes, source}} from an earlier paper_table.csv.

    The curves of runs whose directories are gone (runs/ is not committed): `--reuse` puts them in the table for
    entries without metrics of their own. Rows that do not parse are skipped with a note.
    """
    sys.path.insert(0, str(ROOT))
    from placeto.metrics_log import csv_field_limit  # as this script's other project imports: where they serve

    out = {}
    with Path(path).open(newline="") as f, csv_field_limit(1 << 30):  # a curve is one long field
        for i, r in enumerate(csv.DictReader(f), 2):
            try:
                points = json.loads(r["curve"])
                curve = {"points": points, "best_ms": min(p["best_ms"] for p in points) if points else None,
                         "start_ms": float(r["start_ms"]) if r.get("start_ms") else None,
                         "placements": int(float(r["placements"])), "sim_calls": int(float(r["sim_calls"])),
                         "mdp_steps": int(float(r["mdp_steps"])) if r.get("mdp_steps") else None,
                         "wall_s": float(r["wall_s"]), "calls": int(float(r["calls"] or 0))}
                key = (r["graph"], int(r["devices"]), int(r["seed"]), r["method"])
                budget = (float(r["budget_minutes"]) if r.get("budget_minutes") else None,
                          int(float(r["budget_placements"])) if r.get("budget_placements") else None)
            except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
                print(f"  note: {path} line {i} not reused ({type(e).__name__}: {e})", flush=True)
                continue
            out[key] = {"curve": curve, "minutes": budget[0], "episodes": budget[1], "run_dir": r.get("run_dir"),
                        "source": str(path)}
    return out


def build_report(entries: list[dict], references: dict, out_dir: Path, plots: bool = True,
                 budgets: dict | None = None, reused: dict | None = None, name: str = NAME) -> list[dict]:
    """Table, CSV and plots from the runs.

    entries: {graph, devices, seed, method, run_dir} (runs without metrics are listed as missing, unless `reused`,
    `read_reuse`'s, holds the entry's curve); references: {(graph name, devices): {single_ms, expert_ms, n_nodes}};
    budgets: {method: (minutes, episodes)} for the "not reached" cells; `name`: the stem of the files written
    (<name>.md, <name>.csv, <name>_<graph>_<D>d.png). Returns the CSV rows."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budgets, reused = budgets or {}, reused or {}
    taken = []  # (graph, devices, seed, method) of the curves taken from `reused`
    rows_out, table_rows, used_budgets = [], [], {}
    keys = []
    for e in entries:
        k = (graph_name(e["graph"]), int(e["devices"]), int(e["seed"]))
        if k not in keys:
            keys.append(k)
    curves = {}
    for e in entries:
        g = graph_name(e["graph"])
        ref = references.get((g, int(e["devices"]))) or {}
        key = (g, int(e["devices"]), int(e["seed"]), e["method"])
        if not read_metrics(e["run_dir"]) and key in reused:
            curve, e = reused[key]["curve"], {**e, "reused": reused[key]}
            taken.append(key)
        else:
            curve = run_curve(Path(e["run_dir"]), e["method"], ref.get("n_nodes"))
        curves[key] = (curve, e)
    for g, d, s in keys:
        ref = references.get((g, d)) or {}
        got = {m: curves.get((g, d, s, m)) for m in METHODS}
        bests = [v[0]["best_ms"] for v in got.values() if v is not None and v[0]["best_ms"] is not None]
        target = WITHIN * min(bests) if bests else None
        row = {"graph": g, "devices": d, "seed": s, "single_ms": ref.get("single_ms"),
               "expert_ms": ref.get("expert_ms"), "target_ms": target}
        for m in METHODS:
            if got[m] is None:
                row[m] = None
                continue
            curve, e = got[m]
            hit = reached_at(curve["points"], target) if target is not None and curve["points"] else None
            settings = e["reused"] if "reused" in e else load_state(Path(e["run_dir"])).get("settings") or {}
            minutes, episodes = (settings["minutes"], settings["episodes"]) if settings.get("minutes") \
                else budgets.get(m, (None, None))
            used_budgets.setdefault(m, set()).add((minutes, episodes))
            why = None
            if curve["points"]:
                if episodes is not None and curve["placements"] >= episodes:
                    why = "episodes"
                elif minutes is not None and curve["wall_s"] >= 60 * minutes - max(5.0, 0.6 * minutes):
                    why = "minutes"
            row[m] = {"curve": curve, "hit": hit}
            rows_out.append({
                "graph": g, "devices": d, "seed": s, "method": m,
                "run_dir": str(e["reused"]["run_dir"] if "reused" in e else e["run_dir"]),
                "single_ms": ref.get("single_ms"), "expert_ms": ref.get("expert_ms"),
                "start_ms": curve.get("start_ms"), "best_ms": curve["best_ms"],
                "target_ms": target, "reached": hit is not None,
                "placements_to_target": hit and hit["placements"], "sim_calls_to_target": hit and hit["sim_calls"],
                "mdp_steps_to_target": hit and hit["mdp_steps"], "wall_s_to_target": hit and hit["wall_s"],
                "placements": curve["placements"], "sim_calls": curve["sim_calls"], "mdp_steps": curve["mdp_steps"],
                "wall_s": curve["wall_s"], "budget_minutes": minutes, "budget_placements": episodes,
                "budget_reached_by": why, "calls": curve["calls"], "curve": json.dumps(curve["points"])})
        table_rows.append(row)
    with (out_dir / f"{name}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows_out:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    sources = sorted({_shown(reused[k]["source"]) for k in taken})
    (out_dir / f"{name}.md").write_text(markdown(table_rows, used_budgets, taken, sources, name))
    if plots:
        for g, d in dict.fromkeys((g, d) for g, d, _ in keys):
            targets = [r["target_ms"] for r in table_rows if (r["graph"], r["devices"]) == (g, d)]
            plot_row(g, d, [(s, m, curves[(g, d, s, m)][0]) for (gg, dd, s, m) in curves if (gg, dd) == (g, d)],
                     references.get((g, d)) or {}, out_dir / f"{name}_{g}_{d}d.png",
                     [t for t in targets if t is not None])
    return rows_out


def _first(entry) -> str:
    """The best runtime (ms) after the run's first update: what training adds is its best against this."""
    if entry is None or not entry["curve"]["points"]:
        return "-"
    return _fmt(entry["curve"]["points"][0]["best_ms"], 2)


def _rate(entry) -> str:
    """Placements per training second over the whole run ("-" without one)."""
    if entry is None or not entry["curve"]["wall_s"]:
        return "-"
    return _fmt(entry["curve"]["placements"] / entry["curve"]["wall_s"], 2)


def _best(row, m):
    r = row.get(m)
    return None if r is None else r["curve"]["best_ms"]


def summarize(table_rows: list[dict]) -> dict:
    """Per-row comparisons used in the summary (and the tests)."""
    out = {"fewer_placements": [], "within_5pct": [], "beats_expert": [], "ratios": {}}
    for row in table_rows:
        name = f"{row['graph']} {row['devices']}d" + (f" s{row['seed']}" if row["seed"] else "")
        p, r = row.get("placeto"), row.get("rnn")
        if p is None or r is None:
            continue
        ph, rh = p["hit"], r["hit"]
        if ph is not None and (rh is None or ph["placements"] < rh["placements"]):
            out["fewer_placements"].append(name)
        if ph is not None:
            out["within_5pct"].append(name)
        if row["expert_ms"] is not None and p["curve"]["best_ms"] is not None \
                and p["curve"]["best_ms"] < row["expert_ms"]:
            out["beats_expert"].append(name)
        text, value = _ratio(rh and rh["placements"], ph and ph["placements"], r["curve"]["placements"],
                             p["curve"]["placements"])
        out["ratios"][name] = (text, value)
    return out


def markdown(table_rows: list[dict], budgets: dict[str, set], reused: list[tuple] = (),
             sources: list[str] = (), name: str = "paper_table") -> str:
    def budget_text(m, curve):
        unit = "episodes" if m == "placeto" else "placements"
        return f"not reached ({_fmt(curve['placements'])} {unit}, {_fmt(curve['wall_s'], 0)} s)"

    lines = [
        "# Placeto vs the RNN placer, trained from scratch per graph (the paper's headline table)",
        "",
        "Addanki et al. (NeurIPS 2019): *\"Placeto requires up to 6.1x fewer training steps than the RNN-based "
        "approach (Mirhoseini et al. 2017) to find placements on par or better\"*. The paper counts training steps; "
        "we report complete placements (Placeto episodes, RNN samples), simulator calls, Placeto's MDP steps "
        "(episodes x passes x N) and wall seconds.",
        "",
        f"Cluster preset {PRESET}; runtimes are simulated training-step times in ms. Target = {WITHIN} x the better "
        "of the two methods' best runtimes (per row); \"to target\" = the training at the first metrics row (one per "
        "update) whose best-so-far runtime is at or below the target. Budgets per run: "
        + "; ".join(f"{m}: " + ", ".join(f"{b[0]} min or {b[1]} {'episodes' if m == 'placeto' else 'samples'}"
                                         for b in sorted(bs, key=str)) for m, bs in budgets.items())
        + " (whichever comes first).",
        "",
        "Placeto's episodes start where its config's init_placement says (\"Placeto start\": \"list\" is the best of "
        "the list schedulers m-ETF, m-SCT, m-TOPO, HEFT and the single device; \"single\", the paper's, is the single "
        "device); the RNN samples whole placements from its own distribution. \"First update\": the best placement "
        "after one update (Placeto: one episode; the RNN: one batch of samples); the best against it is what training "
        "adds. The run settings are in each run's paper_table.json and config.json.",
        "",
    ]
    if reused:
        lines += ["Curves taken from " + ", ".join(sources) + " (earlier runs of this script whose directories are not "
                  "here; `--reuse`): " + ", ".join(f"{m} {g} {d}d" + (f" s{s}" if s else "") for g, d, s, m in reused)
                  + ".", ""]
    lines += [
        "## Runtimes",
        "",
        "| graph | devices | seed | single device (ms) | human expert (ms) | Placeto start (ms) | Placeto first update "
        "(ms) | Placeto best (ms) | RNN first update (ms) | RNN best (ms) | target (ms) | Placeto beats expert | "
        "Placeto within 5% of best learned | Placeto episodes/s | RNN placements/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table_rows:
        pb, rb = _best(row, "placeto"), _best(row, "rnn")
        beats = "-" if row["expert_ms"] is None or pb is None else ("yes" if pb < row["expert_ms"] else "no")
        within = "-" if row.get("placeto") is None or row["target_ms"] is None else \
            ("yes" if row["placeto"]["hit"] is not None else "no")
        start = row["placeto"]["curve"].get("start_ms") if row.get("placeto") is not None else None
        lines.append(f"| {row['graph']} | {row['devices']} | {row['seed']} | {_fmt(row['single_ms'], 2)} | "
                     f"{_fmt(row['expert_ms'], 2)} | {_fmt(start, 2)} | {_first(row.get('placeto'))} | {_fmt(pb, 2)} | "
                     f"{_first(row.get('rnn'))} | {_fmt(rb, 2)} | "
                     f"{_fmt(row['target_ms'], 2)} | {beats} | {within} | {_rate(row.get('placeto'))} | "
                     f"{_rate(row.get('rnn'))} |")
    lines += [
        "",
        "## Training to reach the target",
        "",
        "| graph | devices | seed | Placeto episodes | Placeto MDP steps | Placeto sim calls | Placeto s | "
        "RNN placements (= sim calls) | RNN s | RNN/Placeto placements | RNN/Placeto sim calls | RNN/Placeto s | "
        "paper |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table_rows:
        p, r = row.get("placeto"), row.get("rnn")
        cells = []
        if p is None:
            cells += ["missing"] * 4
        elif p["hit"] is None:
            cells += [budget_text("placeto", p["curve"]), "-", "-", "-"]
        else:
            h = p["hit"]
            cells += [_fmt(h["placements"]), _fmt(h["mdp_steps"]), _fmt(h["sim_calls"]), _fmt(h["wall_s"], 0)]
        if r is None:
            cells += ["missing"] * 2
        elif r["hit"] is None:
            cells += [budget_text("rnn", r["curve"]), "-"]
        else:
            cells += [_fmt(r["hit"]["placements"]), _fmt(r["hit"]["wall_s"], 0)]
        if p is not None and r is not None:
            ph, rh = p["hit"], r["hit"]
            for unit in ("placements", "sim_calls", "wall_s"):
                cells.append(_ratio(rh and rh[unit], ph and ph[unit], r["curve"][unit], p["curve"][unit])[0])
        else:
            cells += ["-"] * 3
        cells.append(f"up to {PAPER_RATIO}x fewer steps")
        lines.append(f"| {row['graph']} | {row['devices']} | {row['seed']} | " + " | ".join(cells) + " |")
    s = summarize(table_rows)
    n = sum(1 for row in table_rows if row.get("placeto") is not None and row.get("rnn") is not None)
    ratios = [v for _, v in s["ratios"].values() if v is not None]
    lines += [
        "",
        "Ratios above 1 mean Placeto needed less; '>x' = the RNN did not reach the target (its whole budget over "
        "Placeto's), '<x' = Placeto did not.",
        "",
        "## Summary",
        "",
        f"- Placeto needed fewer placements than the RNN to reach the target in {len(s['fewer_placements'])} of {n} "
        f"rows: {', '.join(s['fewer_placements']) or 'none'}.",
        f"- Placeto within 5% of the best learned placement in {len(s['within_5pct'])} of {n} rows: "
        f"{', '.join(s['within_5pct']) or 'none'}.",
        f"- Placeto beats the human expert in {len(s['beats_expert'])} of "
        f"{sum(1 for row in table_rows if row['expert_ms'] is not None and row.get('placeto') is not None)} rows "
        f"with an expert placement: {', '.join(s['beats_expert']) or 'none'}.",
        "- RNN placements / Placeto episodes to the target, where both reached it: "
        + (f"{min(ratios):.2f}x to {max(ratios):.2f}x" if ratios else "no row")
        + f" (the paper: up to {PAPER_RATIO}x fewer training steps for Placeto).",
        "",
        f"Plots: {name}_<graph>_<D>d.png (best-so-far runtime against training seconds, placements and "
        f"simulator calls). Per-run curves: {name}.csv.",
        "",
    ]
    return "\n".join(lines)


def plot_row(graph: str, devices: int, runs: list[tuple[int, str, dict]], ref: dict, path: Path,
             targets: list[float] = ()) -> None:
    """Best-so-far runtime of every run of one row against training wall time, placements and simulator calls,
    in the methods' shared colours (placeto.harness.plot_style); the single device, the expert, Placeto's start and
    the target as horizontal lines, explained in one legend right of the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from placeto.harness import plot_style

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), sharey=True, layout="constrained")
    labels = {"placeto": "Placeto", "rnn": "RNN placer (2017)"}
    xs = [("wall_s", "training wall time (s)", False),
          ("placements", "complete placements sampled\n(Placeto episodes, RNN samples; log scale)", True),
          ("sim_calls", "simulator calls (log scale)", True)]
    for ax, (key, xlabel, log) in zip(axes, xs):
        for seed, method, curve in sorted(runs, key=lambda t: (t[1], t[0])):
            pts = [p for p in curve["points"] if p[key] is not None and (not log or p[key] > 0)]
            if not pts:
                continue
            ax.step([p[key] for p in pts], [p["best_ms"] for p in pts], where="post", marker="o" if len(pts) < 3
                    else None, label=labels.get(method, method) + (f" seed {seed}" if seed else ""),
                    alpha=0.9 if not seed else 0.6, **plot_style.line_style(method))
        if ref.get("single_ms") is not None:
            ax.axhline(ref["single_ms"], ls="--", lw=1.2, color=plot_style.color("single"),
                       label="single device (all nodes on GPU 0)")
        if ref.get("expert_ms") is not None:
            ax.axhline(ref["expert_ms"], ls="--", lw=1.2, color=plot_style.color("expert"),
                       label="human expert placement")
        starts = sorted({c["start_ms"] for _, m, c in runs if m == "placeto" and c.get("start_ms") is not None})
        for i, t in enumerate(starts):
            ax.axhline(t, ls="-.", lw=1.0, color=plot_style.color("placeto"), alpha=0.6,
                       label="Placeto's start (its init_placement)" if i == 0 else None)
        for i, t in enumerate(sorted(set(targets))):
            ax.axhline(t, ls=":", lw=1.2, color="black", label=f"target: {WITHIN} x best learned" if i == 0 else None)
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best runtime so far (ms, simulated step)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    fig.suptitle(f"{graph}, {devices} devices ({PRESET}): best-so-far runtime while training from scratch")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main ----------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--graphs", nargs="+", default=GRAPHS, help="benchmark names or graph files (default: %(default)s;"
                    " nmt_l4 is an optional extra row)")
    ap.add_argument("--devices", nargs="+", type=int, default=[2, 4])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    ap.add_argument("--preset", default=PRESET)
    ap.add_argument("--minutes-per-run", type=float, default=20.0,
                    help="accumulated training wall time per run, over resumed calls (default %(default)s)")
    ap.add_argument("--episodes-placeto", type=int, default=2000,
                    help="Placeto's episode budget (default %(default)s, its preset's: its learning-rate and entropy"
                         " schedules span it, so it is not set far beyond what fits in the minutes)")
    ap.add_argument("--episodes-rnn", type=int, default=1_000_000,
                    help="the RNN's sample budget (default %(default)s: the minutes bind; its schedule is constant)")
    ap.add_argument("--placeto-set", nargs="*", default=PLACETO_SET, metavar="FIELD=VALUE",
                    help="--set for the Placeto runs (PlacetoConfig fields; default: %(default)s; the paper's own "
                         "recipe: init_placement=single undo_worse=false)")
    ap.add_argument("--rnn-set", nargs="*", default=[], metavar="FIELD=VALUE", help="--set for the RNN runs")
    ap.add_argument("--runs", default=str(ROOT / "runs" / "paper_table"), help="parent of the run directories")
    ap.add_argument("--out-dir", default=str(ROOT / "experiments" / "results" / "reproduce"),
                    help="where the table and plots go")
    ap.add_argument("--report", action="store_true", help="only rebuild the table and plots from existing runs")
    ap.add_argument("--name", default=NAME, help="stem of the files written: NAME.md, NAME.csv, "
                    "NAME_<graph>_<D>d.png (default %(default)s)")
    ap.add_argument("--reuse", metavar="CSV", help="an earlier paper_table.csv: the curves of entries whose run "
                    "directory has no metrics come from it (e.g. the RNN's, to rerun only Placeto: --methods placeto, "
                    "then --report --reuse)")
    args = ap.parse_args(argv)

    budgets = {"placeto": (args.minutes_per_run, args.episodes_placeto),
               "rnn": (args.minutes_per_run, args.episodes_rnn)}
    budgets = {m: budgets[m] for m in args.methods}
    for g in args.graphs:
        if not graph_file(g).exists():
            ap.error(f"no graph file {graph_file(g)}")
    entries = []
    for g in args.graphs:
        for d in args.devices:
            for s in args.seeds:
                for m in args.methods:
                    entries.append({"graph": g, "devices": d, "seed": s, "method": m,
                                    "run_dir": run_dir(Path(args.runs), g, d, m, s)})
    if not args.report:
        for i, e in enumerate(entries, 1):
            print(f"[{i}/{len(entries)}] {graph_name(e['graph'])} {e['devices']}d {e['method']} seed {e['seed']} "
                  f"-> {e['run_dir']}", flush=True)
            minutes, episodes = budgets[e["method"]]
            sets = args.placeto_set if e["method"] == "placeto" else args.rnn_set
            train_run(e["graph"], e["devices"], e["method"], e["seed"], e["run_dir"], minutes, episodes, sets,
                      args.preset)
    references = {}
    for g in args.graphs:
        for d in args.devices:
            references[(graph_name(g), d)] = reference_runtimes(g, d, args.preset)
    reused = read_reuse(Path(args.reuse)) if args.reuse else {}
    present = [e for e in entries if read_metrics(e["run_dir"])
               or (graph_name(e["graph"]), e["devices"], e["seed"], e["method"]) in reused]
    for e in entries:
        if e not in present:
            print(f"  missing: {e['run_dir']} (no metrics)", flush=True)
    build_report(present, references, Path(args.out_dir), budgets=budgets, reused=reused, name=args.name)
    print(f"wrote {Path(args.out_dir) / args.name}.md, {args.name}.csv and {args.name}_<graph>_<D>d.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
