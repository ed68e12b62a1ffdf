"""Place for this machine on the nmt and ptb test splits: does `placeto place --hardware` ever do harm?

    python -m experiments.benchmarks.place_hardware   # 2 host devices -> results/benchmarks/place_hardware.md
    python -m experiments.benchmarks.place_hardware --families nmt --devices 2 --seconds 1

For every test graph (a copy under --work, so the shipped files are not touched): placeto.harness.on_hardware profiles
it on the local devices (inside the compiled step), calibrates them (cached), places it with etf, m-sct and
local search, runs the best `--top` and the single device for real and keeps the fastest measured. Then the kept
placement and the single device are measured again, in a fresh interleaved run: the check is that the kept
placement is never slower than the single device beyond the single device's interquartile range (its median
above the single device's upper quartile). Rows are appended as they finish; a killed run resumes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (before jax)


def test_graphs(family: str) -> list[Path]:
    manifest = json.loads((ROOT / "datasets" / family / "manifest.json").read_text())
    return [ROOT / "datasets" / family / g["file"] for g in manifest["graphs"] if g["split"] == "test"]


def run_one(path: Path, work: Path, devices: int, seconds: float, top: int, repeats: int) -> dict:
    from placeto.harness.on_hardware import place_on_hardware
    from simulator.model.io import load_graph

    copy = work / path.name
    if not copy.exists():
        shutil.copyfile(path, copy)
    graph = load_graph(copy)
    t0 = time.perf_counter()
    out = place_on_hardware(graph, str(copy), devices, ("etf", "m-sct", "local-search"), seconds=seconds, top=top,
                            repeats=repeats, progress=lambda s: None)
    wall = time.perf_counter() - t0
    graph = load_graph(copy)  # with the profile
    again_best, again_single = out.runner.measure([out.best.placement, out.single.placement], repeats, 2)
    harm = out.best.name != "single device" and again_best.median_us > again_single.q75_us
    return {"graph": graph.name, "nodes": graph.n_nodes, "kept": out.best.name,
            "single_ms": out.single.measured.median_us / 1e3, "kept_ms": out.best.measured.median_us / 1e3,
            "speedup": out.speedup, "spread": list(out.spread),
            "simulated_single_ms": out.single.simulated_us / 1e3, "simulated_kept_ms": out.best.simulated_us / 1e3,
            "recheck_single_ms": again_single.median_us / 1e3,
            "recheck_single_iqr_ms": [again_single.q25_us / 1e3, again_single.q75_us / 1e3],
            "recheck_kept_ms": again_best.median_us / 1e3, "harm": bool(harm), "wall_s": wall,
            "candidates": [(c.name, c.simulated_us / 1e3, None if c.measured is None else c.measured.median_us / 1e3)
                           for c in out.candidates]}


def markdown(rows: list[dict], args: argparse.Namespace, machine: str) -> str:
    for r in rows:  # keeping the single device is never harm, whatever two measurements of it say
        r["harm"] = r["kept"] != "single device" and r["recheck_kept_ms"] > r["recheck_single_iqr_ms"][1]
    n_harm = sum(r["harm"] for r in rows)
    kept_other = sum(r["kept"] != "single device" for r in rows)
    lines = ["# Place for this machine: the nmt and ptb test splits", "",
             f"Command: `python -m experiments.benchmarks.place_hardware --families {args.families} "
             f"--devices {args.devices} "
             f"--seconds {args.seconds:g} --top {args.top} --repeats {args.repeats}`: `placeto place --hardware` "
             f"(placeto.harness.on_hardware) on {args.devices} local devices of this machine, then the kept placement and "
             f"the single device re-measured in a fresh interleaved run. Times in ms (medians of {args.repeats} "
             f"steps). Measured on {machine}.", "",
             f"**{len(rows)} graphs: the kept placement was measured slower than the single device beyond its IQR "
             f"on {n_harm}; a multi-device placement was kept on {kept_other}.**", "",
             "| graph | nodes | kept | single | kept (speedup, spread) | simulated single / kept | re-check single "
             "[IQR] | re-check kept | harm | s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["spread"]
        q25, q75 = r["recheck_single_iqr_ms"]
        lines.append(f"| {r['graph']} | {r['nodes']} | {r['kept']} | {r['single_ms']:.2f} | {r['kept_ms']:.2f} "
                     f"({r['speedup']:.2f}x, {lo:.2f}-{hi:.2f}) | {r['simulated_single_ms']:.2f} / "
                     f"{r['simulated_kept_ms']:.2f} | {r['recheck_single_ms']:.2f} [{q25:.2f}-{q75:.2f}] | "
                     f"{r['recheck_kept_ms']:.2f} | {'yes' if r['harm'] else 'no'} | {r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="nmt,ptb", help="comma list of families whose test split is placed")
    p.add_argument("--devices", type=int, default=2, help="local devices")
    p.add_argument("--seconds", type=float, default=1.0, help="wall seconds of each placing method")
    p.add_argument("--top", type=int, default=2, help="best simulated placements run for real")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per placement")
    p.add_argument("--work", default=str(ROOT / "runs" / "place_hardware"), help="graph copies and the run log")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "benchmarks" / "place_hardware.md"))
    args = p.parse_args(argv)
    ensure_host_devices(args.devices)
    from simulator.model.io import atomic_write_bytes

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "rows.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    done = {r["graph"] for r in rows}
    paths = [g for f in args.families.split(",") if f for g in test_graphs(f)]
    from tqdm import tqdm

    for path in tqdm(paths, desc="graphs", unit="graph"):
        name = path.name.split(".")[0]
        if name in done:
            continue
        row = run_one(path, work, args.devices, args.seconds, args.top, args.repeats)
        rows.append(row)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        tqdm.write(f"{row['graph']}: kept {row['kept']}, {row['speedup']:.2f}x, harm {row['harm']}")
    import os

    import jax

    machine = (f"{args.devices} local {jax.devices()[0].platform} devices ({jax.devices()[0].device_kind}), "
               f"{os.cpu_count()} cores, jax {jax.__version__}")
    text = markdown(rows, args, machine)
    atomic_write_bytes(args.out, text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
