"""Graph families and benchmarks, traced and written with manifests.

Sample programs, trace, cost, group, split, write with a manifest. A family is 32 programs of one kind whose
hyperparameters (and, for the ENAS families, cell architectures) are drawn from a seed: Placeto's three (FAMILIES:
cifar10, ptb, nmt) and five more (NEW_FAMILIES: transformer, mlp, matmul, moe, cnn; ALL_FAMILIES holds all eight).
Each program's training step is traced to an op graph (`simulator.tracing.trace`), given analytic roofline costs for
every GPU spec of `simulator.model.costs` (`ANALYTIC_KINDS`), and grouped (`simulator.grouping.group`). The grouped
graph is what is shipped and placed; its meta records how to rebuild the op graph (`program`) and the op -> group
map (`grouping.op_to_group`), so placements expand to ops and graphs can be re-traced for profiling and hardware
runs. Everything is a pure function of the seed: the same seed writes byte-identical files.

Layout: `datasets/<family>/manifest.json` plus `<graph>.json.gz`; benchmarks in `datasets/benchmarks/` with human
expert placements (`<graph>.expert_<D>dev.json`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.arguments import did_you_mean
from simulator.grouping.group import group, group_placement_from_ops
from simulator.interrupts import spawned_pool
from simulator.model.costs import annotate_costs, fused_group_costs
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import atomic_write_bytes, load_graph, read_json, save_graph, write_json
from simulator.model.placement_file import save_placement
from simulator.model.stats import graph_stats
from simulator.tracing.retrace_map import op_keys
from simulator.workloads.family_samplers import SAMPLERS

DATASETS = Path(__file__).resolve().parents[2] / "datasets"  # the repository's shipped data
SPLITS = ("train", "test")
ANALYTIC_KINDS = ("k80", "v100", "a100", "h100", "cpu")  # their shares of the op costs drive the grouping
LATER_KINDS = ("h100-pcie", "h200")  # fused-group rooflines added after grouping: the groups stay as they were
COST_KINDS = ANALYTIC_KINDS + LATER_KINDS  # all simulator.model.costs.SPECS kinds: what built and imported graphs carry
FAMILIES = ("cifar10", "ptb", "nmt")  # Placeto's families
NEW_FAMILIES = ("transformer", "mlp", "matmul", "moe", "cnn")  # modern programs, sampled the same way
ALL_FAMILIES = FAMILIES + NEW_FAMILIES  # a family's index here seeds its specs and split: append only
N_GRAPHS, N_TEST = 32, 8
DEVICE_COUNTS = (2, 4, 8)
SINGLE_DEVICE_EXPERT = ("inception_v3", "nasnet")  # the seeds' expert placement for these: one GPU


@dataclasses.dataclass(frozen=True)
class GraphSpec:
    """One graph to build: a zoo program and a group target.

    `simulator.workloads.zoo.build_program(kind, **kwargs)`, grouped to about `target_groups`.
    """

    name: str
    kind: str
    kwargs: dict[str, Any]
    target_groups: int


def family_specs(family: str, seed: int = 0) -> list[GraphSpec]:
    """The N_GRAPHS graph specs of `family`, deterministic in `seed`."""
    if family not in SAMPLERS:
        raise InputError(f"unknown family {family!r} (known: {', '.join(ALL_FAMILIES)}, benchmarks)")
    specs = []
    for i in range(N_GRAPHS):
        rng = np.random.default_rng([seed, ALL_FAMILIES.index(family), i])
        kwargs = {"seed": int(rng.integers(2**31)), **SAMPLERS[family](rng)}
        specs.append(GraphSpec(f"{family}_{i:03d}", family, kwargs, target_groups=int(rng.integers(100, 301))))
    return specs


def benchmark_specs() -> list[GraphSpec]:
    """The seeds' benchmark models, grouped to 400-1000 groups by size.

    The programs of simulator.workloads.zoo.list_benchmarks.
    """
    from simulator.workloads.zoo import list_benchmarks  # flax and jax: loading a family needs neither

    targets = {"nmt_l8": 1000, "nmt_l4": 600, "rnnlm_l8": 600}
    return [GraphSpec(s.name, s.kind, dict(s.kwargs), targets.get(s.name, 400)) for s in list_benchmarks()]


def split_of(family: str, seed: int) -> list[str]:
    """A fixed train/test split: N_TEST seeded graphs are "test".

    The first N_TEST graphs of a seeded permutation are "test", the rest "train".
    """
    perm = np.random.default_rng([seed, ALL_FAMILIES.index(family), 10**6]).permutation(N_GRAPHS)
    test = set(perm[:N_TEST].tolist())
    return ["test" if i in test else "train" for i in range(N_GRAPHS)]


# ---- building one graph ----------------------------------------------------------------------------------
def trace_spec(spec: GraphSpec):
    """(program, Traced op graph) of `spec`, costed for ANALYTIC_KINDS."""
    from simulator.tracing.trace import trace  # jax: loading a family needs none
    from simulator.workloads.zoo import build_program  # flax and jax, likewise

    program = build_program(spec.kind, **spec.kwargs)
    traced = trace(program.step, program.params, program.opt_state, program.batch, name=spec.name)
    op_graph = annotate_costs(traced.graph, ANALYTIC_KINDS)
    return program, dataclasses.replace(traced, graph=op_graph)


def with_later_kinds(grouping, op_graph: Graph):
    """`grouping` with the LATER_KINDS' fused-group costs on its graph.

    A simulator.grouping.group.Grouping; the costs are rooflines of each group as one fused computation.
    """
    graph = grouping.graph
    for kind in LATER_KINDS:
        graph = graph.with_costs(kind, fused_group_costs(op_graph, grouping.op_to_group, kind))
    return dataclasses.replace(grouping, graph=graph)


def expert_op_placement(op_graph: Graph, layer_groups: list[list[str]], n_devices: int) -> np.ndarray:
    """The seeds' human expert placement of the ops.

    Layer group j on device j * D // G (one LSTM layer per GPU for NMT/RNNLM, attention and softmax beside the last
    layer); ops outside every layer go with the last group.
    """
    owner = {layer: j for j, layers in enumerate(layer_groups) for layer in layers}
    n_groups = len(layer_groups)
    device_of_group = [j * n_devices // n_groups if n_groups >= n_devices else j for j in range(n_groups)]
    placement = np.full(op_graph.n_nodes, device_of_group[-1], dtype=np.int32)
    for i, name in enumerate(op_graph.names):
        stack = op_graph.attrs[i].get("name_stack", "")
        for token in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f"{stack} {name}"):
            if token in owner:
                placement[i] = device_of_group[owner[token]]
                break
    return placement


def build_graph(spec: GraphSpec, family: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """The grouped graph of `spec`, and its expert placements.

    Meta: program, family, grouping. Expert placements per device count, benchmarks only (empty for families).
    """
    program, traced = trace_spec(spec)
    grouping = with_later_kinds(group(traced.graph, spec.target_groups), traced.graph)
    meta = {"family": family, "program": {"kind": spec.kind, "kwargs": spec.kwargs},
            "ops": traced.graph.n_nodes, "op_edges": traced.graph.n_edges,
            "layers": program.meta.get("layers", []), "model": program.meta.get("config", {}),
            "grouping": {"target_groups": spec.target_groups, "op_to_group": grouping.op_to_group.tolist(),
                         "op_keys": op_keys(traced.graph, traced.input_leaf),
                         "jax_version": traced.graph.meta.get("jax_version")}}
    experts: dict[str, np.ndarray] = {}
    if family == "benchmarks":
        for d in DEVICE_COUNTS:
            if spec.kind in SINGLE_DEVICE_EXPERT:
                experts[str(d)] = np.zeros(grouping.graph.n_nodes, dtype=np.int32)
            else:
                ops = expert_op_placement(traced.graph, program.meta["layer_groups"], d)
                experts[str(d)] = group_placement_from_ops(grouping, ops).astype(np.int32)
        meta["expert_placement"] = {d: p.tolist() for d, p in experts.items()}
    graph = dataclasses.replace(grouping.graph, name=spec.name, meta=meta)
    return graph, experts


def _build_and_write(args: tuple[GraphSpec, str, str]) -> dict[str, Any]:
    spec, family, out_dir = args
    graph, experts = build_graph(spec, family)
    out = Path(out_dir)
    if (out / f"{spec.name}.json.gz").exists():
        graph = carry_measured(graph, load_graph(out / f"{spec.name}.json.gz"))
    save_graph(graph, out / f"{spec.name}.json.gz")
    for d, placement in experts.items():
        save_placement(out / f"{spec.name}.expert_{d}dev.json", placement, [f"/gpu:{k}" for k in range(int(d))],
                       graph=graph)
    return graph_entry(graph, f"{spec.name}.json.gz")


def carry_measured(graph: Graph, old: Graph) -> Graph:
    """`graph` with the measured costs of an earlier build of it.

    The kinds in old.meta["profile"], so that rebuilding keeps profiles, which are slow to take and noisy by
    nature. Dropped if the nodes differ.
    """
    measured = old.meta.get("profile", {})
    if not measured or old.names != graph.names:
        return graph
    graph = dataclasses.replace(graph, meta={**graph.meta, "profile": measured})
    for kind in measured:
        graph = graph.with_costs(kind, old.costs[kind])
    return graph


def graph_entry(graph: Graph, file: str) -> dict[str, Any]:
    """Manifest entry: file and statistics (K80 costs) of a built graph."""
    s = graph_stats(graph, "k80", DEVICE_COUNTS)
    return {"file": file, "name": graph.name, "ops": graph.meta.get("ops"), "groups": graph.n_nodes,
            "edges": graph.n_edges, "total_compute_us": round(s.total_compute_us, 3),
            "critical_path_us": round(s.critical_path_us, 3),
            "lower_bound_us": {str(d): round(v, 3) for d, v in s.lower_bound_us.items()},
            "program": graph.meta.get("program")}


# ---- building a family ------------------------------------------------------------------------------------
def build(family: str, out_root: str | Path = DATASETS, seed: int = 0, workers: int = 2,
          only: list[str] | None = None, progress: bool = True) -> Path:
    """Build `family` under `out_root/<family>/`, with its manifest.

    `family` is one of ALL_FAMILIES, or "benchmarks". `workers` processes trace in parallel (spawned, so JAX starts
    fresh in each); `only` restricts to the named graphs (the manifest is then not rewritten). Returns the family
    folder.
    """
    from tqdm import tqdm

    specs = benchmark_specs() if family == "benchmarks" else family_specs(family, seed)
    splits = ["test"] * len(specs) if family == "benchmarks" else split_of(family, seed)
    out = Path(out_root) / family
    todo = [s for s in specs if only is None or s.name in only]
    jobs = [(s, family, str(out)) for s in todo]
    entries: dict[str, dict] = {}
    with tqdm(total=len(jobs), desc=f"build {family}", unit="graph", disable=not progress) as bar:  # closed also
        if workers > 1 and len(jobs) > 1:  # on an interrupt: its line ends before the interrupt's own
            with spawned_pool(workers) as pool:
                for entry in pool.map(_build_and_write, jobs):
                    entries[entry["name"]] = entry
                    bar.update()
        else:
            for job in jobs:
                entry = _build_and_write(job)
                entries[entry["name"]] = entry
                bar.update()
    if only is None:
        graphs = [{**entries[s.name], "split": split} for s, split in zip(specs, splits)]
        write_json(out / "manifest.json", {"family": family, "seed": seed,
                                           "cost_kinds": list(COST_KINDS), "graphs": graphs})
    return out


def load_manifest(family: str, root: str | Path = DATASETS) -> dict[str, Any]:
    """The manifest of a built family.

    Raises:
      InputError: if it is missing or malformed.
    """
    path = Path(root) / family / "manifest.json"
    if not path.is_file():
        known = sorted({*ALL_FAMILIES, *(p.parent.name for p in Path(root).glob("*/manifest.json"))})
        if family not in known and family != "benchmarks":
            raise InputError(f"unknown family {family!r}{did_you_mean(family, known)}; choices: {', '.join(known)}")
        raise InputError(f"family {family!r}: no manifest at {path} (run `placeto datasets build --family {family}`)")
    manifest = read_json(path)
    entries = manifest.get("graphs") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "file" in e for e in entries):
        raise InputError("malformed manifest: field 'graphs' must list objects with a 'file'", str(path))
    return manifest


def load_family(name: str, split: str | None = "test", root: str | Path = DATASETS) -> list[Graph]:
    """The graphs of family `name` in `split` (None: all).

    The files its manifest lists.

    Raises:
      InputError: for an unknown split, a missing manifest, or no graphs in the split.
    """
    if split is not None and split not in SPLITS:
        raise InputError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    chosen = [e["file"] for e in load_manifest(name, root)["graphs"] if split is None or e.get("split") == split]
    if not chosen:
        raise InputError(f"family {name!r} has no {split + ' ' if split else ''}graphs")
    return [load_graph(Path(root) / name / f) for f in chosen]


def seed_graphs(family: str, seeds: list[int], root: str | Path) -> list[Graph]:
    """More training graphs: `family` built with each of `seeds`.

    Every graph (both splits) of the same distribution, for seeds > 0: disjoint from the shipped seed-0 family and
    its test split. Built under root/s<seed>/ first if missing (`build`, which traces every graph), and named
    s<seed>_<name> so that no two share a name.

    Raises:
      InputError: for seed 0.
    """
    out = []
    for seed in seeds:
        if seed == 0:
            raise InputError("seed 0 is the shipped family (its test split is held out); extra seeds are >= 1")
        folder = Path(root) / f"s{seed}"
        if not (folder / family / "manifest.json").is_file():
            build(family, out_root=folder, seed=seed)
        out += [dataclasses.replace(g, name=f"s{seed}_{g.name}") for g in load_family(family, None, folder)]
    return out


# ---- datasets/README.md ----------------------------------------------------------------------------------
README_END = "<!-- end of generated tables -->"  # write_readme owns README.md above this line, keeps what follows
README_HEAD = """<!-- Written by simulator.workloads.families.write_readme (placeto datasets build) down to the line that closes the
generated tables; text below that line is kept as it is. -->

