"""The durations the README and docs/commands.md state, measured on this machine.

Each timed command runs as a user types it, in a subprocess; its wall and CPU time go to a results file
(experiments/results/benchmarks/readme_times.md) the README points to.

"cold" is a first run after install: fresh JAX compilation and numba caches (PLACETO_CACHE and NUMBA_CACHE_DIR
set to new temporary directories); "warm" runs it again on those caches, as a user's second run. Every run writes
into a fresh temporary directory (a training starts from scratch, never resumes). The machine's load (1-minute
average, before and after) is recorded beside each time: on a shared machine the wall time is the figure a user
sees, the CPU time (user + system of the command and its children) the steadier one.

    python -m experiments.benchmarks.readme_times                      # demo (cold, warm) and the README's training
    python -m experiments.benchmarks.readme_times --commands demo --states cold
    python -m experiments.benchmarks.readme_times --commands gdp-train   # docs/commands.md's gdp training (~10 min)
    python -m experiments.benchmarks.readme_times --commands place-hardware,eval-hardware   # the README's --hardware

The hardware commands run on this machine's 2 host CPU devices (the process rig): cold, with fresh caches, they
profile, calibrate and measure the rig's costs before placing; warm, those come from the caches. A command's
`setup` (e.g. eval-hardware's import-jax and compare, which make the graph and placements it runs) runs first in the
same directory, untimed. The default run measures every command the README times (the demo, the training and
the two hardware commands, cold and warm: about 30 minutes here); a run of some commands writes only their rows, so
give it another --out unless it is meant to replace the file.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "benchmarks" / "readme_times.md"
PLACETO = [sys.executable, "-m", "placeto.cli.main"]


class Timed(NamedTuple):
    """A command whose duration a document states."""

    name: str
    argv: tuple[str, ...]  # "{tmp}" stands for the run's fresh directory
    quoted: str  # where, and what it says
    states: tuple[str, ...]  # cold and/or warm, by default
    setup: tuple[tuple[str, ...], ...] = ()  # commands run first, untimed, in the same directory and caches
    cwd: str = "."  # where the commands run, relative to the repository (examples/: its module is importable)


COMMANDS = {c.name: c for c in (
    Timed("demo", (sys.executable, "-m", "placeto.cli.demo", "--out", "{tmp}/demo_out"),
          "README.md, `make demo` (`python -m placeto.cli.demo --out demo_out`)", ("cold", "warm")),
    Timed("train", (*PLACETO, "train", "--family", "nmt", "--devices", "4", "--out", "{tmp}/runs/nmt",
                    "--episodes", "400"),
          "README.md and docs/commands.md: `placeto train --family nmt --devices 4 --out runs/nmt --episodes 400`",
          ("cold",)),
    Timed("gdp-train", (*PLACETO, "train", "--method", "gdp", "--family", "nmt", "--devices", "4", "--out",
                        "{tmp}/runs/gdp-nmt", "--episodes", "1536000"),
          "docs/commands.md: `placeto train --method gdp --family nmt --devices 4 --out runs/gdp-nmt --episodes "
          "1536000`", ("cold",)),
    Timed("place-hardware", (*PLACETO, "place", "datasets/nmt/nmt_004.json.gz", "--hardware", "--devices", "2",
                             "--seconds", "1", "--out", "{tmp}/nmt_004.here.json"),
          "README.md, Place a shipped graph: `placeto place datasets/nmt/nmt_004.json.gz --hardware --devices 2 "
          "--seconds 1 --out nmt_004.here.json`", ("cold", "warm")),
    Timed("eval-hardware", (*PLACETO, "eval", "{tmp}/mlp.grouped.json.gz", "--placement", "{tmp}/P/mlp.2dev.etf.json",
                            "{tmp}/P/mlp.2dev.single.json", "--hardware", "--devices", "2"),
          "README.md, Place your own model: `placeto eval mlp.grouped.json.gz --placement P/mlp.2dev.etf.json "
          "P/mlp.2dev.single.json --hardware --devices 2` (after its import-jax and compare, untimed)",
          ("cold", "warm"),
          setup=((*PLACETO, "import-jax", "flax_trainstate:train_step", "--args-spec", "flax_trainstate:example_args",
                  "--out", "{tmp}/mlp.json.gz", "--grouped-out", "{tmp}/mlp.grouped.json.gz", "--groups", "16",
                  "--export"),
                 (*PLACETO, "compare", "{tmp}/mlp.grouped.json.gz", "--devices", "2", "--seconds", "0.5",
                  "--save-placements", "{tmp}/P/")),
          cwd="examples"),
)}
DEFAULT_COMMANDS = ("demo", "train", "place-hardware", "eval-hardware")


class Measured(NamedTuple):
    name: str
    state: str
    wall_s: float
    cpu_s: float  # user + system of the command and its children
    status: int  # exit status (124: killed at --timeout)
    load_before: float
    load_after: float


def run(cmd: Timed, state: str, caches: Path, timeout_s: float, logs: Path | None = None) -> Measured:
    """One run of `cmd` in a fresh directory, with the caches under `caches` (cold: empty, warm: as left); its
    output to `logs`/<name>.<state>.log, or dropped."""
    env = dict(os.environ, PLACETO_CACHE=str(caches / "placeto"), NUMBA_CACHE_DIR=str(caches / "numba"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("PLACETO_COMPILE_CACHE", None)
    with tempfile.TemporaryDirectory(prefix=f"readme_{cmd.name}_") as tmp:
        log = open(logs / f"{cmd.name}.{state}.log", "wb") if logs is not None else subprocess.DEVNULL
        try:
            for setup in cmd.setup:  # untimed; a failed setup is the run's status
                status = _run_one(setup, tmp, cmd.cwd, env, log, timeout_s)
                if status != 0:
                    return Measured(cmd.name, state, 0.0, 0.0, status, os.getloadavg()[0], os.getloadavg()[0])
            load0, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.perf_counter()
            status = _run_one(cmd.argv, tmp, cmd.cwd, env, log, timeout_s)
            wall = time.perf_counter() - t0
        finally:
            if logs is not None:
                log.close()
    return Measured(cmd.name, state, wall, _children_cpu() - cpu0, status, load0, os.getloadavg()[0])


def _run_one(argv: tuple[str, ...], tmp: str, cwd: str, env: dict, log: Any, timeout_s: float) -> int:
    """Exit status of one command ("{tmp}" replaced by `tmp`), run in ROOT / `cwd`; 124 when killed at the timeout."""
    try:
        return subprocess.run([a.replace("{tmp}", tmp) for a in argv], cwd=ROOT / cwd, env=env, stdout=log,
                              stderr=subprocess.STDOUT, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return 124


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine() -> str:
    """One line: CPU model, cores, Python and JAX versions, the commit."""
    model = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    from importlib.metadata import version

    return (f"{model}, {os.cpu_count()} cores; Python {platform.python_version()}, JAX {version('jax')}; "
            f"commit {commit} (with the working tree's changes)")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:02.0f}s"


def report(results: list[Measured], commands: dict[str, Timed], argv: list[str]) -> str:
    lines = ["# Durations the README states, measured", "",
             f"`python -m experiments.benchmarks.readme_times {' '.join(argv)}`".replace(" `", "`"), "",
             f"Machine: {machine()}.", "",
             "cold: the first run after install (fresh JAX compilation and numba caches); warm: the same command "
             "again. Load: the 1-minute load average before and after (other work on the machine included).", "",
             "| command | run | wall | CPU (user + sys) | load before / after | exit |",
             "|---|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.name} | {r.state} | {minutes(r.wall_s)} | {minutes(r.cpu_s)} | "
                     f"{r.load_before:.2f} / {r.load_after:.2f} | {r.status} |")
    lines += ["", "Where each command's duration is stated:", ""]
    lines += [f"- {name}: {commands[name].quoted}" for name in dict.fromkeys(r.name for r in results)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--commands", default=",".join(DEFAULT_COMMANDS),
                        help=f"comma list of {', '.join(COMMANDS)} (default: {','.join(DEFAULT_COMMANDS)})")
    parser.add_argument("--states", default=None,
                        help="cold, warm or cold,warm for every command (default: each command's own: the demo "
                             "cold and warm, a training cold)")
    parser.add_argument("--timeout", type=float, default=30.0, help="minutes a run may take before it is killed")
    parser.add_argument("--out", default=str(RESULTS), help="the results file (markdown)")
    parser.add_argument("--logs", default=None, help="directory for each run's output (default: dropped)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.commands.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMMANDS]
    states = None if args.states is None else [s.strip() for s in args.states.split(",") if s.strip()]
    if unknown or not names:
        parser.error(f"--commands: unknown {', '.join(unknown) or 'empty list'} (known: {', '.join(COMMANDS)})")
    if states is not None and (not states or set(states) - {"cold", "warm"}):
        parser.error(f"--states: cold and/or warm, got {args.states!r}")
    if not 0 < args.timeout <= 24 * 60:
        parser.error(f"--timeout: minutes in (0, 1440], got {args.timeout}")
    logs = Path(args.logs) if args.logs else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        cmd = COMMANDS[name]
        wanted = set(states or cmd.states) | ({"cold"} if states else set())  # warm: on the caches a cold run left
        with tempfile.TemporaryDirectory(prefix="readme_caches_") as caches:
            for state in sorted(wanted, key=["cold", "warm"].index):
                r = run(cmd, state, Path(caches), args.timeout * 60, logs)
                print(f"{name} ({state}): {minutes(r.wall_s)} wall, {minutes(r.cpu_s)} CPU, load "
                      f"{r.load_before:.2f} -> {r.load_after:.2f}, exit {r.status}", flush=True)
                results.append(r)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    given = argv if argv is not None else sys.argv[1:]
    shown = [a for i, a in enumerate(given) if a != "--logs" and (i == 0 or given[i - 1] != "--logs")
             and not a.startswith("--logs=")]  # where the output went does not change the times
    out.write_text(report(results, COMMANDS, shown))
    print(f"wrote {out}")
    return 0 if all(r.status == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
