"""Start-up time of `placeto place`: the first command (a cold compilation cache), the second (warm) and the
cache turned off, side by side, for the shipped Placeto policy and the shipped gdp policy.

Each command runs as a subprocess, exactly as a user types it, with PLACETO_COMPILE_CACHE set to a fresh temporary
directory (cold, then warm: the same directory) or to `off` (simulator.measure.cache). Measured per command: the
wall time, the CPU time (user + system; the machine may be loaded, CPU time is the steadier figure), and JAX's
own compile log (JAX_LOG_COMPILES=1): the seconds spent tracing, lowering to MLIR and compiling with XLA, where
"XLA compile" includes reading an executable back from the persistent cache, plus the persistent-cache hits.
A reference row runs `placeto policies`, a command that compiles nothing: the interpreter and the imports.
With --before REV, the same command also runs on commit REV's code (git archive into a temporary directory), to
show what the work on start-up changed. The placements of one policy's runs must be byte-identical (checked).

    python -m experiments.benchmarks.startup                 # -> experiments/results/benchmarks/startup.md
    python -m experiments.benchmarks.startup --repeats 3     # the median of 3 of each
    python -m experiments.benchmarks.startup --before 70845f7   # and the code of that commit
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "benchmarks"
GRAPH = "datasets/nmt/nmt_004.json.gz"  # a test graph of the shipped nmt family (datasets/nmt/manifest.json)
POLICIES = ("general", "gdp-general")
LOG_SECONDS = re.compile(r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation) .* in ([0-9.]+) sec")
PRINTED_COMPILE = re.compile(r"\+ ([0-9.]+) s compilation")


class Run(NamedTuple):
    """One command's measurements; seconds throughout."""
    wall: float
    cpu: float  # user + system of the subprocess
    trace: float  # JAX tracing (jit functions and eval_shape)
    lower: float  # jaxpr -> MLIR
    compile: float  # XLA compilation, or reading the executable from the persistent cache
    hits: int  # persistent-cache hits
    printed: float | None  # the compile seconds the command prints, if it prints any
    placement: bytes  # the placement file written, b"" if none


def placeto_command() -> list[str]:
    """The `placeto` console script of this interpreter's environment, else `python -m placeto.cli.main`."""
    script = Path(sys.executable).parent / "placeto"
    return [str(script)] if script.exists() else [sys.executable, "-m", "placeto.cli.main"]


