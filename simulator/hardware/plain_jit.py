"""The plain-jit baseline: the step as run without placeto.

`placeto place --hardware` and `eval --hardware` run placements over several local devices. Their "single
device" placement is every unit on one of those devices, which for host CPU devices is a test rig: the process
runs with XLA's intra-op threading off (simulator.hardware.devices.SERIAL_CPU_FLAGS), so that device is ONE core.
What a user runs without placeto is `jax.jit(step)` on JAX's default device with JAX's default threading (all
cores), and that is what `measure` times: in a FRESH process (`python -m simulator.hardware.plain_jit GRAPH`) whose
XLA_FLAGS have the serial flags and the host device count removed (`plain_env`). `start` keeps that process to
time the same compiled step again later (`Child.again`: the commands time it before and after the placements),
instead of a second fresh process importing JAX and loading the step again.

The child reads only the graph file's data: the zoo program its meta names (simulator.workloads.zoo.registry maps
the name to one of the zoo's own builders; nothing named by the file is imported), else its exported program
(simulator.tracing.export: `G.export.zip` beside the file, or --exported), its units composed into one `jax.jit`.
A graph with neither, a child that fails or one that runs past its time limit gives an unavailable `PlainJit`
saying why, never an error of the command that asked.

The child prints one JSON line: {"times_us": [...], "device": "...", "program": "..."}; with --serve it then
reads its standard input and times the step again for every line "again", one JSON line each, until the input
ends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from simulator.arguments import COUNT, POSITIVE, OneLineParser
from simulator.hardware.devices import HOST_DEVICE_FLAG, SERIAL_CPU_FLAGS
from simulator.hardware.timing import time_calls, timing_of
from simulator.measure import cache
from simulator.measure.step_profile import step_function
from simulator.model.errors import InputError
from simulator.model.io import load_graph
from simulator.tracing import export
from simulator.tracing.lowering import unit_order
from simulator.tracing.program import zoo_program

STEPS, WARMUP = 20, 3  # timed steps and untimed ones first (the first compiles)
TIMEOUT_S = 300.0  # the child's time limit: importing JAX, building the program, compiling and timing it
STRIPPED_FLAGS = frozenset([HOST_DEVICE_FLAG] + [f.split("=", 1)[0] for f in SERIAL_CPU_FLAGS])
PLATFORMS = ("default", "cpu")  # JAX's default device (the first GPU when there is one), or the host CPU
WHAT = "plain jax.jit of the step (default device and threading, a fresh process: what you run without placeto)"


@dataclasses.dataclass(frozen=True)
class PlainJit:
    """The plain jit of a step, timed in a fresh process, or why not."""

    times_us: tuple[float, ...] = ()
    """float[S] every timed step, wall clock, microseconds (empty when unavailable)."""
    device: str = ""
    """Where it ran, e.g. "cpu:0 (8 cores)" or "gpu:0 (NVIDIA H200)"."""
    program: str = ""
    """What ran: "zoo program nmt", or "exported program G.export.zip (its units in one jax.jit)"."""
    why: str = ""
    """Why it was not measured ("" when it was)."""

    @property
    def available(self) -> bool:
        return bool(self.times_us)

    def timing(self) -> Any:
        """The Timing of the steps (call only when `available`)."""
        return timing_of(self.times_us)


def plain_env(environ: Mapping[str, str], platform: str = "default") -> dict[str, str]:
    """`environ` for the child, less the host device rig's flags.

    XLA_FLAGS loses `STRIPPED_FLAGS` (the host device count and the serial CPU flags, whatever their values;
    XLA_FLAGS is removed when nothing else is left), and JAX_NUM_CPU_DEVICES goes. Platform "cpu" sets
    JAX_PLATFORMS=cpu; "default" sets XLA_PYTHON_CLIENT_PREALLOCATE=false unless set: the parent holds most of a
    GPU's memory (JAX preallocates 75%), so the child's own preallocation would fail with CUDA out-of-memory errors
    before it allocates on demand anyway.

    Raises:
      InputError: `platform` is not one of PLATFORMS.
    """
    if platform not in PLATFORMS:
        raise InputError(f"plain jit platform must be one of {', '.join(PLATFORMS)}, got {platform!r}")
    env = dict(environ)
    kept = [w for w in env.get("XLA_FLAGS", "").split() if w.split("=", 1)[0] not in STRIPPED_FLAGS]
    if kept:
        env["XLA_FLAGS"] = " ".join(kept)
    else:
        env.pop("XLA_FLAGS", None)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    if platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def plain_platform(spec: int | tuple) -> str:
    """The baseline platform of a device spec: "cpu" or "default".

    "cpu" when the spec lists host CPU devices only, else "default". A count means the default backend's devices, so
    its first device is theirs; a list naming a GPU compares against JAX's default device, the first GPU. See
    simulator.hardware.devices for specs.
    """
    if isinstance(spec, int) or any(platform != "cpu" for platform, _ in spec):
        return "default"
    return "cpu"


class Child:
    """A fresh process timing the plain jit of a step, kept for reruns.

    `start` makes one; `first` is its first run, `again` times the step once more. Close it (`close`, or use it as a
    context manager).
    """

    def __init__(self, first: PlainJit, proc: subprocess.Popen | None = None, stderr: Any = None,
                 lines: "queue.Queue | None" = None, timeout_s: float = TIMEOUT_S):
        self.first, self._proc, self._stderr, self._lines, self._timeout_s = first, proc, stderr, lines, timeout_s

    def _read(self) -> PlainJit:
        """The child's next JSON line as a PlainJit.

        Unavailable (the child ended) when no line comes within the time limit, or the child exits first.
        """
        try:
            line = self._lines.get(timeout=self._timeout_s)
        except queue.Empty:
            self.close(kill=True)
            return PlainJit(why=f"it ran past its {self._timeout_s:g} s time limit")
        if line is None:  # end of its output: it exited
            code = self._proc.wait()
            self._stderr.seek(0)
            why = parse_child(code, "", self._stderr.read())
            self.close()
            return why
        return parse_child(0, line, "")

    def again(self) -> PlainJit:
        """The same step timed again in the same process, its compiled step reused.

        Unavailable, saying why, when the first run was or the child has ended.
        """
        if not self.first.available:
            return self.first
        if self._proc is None or self._proc.poll() is not None:
            return PlainJit(why="the fresh process has ended")
        try:
            self._proc.stdin.write("again\n")
            self._proc.stdin.flush()
        except OSError as e:
            self.close()
            return PlainJit(why=f"the fresh process cannot be asked again: {e.strerror or e}")
        return self._read()

    def close(self, kill: bool = False) -> None:
        """Ends the child: its input is closed, so it exits.

        It is killed if it has not exited within 10 s, or at once with `kill`.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._stderr.close()

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start(graph_path: str | os.PathLike | None, platform: str = "default", steps: int = STEPS,
          warmup: int = WARMUP, timeout_s: float = TIMEOUT_S, exported: str | None = None,
          python: str = sys.executable) -> Child:
    """A `Child` timing the graph file's plain jit, first run done.

    The child runs `main --serve`. Its first run is unavailable (saying why) when the file is None, or the child
    fails or runs past `timeout_s` (each run gets that limit).

    Raises:
      InputError: a bad argument (steps < 1, warmup < 0, timeout_s <= 0).
    """
    if steps < 1 or warmup < 0:
        raise InputError(f"plain jit: steps must be >= 1 and warmup >= 0, got {steps} and {warmup}")
    if not timeout_s > 0:
        raise InputError(f"plain jit: the time limit must be > 0 s, got {timeout_s}")
    if graph_path is None:
        return Child(PlainJit(why="the graph has no file for a fresh process to read"))
    env = plain_env(os.environ, platform)
    root = str(Path(__file__).resolve().parents[2])  # placeto and simulator, importable in the child
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    argv = [python, "-m", "simulator.hardware.plain_jit", str(graph_path), "--platform", platform, "--steps", str(steps),
            "--warmup", str(warmup), "--serve"] + (["--exported", str(exported)] if exported else [])
    stderr = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: nothing blocks the child on what it says
    try:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                text=True)
    except OSError as e:
        stderr.close()
        return Child(PlainJit(why=f"cannot start {python}: {e.strerror or e}"))
    lines: queue.Queue = queue.Queue()

    def pump() -> None:  # its output, line by line, then None at its end
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    child = Child(PlainJit(), proc, stderr, lines, timeout_s)
    child.first = child._read()
    return child


