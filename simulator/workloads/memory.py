"""Benchmarks where one device is not enough: the seeds' models at full size.

The benchmarks of `simulator.workloads.families` are traced at reduced widths, so nothing is ever out of memory. These
are the same zoo programs (and a GPT-style transformer) at the sizes of the models the seeds place, traced BY SHAPE
(`build_program(..., abstract=True)`: parameters, optimizer state and batch are `jax.ShapeDtypeStruct`s, nothing is
allocated), given the families' analytic costs for every kind of `simulator.model.costs` (op-by-op rooflines for K80
and CPU, fused-group rooflines for V100 and later: nothing here is profiled, a 2-core CPU cannot run these steps),
grouped to the benchmarks' targets, and written to `datasets/memory/` with human expert placements and a manifest.

Memory is real: a parameter or optimizer slot node persists its float32 bytes, every tensor its bytes while live
(simulator.engine.reference's rules), so `simulate(graph, all on device 0, cluster_preset(spec.preset, 1))` peaks at
what the training step needs on one device. The manifest records, per graph, the parameter count, the persistent
bytes, the single-device peak against the preset's capacity, and each expert placement's per-device peaks.

What the seeds give (`/work/shared/seeds/`: Mirhoseini et al. 2017, "Device placement optimization with
reinforcement learning", its results table as the 2021 slides copy it; Mirhoseini et al. 2018, "A hierarchical model
for device placement", its Table 1 as the slides copy it): the layers (NMT 2/4/8), batch sizes (RNNLM and NMT 64,
Inception-V3 32), the GPU counts, and which models run out of memory on one GPU (NMT, every row; RNNLM and
Inception-V3 run). They give no widths, vocabularies or lengths: those are the cited source models' (`sizes_from` of
each spec), our choice among them, and said so in the manifest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.fast import simulate
from simulator.grouping.group import group, group_placement_from_ops
from simulator.interrupts import spawned_pool
from simulator.model.cluster import cluster_preset
from simulator.model.costs import annotate_costs
from simulator.model.graph import Graph
from simulator.model.io import atomic_write_bytes, save_graph, write_json
from simulator.model.placement_file import save_placement
from simulator.tracing.retrace_map import op_keys
from simulator.tracing.trace import trace
from simulator.workloads.families import (ANALYTIC_KINDS, COST_KINDS, DATASETS, DEVICE_COUNTS, README_END,
                                          expert_op_placement, graph_entry, hand_written, load_manifest,
                                          with_later_kinds)
from simulator.workloads.zoo import build_program

FAMILY = "memory"  # datasets/memory/
GB = 1e9

NMT_SIZES = ("LSTM width 1024 (Wu et al. 2016, GNMT, whose layer-per-GPU split the 2017 paper cites); one shared "
             "vocabulary of 80,000 (Sutskever et al. 2014's target vocabulary, the other split the 2017 paper cites; "
             "its source side had 160,000); sentences of 50 tokens (Luong et al. 2015's cap, whose attention the "
             "program implements); batch 128 (Sutskever et al. 2014 and Luong et al. 2015: the 2018 table gives "
             "none, the 2017 table's batch 64 peaks at 9.0 GB here for 2 layers, see datasets/memory/README.md)")
NMT_SEEDS = ("2018 Table 1 (hierarchical planner): NMT ({layers}-layer) GPU-only OOM, {layers} GPUs, human expert "
             "{expert} s; 2017 results table: NMT (batch 64) single-GPU OOM, expert 4.99 s (2 GPUs), 4.73 s (4 GPUs)")
NMT_EXPERT = {2: 2.13, 4: 3.64, 8: 3.88}  # s, the 2018 table's human-expert rows


@dataclasses.dataclass(frozen=True)
class MemorySpec:
    """One full-size benchmark: a zoo program, its cluster, what the seeds say.

    `build_program(kind, abstract=True, **kwargs)`, grouped to about `target_groups`, placed on `preset` devices.
    """

    name: str
    kind: str
    kwargs: dict[str, Any]
    target_groups: int  # the families' benchmark targets: 400, 600 for 4-layer NMT, 1000 for 8-layer
    preset: str  # simulator.model.cluster preset of the devices the seeds (or we) place on
    expert_devices: int  # device count of the seeds' expert row (ours for the transformer)
    single_device_oom: bool  # the seeds' verdict on one device (ours for the transformer)
    seeds: str  # the seeds' rows, cited
    sizes_from: str  # where the sizes the seeds do not give come from
    expert_from: str  # whose expert placement `<name>.expert_<D>dev.json` is


MEMORY_SPECS: tuple[MemorySpec, ...] = (
    *(MemorySpec(f"nmt_l{n}_full", "nmt", {"seed": 0, "layers": n, "hidden": 1024, "vocab": 80000, "src_len": 50,
                                           "tgt_len": 50, "batch": 128},
                 {2: 400, 4: 600, 8: 1000}[n], "placeto-k80", n, True,
                 NMT_SEEDS.format(layers=n, expert=NMT_EXPERT[n]), NMT_SIZES,
                 "the seeds' (2017 and 2018): encoder and decoder layer i on GPU i, embeddings with layer 0, "
                 "attention and softmax with the last layer")
      for n in (2, 4, 8)),
    MemorySpec("rnnlm_l2_full", "rnnlm", {"seed": 0, "layers": 2, "hidden": 1500, "vocab": 10000, "steps": 35,
                                          "batch": 64},
               400, "placeto-k80", 2, False,
               "2017 results table: RNNLM (batch 64) single-GPU 1.57 s, expert 3.81 s (2 GPUs), 4.46 s (4 GPUs); "
               "2018 Table 1: RNNLM GPU-only 1.57 s, 2 GPUs, human expert 1.57 s",
               "Zaremba et al. 2014's large model (the 2017 paper's RNNLM citation): 2 layers of 1500 units, "
               "vocabulary 10,000, 35 unrolled steps; batch 64 (the seeds)",
               "the seeds' (2017): one LSTM layer per GPU, the embedding with the first, the softmax with the last"),
    MemorySpec("inception_v3_full", "inception_v3", {"seed": 0, "batch": 32, "image_size": 299, "width": 1.0},
               400, "placeto-k80", 2, False,
               "2017 results table: Inception-V3 (batch 32) single-GPU 4.60 s, expert 11.22 s (2 GPUs), 10.65 s "
               "(4 GPUs); 2018 Table 1: Inception-V3 GPU-only 0.15 s, 2 GPUs, human expert 0.15 s",
               "Szegedy et al. 2016: full width, 299 x 299 images, 1000 classes, auxiliary head; batch 32 (the seeds)",
               "the seeds' (2018: the human expert's time is the GPU-only time): everything on GPU 0"),
    MemorySpec("gpt_l24_full", "transformer", {"seed": 0, "d_model": 1024, "heads": 16, "layers": 24, "seq_len": 512,
                                               "batch": 8, "vocab": 32000, "mlp_ratio": 4, "lm": True},
               400, "v100-nvlink", 4, True,
               "none: not a seed benchmark",
               "ours: a GPT-2-medium-like decoder (Radford et al. 2019: 24 layers, width 1024, 16 heads) with a "
               "32,000-token vocabulary, 512 tokens, batch 8, Adam (optax), float32",
               "ours, not a seed's: layer-contiguous equal split (embedding, blocks, head in model order, an equal "
               "share of the 26 layers per device)"),
)


def memory_spec(name: str) -> MemorySpec:
    """The spec called `name`.

    Raises:
      KeyError: for an unknown name.
    """
    for spec in MEMORY_SPECS:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown memory benchmark {name!r}; expected one of {[s.name for s in MEMORY_SPECS]}")


def expert_groups(spec: MemorySpec, layer_groups: list[list[str]], n_devices: int) -> list[list[str]]:
    """The layer groups of the expert on `n_devices` (expert_op_placement puts group j on device j * D // G).

    The program's own (`meta["layer_groups"]`), except for NMT on at least L + 2 devices: then each LSTM layer
    (encoder and decoder layer i together, the embeddings with layer 0), the attention and the softmax on a device
    of its own, the split the 2017 paper describes ("each layer, including all LSTM layers, the attention layer,
    and the softmax layer, is computed by a GPU", citing Sutskever et al. 2014 and Wu et al. 2016).
    """
    layers = spec.kwargs.get("layers", 0)
    if spec.kind != "nmt" or n_devices < layers + 2:
        return layer_groups
    groups = [[f"encoder_lstm_{i}", f"decoder_lstm_{i}"] for i in range(layers)]
    groups[0] = ["encoder_embedding", "decoder_embedding", *groups[0]]
    return groups + [["attention"], ["softmax"]]


def build_graph(spec: MemorySpec) -> tuple[Graph, dict[str, np.ndarray]]:
    """The grouped graph of `spec`, traced by shape, and its expert placements.

    Meta as simulator.workloads.families.build_graph writes it (program, grouping, layers, model), plus
    `num_params` and `memory` (the spec's preset and the seeds' rows). Expert placements for 2, 4 and 8 devices.
    """
    program = build_program(spec.kind, abstract=True, **spec.kwargs)
    traced = trace(program.step, program.params, program.opt_state, program.batch, name=spec.name)
    op_graph = annotate_costs(traced.graph, ANALYTIC_KINDS)
    grouping = with_later_kinds(group(op_graph, spec.target_groups), op_graph)
    experts = {}
    for d in DEVICE_COUNTS:
        if spec.kind == "inception_v3":
            experts[str(d)] = np.zeros(grouping.graph.n_nodes, dtype=np.int32)
        else:
            ops = expert_op_placement(op_graph, expert_groups(spec, program.meta["layer_groups"], d), d)
            experts[str(d)] = group_placement_from_ops(grouping, ops).astype(np.int32)
    meta = {"family": FAMILY, "program": {"kind": spec.kind, "kwargs": spec.kwargs, "abstract": True},
            "ops": op_graph.n_nodes, "op_edges": op_graph.n_edges, "layers": program.meta["layers"],
            "model": program.meta["config"], "num_params": program.meta["num_params"],
            "memory": {"preset": spec.preset, "expert_devices": spec.expert_devices, "seeds": spec.seeds,
                       "sizes_from": spec.sizes_from, "expert_from": spec.expert_from},
            "grouping": {"target_groups": spec.target_groups, "op_to_group": grouping.op_to_group.tolist(),
                         "op_keys": op_keys(op_graph, traced.input_leaf),
                         "jax_version": op_graph.meta.get("jax_version")},
            "expert_placement": {d: p.tolist() for d, p in experts.items()}}
    return dataclasses.replace(grouping.graph, name=spec.name, meta=meta), experts


def memory_entry(graph: Graph, spec: MemorySpec, experts: dict[str, np.ndarray]) -> dict[str, Any]:
    """Manifest entry: graph_entry's statistics plus the memory figures.

    Bytes: `persistent_bytes` (parameters and optimizer state), `single_device_peak_bytes` (all on device 0 of one
    `preset` device) against `capacity_bytes` (one device's), and `expert_peak_bytes` {D: float[D] per device}.
    """
    capacity = cluster_preset(spec.preset, 1).devices[0].memory_bytes
    single = simulate(graph, np.zeros(graph.n_nodes, dtype=np.int32), cluster_preset(spec.preset, 1))
    peaks = {d: simulate(graph, p, cluster_preset(spec.preset, int(d))).peak_memory for d, p in experts.items()}
    return {**graph_entry(graph, f"{spec.name}.json.gz"), "split": "test", "num_params": graph.meta["num_params"],
            "persistent_bytes": float(graph.persistent_bytes.sum()), "preset": spec.preset,
            "capacity_bytes": capacity, "single_device_peak_bytes": float(single.peak_memory[0]),
            "single_device_oom_in_seeds": spec.single_device_oom, "expert_devices": spec.expert_devices,
            "expert_peak_bytes": {d: [round(float(b)) for b in p] for d, p in peaks.items()},
            "seeds": spec.seeds, "sizes_from": spec.sizes_from, "expert_from": spec.expert_from}


def build_one(name: str, out_dir: str) -> dict[str, Any]:
    """Build, write and summarise the spec called `name` under `out_dir`.

    Writes `<name>.json.gz` and `<name>.expert_<D>dev.json`; returns its manifest entry.
    """
    spec = memory_spec(name)
    graph, experts = build_graph(spec)
    out = Path(out_dir)
    save_graph(graph, out / f"{spec.name}.json.gz")
    for d, placement in experts.items():
        save_placement(out / f"{spec.name}.expert_{d}dev.json", placement, [f"/gpu:{k}" for k in range(int(d))],
                       graph=graph)
    return memory_entry(graph, spec, experts)


def build(out_root: str | Path = DATASETS, workers: int = 2, only: list[str] | None = None) -> Path:
    """Build every MEMORY_SPECS graph under `out_root/memory/`, with its manifest and README table.

    `workers` processes trace in parallel (spawned: JAX starts fresh in each); `only` restricts to the named graphs
    (the manifest and README are then left as they are). Returns the folder.
    """
    out = Path(out_root) / FAMILY
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in MEMORY_SPECS if only is None or s.name in only]
    names.sort(key=lambda n: -memory_spec(n).target_groups)  # the longest first, so the pool ends together
    if workers > 1 and len(names) > 1:
        with spawned_pool(workers) as pool:
            entries = dict(zip(names, pool.map(build_one, names, [str(out)] * len(names))))
    else:
        entries = {n: build_one(n, str(out)) for n in names}
    if only is None:
        graphs = [entries[s.name] for s in MEMORY_SPECS]
        write_json(out / "manifest.json", {"family": FAMILY, "seed": 0, "cost_kinds": list(COST_KINDS),
                                           "costs": COSTS_NOTE, "graphs": graphs})
    return out


COSTS_NOTE = ("analytic, none profiled (simulator.model.costs): op-by-op rooflines for k80 and cpu summed per group, "
              "fused-group rooflines for v100, a100, h100, h100-pcie and h200; memory from the traced shapes "
              "(float32 parameters, optimizer slots and tensors)")


# ---- datasets/memory/README.md ---------------------------------------------------------------------------------
README_HEAD = """<!-- Written by simulator.workloads.memory.write_readme (placeto datasets build --family memory) down to the line
that closes the generated table; text below that line is kept as it is. -->

# Memory benchmarks: where one device is not enough

The seeds' models at full size (`simulator/workloads/memory.py`: traced by shape, nothing allocated; analytic costs;
grouped like the benchmarks). Peaks are simulated (`simulate(graph, placement, cluster_preset(preset, D))`): the
single device is everything on device 0 of one preset device; the expert is `<graph>.expert_<D>dev.json` on the seeds'
device count. GB = 1e9 bytes; params in millions; compute in K80 analytic milliseconds.
"""


def readme_table(manifest: dict[str, Any]) -> str:
    """The markdown table of a memory manifest: sizes, single-device and expert peaks against capacity."""
    lines = ["| graph | params M | ops | groups | persistent GB | preset (GB each) | one device: peak GB | "
             "seeds: one GPU | expert D | expert peaks GB | expert fits | K80 compute ms |",
             "|---|--:|--:|--:|--:|---|--:|---|--:|---|---|--:|"]
    for g in manifest["graphs"]:
        cap, d = g["capacity_bytes"], str(g["expert_devices"])
        peaks = g["expert_peak_bytes"][d]
        single = g["single_device_peak_bytes"]
        lines.append(f"| {g['name']} | {g['num_params'] / 1e6:.1f} | {g['ops']} | {g['groups']} | "
                     f"{g['persistent_bytes'] / GB:.2f} | {g['preset']} ({cap / GB:.0f}) | {single / GB:.2f}"
                     f"{' (OOM)' if single > cap else ''} | {seeds_verdict(g)} | "
                     f"{d} | {' / '.join(f'{b / GB:.2f}' for b in peaks)} | "
                     f"{'yes' if max(peaks) <= cap else 'no (OOM)'} | {g['total_compute_us'] / 1e3:.0f} |")
    return "\n".join(lines) + "\n"


def seeds_verdict(entry: dict[str, Any]) -> str:
    """What the seeds report for one GPU: "OOM", "runs", or "not a seed model"."""
    if entry["seeds"].startswith("none"):
        return "not a seed model"
    return "OOM" if entry["single_device_oom_in_seeds"] else "runs"


def write_readme(root: str | Path = DATASETS) -> None:
    """(Re)write `root/memory/README.md` from its manifest, keeping the text below README_END."""
    folder = Path(root) / FAMILY
    path = folder / "README.md"
    kept = hand_written(path.read_text()) if path.is_file() else ""
    table = readme_table(load_manifest(FAMILY, root))
    text = README_HEAD + "\n" + table + "\n" + README_END + "\n" + (f"\n{kept}\n" if kept else "")
    atomic_write_bytes(path, text.encode())