def run_once(args: list[str], cache: str, out: Path | None, root: Path = ROOT) -> Run:
    """Run `placeto ARGS` on the code under `root` (its directory the working directory) with
    PLACETO_COMPILE_CACHE=`cache` and JAX's compile log on; its measurements."""
    env = {**os.environ, "PLACETO_COMPILE_CACHE": cache, "JAX_LOG_COMPILES": "1", "PYTHONPATH": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(placeto_command() + args, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"startup: `placeto {' '.join(args)}` failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    sums = {"tracing": 0.0, "jaxpr to MLIR module conversion": 0.0, "XLA compilation": 0.0}
    for kind, seconds in LOG_SECONDS.findall(proc.stderr):
        sums[kind] += float(seconds)
    printed = PRINTED_COMPILE.search(proc.stdout)
    return Run(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
               sums["tracing"], sums["jaxpr to MLIR module conversion"], sums["XLA compilation"],
               proc.stderr.count("Persistent compilation cache hit"), float(printed[1]) if printed else None,
               out.read_bytes() if out is not None else b"")


def measure_policy(policy: str, graph: str, devices: int, tmp: Path, before: Path | None) -> dict[str, Run]:
    """'cold', 'warm' and 'off' runs of `placeto place GRAPH --checkpoint POLICY` (a fresh cache directory),
    and 'before': on the code under `before`, if given."""
    cache = tempfile.mkdtemp(prefix="cache-", dir=tmp)
    out = tmp / f"{policy}.json"
    args = ["place", graph, "--checkpoint", policy, "--devices", str(devices), "--out", str(out)]
    runs = {"cold": run_once(args, cache, out), "warm": run_once(args, cache, out), "off": run_once(args, "off", out)}
    if before is not None:
        runs["before"] = run_once(args, "off", out, before)
    return runs


def archive(rev: str, paths: list[str], into: Path) -> Path:
    """`paths` of commit `rev`, extracted under `into` (git archive: the repository is left untouched)."""
    tar = into / "before.tar"
    done = subprocess.run(["git", "archive", "-o", str(tar), rev, *paths], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"startup: --before {rev}: {done.stderr.strip()}")
    with tarfile.open(tar) as t:
        t.extractall(into / "before", filter="data")
    return into / "before"


def median_run(runs: list[Run]) -> Run:
    """The median of each measurement (the placement of the first run)."""
    def med(field: str):
        values = [getattr(r, field) for r in runs]
        return None if None in values else statistics.median(values)
    return Run(*(med(f) for f in Run._fields[:-1]), runs[0].placement)


def machine_note() -> str:
    """CPU model, core count, load average, Python and JAX versions, commit."""
    from importlib.metadata import version

    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
              if line.startswith("model name")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{models[0] if models else platform.processor()}, {os.cpu_count()} cores, load average {load} "
            f"(1, 5, 15 min) at the end; Python {platform.python_version()}, JAX {version('jax')}, "
            f"{platform.system()}; commit {commit}")


def row(name: str, cache: str, r: Run) -> str:
    jax_total = r.trace + r.lower + r.compile
    printed = "-" if r.printed is None else f"{r.printed:.1f}"
    return (f"| {name} | {cache} | {r.wall:.1f} | {r.cpu:.1f} | {jax_total:.2f} | {r.trace:.2f} | {r.lower:.2f} | "
            f"{r.compile:.2f} | {r.hits} | {printed} |")


def report(results: dict[str, dict[str, Run]], floor: Run, command: str, repeats: int, graph: str,
           devices: int, before: str | None) -> str:
    """The markdown page."""
    lines = [
        "# Start-up time of `placeto place`: the compilation cache",
        "",
        f"`placeto place {graph} --checkpoint POLICY --devices {devices} --out p.json`, run as a subprocess: "
        "first with an empty compilation cache (cold), then again with the cache the first run wrote (warm), "
        "then with the cache off (`PLACETO_COMPILE_CACHE=off`). "
        + (f"Median of {repeats} repeats. " if repeats > 1 else "")
        + "Seconds. *JAX compile* = tracing + lowering + XLA compile, from JAX's own log (`JAX_LOG_COMPILES=1`); "
        "*XLA compile* includes reading executables back from the persistent cache; *printed*: the compile "
        "seconds the command itself prints (the gdp path prints loading and compiling together). The placements "
        "of a policy's runs are byte-identical."
        + (f" *before*: the code of commit {before} (no persistent cache), the same command." if before else ""),
        "",
        "What the rows show. Without the cache (*off*), the command compiles the policy's jitted step (Placeto's "
        "`act`, gdp's `sample`) and about ten small eager operations anew every time: the XLA column. With the "
        "cache warm, those executables are read back from disk (the cache hits) and what is left of JAX's start-up "
        "is tracing and lowering, which the persistent cache cannot keep. The rest of the wall time is the "
        "interpreter and the imports (the `placeto policies` row), loading the graph and the checkpoint, and the "
        "placement itself. Before this work, loading a checkpoint also ran the policy's flax `init` eagerly to "
        "get the parameters' structure, compiling every initializer and layer operation on its own (about 150 "
        "small compilations); the structure now comes from `jax.eval_shape` (`placeto.checkpoint_io."
        "param_template`), which compiles nothing.",
        "",
        "| policy | cache | wall | CPU | JAX compile | trace | lower | XLA compile | cache hits | printed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, runs in results.items():
        lines += [row(policy, cache, r) for cache, r in runs.items()]
    lines.append(row("`placeto policies` (compiles nothing)", "-", floor))
    lines += ["", f"Reproduce: `{command}`", "",
              f"Machine: {machine_note()}. On a loaded machine the wall times stretch; the CPU times hold.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--graph", default=GRAPH, help="graph file, relative to the repository root")
    p.add_argument("--devices", type=int, default=4, help="device count of the placement")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma list of shipped policies")
    p.add_argument("--repeats", type=int, default=1, help="runs of each (a fresh cold cache each); the median")
    p.add_argument("--before", metavar="REV", help="also run the command on this commit's code (no cache)")
    p.add_argument("--out", type=Path, default=RESULTS / "startup.md", help="markdown file to write")
    a = p.parse_args(argv)
    results: dict[str, dict[str, Run]] = {}
    with tempfile.TemporaryDirectory(prefix="placeto-startup-") as tmp:
        old = archive(a.before, ["placeto", "simulator", a.graph], Path(tmp)) if a.before else None
        for policy in a.policies.split(","):
            reps = [measure_policy(policy, a.graph, a.devices, Path(tmp), old) for _ in range(a.repeats)]
            for rep in reps:
                if len({r.placement for r in rep.values()}) != 1:
                    sys.exit(f"startup: {policy}: the placements of the {', '.join(rep)} runs differ")
            results[policy] = {c: median_run([rep[c] for rep in reps]) for c in reps[0]}
            for c, r in results[policy].items():
                print(row(policy, c, r), flush=True)
        floor = median_run([run_once(["policies"], "off", None) for _ in range(a.repeats)])
    command = "python -m experiments.benchmarks.startup" + "".join(
        f" {flag} {value}" for flag, value, default in (("--graph", a.graph, GRAPH), ("--devices", a.devices, 4),
                                                        ("--policies", a.policies, ",".join(POLICIES)),
                                                        ("--repeats", a.repeats, 1), ("--before", a.before, None))
        if value != default)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(report(results, floor, command, a.repeats, a.graph, a.devices, a.before))
    print(a.out)


if __name__ == "__main__":
    main()