def measure(graph_path: str | os.PathLike | None, platform: str = "default", steps: int = STEPS,
            warmup: int = WARMUP, timeout_s: float = TIMEOUT_S, exported: str | None = None,
            python: str = sys.executable) -> PlainJit:
    """Times the graph file's plain jit once (`start`, then closed)."""
    with start(graph_path, platform, steps, warmup, timeout_s, exported, python) as child:
        return child.first


def start_for(graph_path: str | os.PathLike | None, spec: int | tuple, repeats: int = STEPS,
              warmup: int = WARMUP, exported: str | None = None, progress: Any = print) -> Child:
    """`start` on the baseline device of device spec `spec`.

    The device is `plain_platform(spec)`; as many steps as the placements get (`repeats`, at least 5) after at least
    2 warm-up steps. Says so to `progress` first.
    """
    steps = max(repeats, 5)
    progress(f"timing the plain jax.jit of the step in a fresh process (default device and threading, {steps} "
             f"steps) ...")
    return start(graph_path, plain_platform(spec), steps, max(warmup, 2), exported=exported)


def parse_child(returncode: int, stdout: str, stderr: str) -> PlainJit:
    """The child's result from its exit status and output.

    Its JSON line, else unavailable with the last line of its stderr (an error's one line, or a crash's last word).
    """
    lines = stdout.strip().splitlines()
    if returncode == 0 and lines:
        try:
            obj = json.loads(lines[-1])
            return PlainJit(tuple(float(t) for t in obj.get("times_us", ())), str(obj.get("device", "")),
                            str(obj.get("program", "")), str(obj.get("why", "")))
        except (ValueError, TypeError, AttributeError):
            pass
    last = (stderr.strip().splitlines() or [f"exit status {returncode}, no output"])[-1]
    last = last.removeprefix("simulator.hardware.plain_jit: error: ")
    return PlainJit(why=f"the fresh process failed: {last[:300]}")


