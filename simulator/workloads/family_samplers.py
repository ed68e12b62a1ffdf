"""The hyperparameters each graph family draws for its zoo program.

simulator.workloads.families builds the families. A sampler takes a numpy Generator and returns the kwargs of
`simulator.workloads.zoo.build_program(kind, **kwargs)` (config fields of the kind; the family adds the seed). They
are kept apart from simulator.workloads.families so that the zoo reads them without importing it: the largest value
of each field the project builds bounds what a graph file may ask for
(simulator.workloads.zoo.registry.reference_sizes).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def _choice(rng: np.random.Generator, values: list) -> Any:
    return values[int(rng.integers(len(values)))]


def _cifar10(rng: np.random.Generator) -> dict[str, Any]:
    return {"n_cells": _choice(rng, [1, 2]), "channels": _choice(rng, [8, 16, 32]),
            "batch": _choice(rng, [16, 32, 64]), "n_nodes": _choice(rng, [4, 5])}


def _ptb(rng: np.random.Generator) -> dict[str, Any]:
    return {"steps": int(rng.integers(8, 25)), "hidden": _choice(rng, [64, 128, 256]),
            "batch": _choice(rng, [16, 32, 64])}


def _nmt(rng: np.random.Generator) -> dict[str, Any]:
    length = int(rng.integers(5, 21))  # the "RNN length" varied by Placeto's nmt family
    return {"layers": 2, "src_len": length, "tgt_len": length, "batch": _choice(rng, [16, 32, 64, 128])}


def _transformer(rng: np.random.Generator) -> dict[str, Any]:
    return {"d_model": _choice(rng, [64, 128, 256]), "heads": _choice(rng, [2, 4, 8]),
            "layers": int(rng.integers(1, 5)), "seq_len": _choice(rng, [32, 64, 128]),
            "batch": _choice(rng, [4, 8, 16]), "mlp_ratio": _choice(rng, [2, 4]), "lm": bool(rng.integers(2))}


def _micro_batches(rng: np.random.Generator, layers: int, lo: int, hi: int) -> int:
    """Micro-batches M in {2, 4, 8, 16, 32} with lo <= layers * M <= hi.

    layers * M: the graph's copies of its layers; M = 2 if no value fits.
    """
    return _choice(rng, [m for m in (2, 4, 8, 16, 32) if lo <= layers * m <= hi] or [2])


def _mlp(rng: np.random.Generator) -> dict[str, Any]:
    depth, layer_norm = int(rng.integers(2, 13)), bool(rng.integers(2))
    weight = depth * (2 if layer_norm else 1)  # a layer-normalised layer has about twice the ops
    return {"depth": depth, "width": _choice(rng, [64, 128, 256, 512]), "taper": _choice(rng, [1.0, 0.75, 0.5]),
            "batch": _choice(rng, [64, 128, 256]), "micro_batches": _micro_batches(rng, weight, 32, 128),
            "layer_norm": layer_norm, "activation": int(rng.integers(1, 5)),
            "in_features": _choice(rng, [256, 784, 1024]), "classes": _choice(rng, [10, 100])}


def _matmul(rng: np.random.Generator) -> dict[str, Any]:
    chains = _choice(rng, [1, 2, 4, 8])
    length = int(rng.integers(-(-40 // chains), min(64, 112 // chains) + 1))  # 40-112 matmuls in all
    return {"chains": chains, "length": length, "size": _choice(rng, [128, 256, 512, 1024]),
            "expand": _choice(rng, [1, 2, 4]), "rows": _choice(rng, [32, 64, 128, 256]),
            "nonlinear": bool(rng.integers(2))}


def _moe(rng: np.random.Generator) -> dict[str, Any]:
    experts = int(rng.integers(2, 9))
    return {"experts": experts, "top_k": _choice(rng, [1, 2]), "moe_layers": int(rng.integers(1, 3)),
            "d_model": _choice(rng, [64, 128, 256]), "hidden": _choice(rng, [128, 256, 512]),
            "seq_len": _choice(rng, [16, 32, 64]), "batch": _choice(rng, [4, 8, 16])}


def _cnn(rng: np.random.Generator) -> dict[str, Any]:
    stages, convs = int(rng.integers(2, 5)), int(rng.integers(1, 4))
    return {"stages": stages, "convs": convs, "channels": _choice(rng, [8, 16, 32]), "kernel": _choice(rng, [3, 5]),
            "image_size": _choice(rng, [16, 32, 64]), "batch": _choice(rng, [64, 128]),
            "micro_batches": _micro_batches(rng, stages * convs, 32, 96), "dense_width": _choice(rng, [64, 128, 256])}


SAMPLERS: dict[str, Callable[[np.random.Generator], dict[str, Any]]] = {
    "cifar10": _cifar10, "ptb": _ptb, "nmt": _nmt, "transformer": _transformer, "mlp": _mlp, "matmul": _matmul,
    "moe": _moe, "cnn": _cnn}