# Datasets

Graph families in the style of Placeto's (ENAS cifar10 conv cells, ENAS ptb recurrent cells, nmt with varied
length and batch; 32 graphs each with a fixed 24/8 train/test split), five families of other model kinds sampled
the same way, and the seeds' benchmark models, all traced from real JAX/Flax training steps (forward, backward,
optimizer update) in `simulator/workloads/zoo/`, given analytic roofline costs (`simulator/model/costs.py`: op by op for K80 and a
generic CPU, the seeds' TensorFlow setting; each group as one fused computation for V100, A100, H100 SXM and
PCIe, H200), and grouped (`simulator/grouping/group.py`; targets of 100-300 groups, 400-1000 for the benchmarks).
Each `<family>/manifest.json` lists the graph files, their split and statistics; each graph's meta says how to
rebuild its op graph (`program`), maps ops to groups (`grouping.op_to_group`) and keys every op
(`grouping.op_keys`: primitive, forward/backward, scope, outputs), so a re-trace under another JAX is mapped
onto the groups (`simulator/tracing/retrace_map.py`). Benchmarks ship human expert placements
(`<graph>.expert_<D>dev.json`, also in the graph's `meta.expert_placement`). Graphs profiled on local devices
carry measured costs under the device's kind (`local-cpu`, `local-h200`, ...).

The five newer families (`simulator.workloads.families.NEW_FAMILIES`; hyperparameters drawn per graph from the seed,
`simulator/workloads/families.py`):

- `transformer` (`simulator/workloads/zoo/transformer.py`): 1-4 pre-LN blocks (multi-head attention + gelu MLP, Adam);
  by a coin flip per graph, a causal language model (token and position embeddings, final projection and
  softmax loss) or encoder blocks on features with a regression loss; d_model 64/128/256, heads 2/4/8, MLP
  ratio 2/4, sequence 32/64/128, batch 4/8/16.
- `mlp` (`simulator/workloads/zoo/mlp.py`): 2-12 dense layers of width 64-512 (constant or narrowing by 0.75 or 0.5 a
  layer), relu/gelu/tanh/silu, with or without layer norm, batch 64-256, momentum SGD; the batch runs as 2-32
  micro-batches (gradient accumulation: 32-128 layer copies in all, a layer-normalised layer counting twice),
  each a parallel copy of the network.
- `matmul` (`simulator/workloads/zoo/matmul_chain.py`): 1, 2, 4 or 8 parallel chains of bias-free matmuls summed at the end
  (40-112 matmuls in all, at most 64 a chain), width 128-1024 alternating with 1x/2x/4x wider intermediates,
  32-256 rows, tanh between matmuls or none, mean squared error, Adam.
- `moe` (`simulator/workloads/zoo/moe.py`): 1-2 residual mixture-of-experts layers of 2-8 gelu-MLP experts with a softmax
  router keeping the top 1 or 2 gates (dense dispatch: every expert sees every token, outputs weighted by the
  gates) and a load-balancing loss; d_model 64-256, expert width 128-512, 64-1024 tokens, Adam.
- `cnn` (`simulator/workloads/zoo/cnn.py`): a plain VGG-style CNN, 2-4 stages of 1-3 convolutions (3x3 or 5x5, relu, no
  batch norm) each ending in 2x2 max pooling, 8-32 channels doubling per stage, images 16-64 pixels, then a dense
  layer and softmax loss, momentum SGD; batch 64 or 128 run as 4-32 micro-batches (32-96 conv copies in all).

Rebuild (byte for byte; measured costs already in a file are kept):

    placeto datasets build --family all        # or cifar10 | ptb | nmt | transformer | mlp | matmul | moe | cnn
                                               #    | benchmarks (one family: --family moe)
    placeto profile datasets/benchmarks/*.json.gz    # measured costs of this machine (a separate step)

Widths are reduced against the papers' models to keep tracing and profiling fast on a laptop; the structure
(layers, cells, unrolled time steps) is the real one. Times below are K80 analytic costs in milliseconds;
lower bounds are max(critical path, total compute / D).
"""


def readme_table(root: str | Path = DATASETS) -> str:
    """Markdown statistics tables of every built family under `root`."""
    lines = ["| family | graphs | ops | groups | edges | compute ms | critical path ms | LB 2 | LB 4 | LB 8 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    rows = []
    for family in (*ALL_FAMILIES, "benchmarks"):
        if not (Path(root) / family / "manifest.json").exists():
            continue
        graphs = load_manifest(family, root)["graphs"]
        rows += [(g["name"], [g]) for g in graphs] if family == "benchmarks" else [(family, graphs)]
    for label, gs in rows:
        spans = [_span([g[key] for g in gs]) for key in ("ops", "groups", "edges")]
        spans += [_span([g[key] * 1e-3 for g in gs], "{:.1f}") for key in ("total_compute_us", "critical_path_us")]
        spans += [_span([g["lower_bound_us"][str(d)] * 1e-3 for g in gs], "{:.1f}") for d in DEVICE_COUNTS]
        lines.append(f"| {label} | {len(gs)} | " + " | ".join(spans) + " |")
    return "\n".join(lines) + "\n"


def _span(values: list[float], fmt: str = "{:.0f}") -> str:
    """"lo–hi" of `values` in `fmt`, or one number if all equal."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def hand_written(readme: str) -> str:
    """The part of an existing README.md that write_readme keeps.

    What follows the README_END line; in a README written before that line existed, whatever follows the
    statistics table. Stripped of blank lines around it.
    """
    if README_END in readme:
        return readme.split(README_END, 1)[1].strip("\n")
    lines = readme.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| family | graphs |")]
    if not starts:
        return ""
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[end:]).strip("\n")


def write_readme(root: str | Path = DATASETS) -> None:
    """(Re)write `root/README.md`, keeping its hand-written part.

    README_HEAD, the statistics tables of the manifests (`readme_table`), the README_END line, then the
    hand-written text that followed README_END in the existing file (`hand_written`), unchanged: sections that
    others maintain go below that line. Writing twice gives the same file.
    """
    path = Path(root) / "README.md"
    kept = hand_written(path.read_text()) if path.is_file() else ""
    text = README_HEAD + "\n" + readme_table(root) + "\n" + README_END + "\n" + (f"\n{kept}\n" if kept else "")
    Path(root).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode())