def combined(results: Sequence[PlainJit]) -> PlainJit:
    """Every available result's steps as one.

    With the first available one's device and program; the first result's reason when none is available.
    """
    ok = [r for r in results if r.available]
    if not ok:
        return results[0] if results else PlainJit(why="not measured")
    return dataclasses.replace(ok[0], times_us=tuple(t for r in ok for t in r.times_us))


def plain_line(results: Sequence[PlainJit], kept_name: str, kept: Any) -> str:
    """One line: the plain jit's median [IQR] and `kept` against it.

    The median and IQR are over every run in `results` (each run's median too when there are several). `kept` is
    the simulator.hardware.timing.Timing of the placement called `kept_name`; its multiple is plain median over kept
    median (2.00x = twice as fast as plain jit).
    """
    both = combined(results)
    if not both.available:
        return f"{WHAT}: unavailable ({both.why})"
    t = both.timing()
    runs = [r for r in results if r.available]
    each = (f", {len(t.times_us)} steps in {len(runs)} runs (before and after the placements: medians "
            f"{', '.join(f'{r.timing().median_us / 1e3:.3f}' for r in runs)} ms)" if len(runs) > 1 else "")
    return (f"{WHAT}: {t.median_us / 1e3:.3f} ms [{t.q25_us / 1e3:.3f}-{t.q75_us / 1e3:.3f}] on {both.device}, "
            f"{both.program}{each}; {kept_name}: {kept.median_us / 1e3:.3f} ms = {t.median_us / kept.median_us:.2f}x "
            f"plain jit's speed")


def rig_line() -> str:
    """What host CPU devices are, for reading speedups against plain jit.

    Their single device is one core, the rig's control, not what a user runs without placeto.
    """
    return ("host CPU devices: a test rig (they share this machine's cores and memory, XLA's threading off): the "
            "single device there is one core, the rig's control, not what you run without placeto; read speedups "
            "against plain jit")


# ---- the child process ---------------------------------------------------------------------------------------
class Step(NamedTuple):
    """A training step ready to jit."""

    fn: Any  # fn(*args) -> the step's outputs (new parameters, optimizer state, loss, ...)
    args: tuple  # its arguments: pytrees of arrays
    what: str  # what it is, for the report


def step_of(graph: Any, exported: str | None = None, seed: int = 0) -> Step | str:
    """The step of a graph, or a string saying why it has none.

    Its zoo program (meta.program), else its exported program (`exported`, or the file beside the graph's).
    """
    if "program" in graph.meta:
        built = zoo_program(graph)
        return Step(built.step, (built.params, built.opt_state, built.batch),
                    f"zoo program {graph.meta['program']['kind']}")
    bundle = export.find_export(graph, exported)
    if bundle is None:
        return ("the graph's meta names no zoo program and no exported program (`import-jax --export`) is beside "
                "it")
    values = export.values(bundle, seed)
    step, keys = step_function(bundle.units, unit_order(bundle.units), bundle.outputs)
    return Step(step, tuple(values[s.node] for s in keys),
                f"exported program {Path(bundle.path).name} (its units in one jax.jit)")


def describe_device(device: Any) -> str:
    """A device as reports name it: "cpu:0 (8 cores)", "gpu:0 (NVIDIA H200)".

    A CPU's cores are those this process may use (XLA's default thread pool).
    """
    if device.platform == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return f"cpu:{device.id} ({cores} cores)"
    return f"{device.platform}:{device.id} ({device.device_kind})"


def prepare_child(graph_path: str, platform: str, exported: str | None) -> tuple[Any, dict] | dict:
    """A timer of the graph's step on the platform's first device.

    Returns:
      (time(steps, warmup) -> [us], what to print beside the times), or {"why": ...} when the graph has no step.
    """
    graph = load_graph(graph_path)
    found = step_of(graph, exported)
    if isinstance(found, str):
        return {"why": found}
    cache.enable_compile_cache()  # as every placeto command: a second run compiles little
    import jax

    device = jax.devices("cpu")[0] if platform == "cpu" else jax.devices()[0]
    args = jax.device_put(found.args, device)
    jitted = jax.jit(found.fn)

    def time(steps: int, warmup: int) -> list[float]:
        return time_calls(lambda: jax.block_until_ready(jitted(*args)), steps, warmup)

    return time, {"device": describe_device(device), "program": found.what}


def run_child(graph_path: str, platform: str, steps: int, warmup: int, exported: str | None,
              serve: bool = False, stdin: Any = None, stdout: Any = None) -> None:
    """Prints the child's JSON lines: step times, or why none.

    The step runs on the platform's first device. With `serve`, times it again (`steps` after `warmup` once more)
    for each line "again" of `stdin` until it ends.
    """
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    prepared = prepare_child(graph_path, platform, exported)
    if isinstance(prepared, dict):
        print(json.dumps(prepared), file=stdout, flush=True)
        return
    time, what = prepared
    print(json.dumps({"times_us": time(steps, warmup), **what}), file=stdout, flush=True)
    if serve:
        for line in stdin:
            if line.strip() == "again":
                print(json.dumps({"times_us": time(steps, warmup), **what}), file=stdout, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog="python -m simulator.hardware.plain_jit", description="Time the plain jax.jit of a "
                      "graph file's training step (its zoo or exported program) and print one JSON line.")
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument("--platform", choices=PLATFORMS, default="default", help="run on JAX's default device or the "
                                                                            "host CPU")
    p.add_argument("--steps", type=POSITIVE, default=STEPS, help="timed steps")
    p.add_argument("--warmup", type=COUNT, default=WARMUP, help="untimed steps first (the first compiles)")
    p.add_argument("--exported", help="the graph's exported program (default: <graph>.export.zip, when there)")
    p.add_argument("--serve", action="store_true", help="then time it again for every line 'again' on stdin")
    args = p.parse_args(argv)
    try:
        run_child(args.graph, args.platform, args.steps, args.warmup, args.exported, args.serve)
    except InputError as e:
        print(f"simulator.hardware.plain_jit: error: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
