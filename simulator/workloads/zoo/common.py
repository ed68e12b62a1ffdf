"""The zoo programs' contract and their shared training-step factory.

A `Program` is one training step of a real model: forward pass, loss, backward pass (`jax.value_and_grad`)
and an optax parameter update, bundled with real initialised parameters, optimizer state and an example
batch, so `jax.make_jaxpr(program.step)(program.params, program.opt_state, program.batch)` yields the graph
that device-placement papers place ("one forward pass, one backward pass and one parameter update").

Built by shape (`make_program(..., abstract=True)`, the builders' `abstract` argument where they take one), the
parameters, optimizer state and batch are `jax.ShapeDtypeStruct`s from `jax.eval_shape`: nothing is allocated, so a
model of billions of bytes traces on a laptop (simulator.tracing.trace takes such leaves), but the step cannot run.

Name stacks. Every Flax module call in the loss is wrapped in `jax.named_scope(module_name)` (Flax's
named-call mode, switched on only while the step is traced), so forward equations carry stacks such as
`jvp(NMT)/encoder_lstm_0/gates` and backward ones `transpose(jvp(NMT))/encoder_lstm_0/gates`. The update of
layer `L`'s parameters runs under `update/L`. `meta["layers"]` lists the top-level layer scopes in model order
and `meta["layer_groups"]` the grouping a human expert would place on successive devices.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.extend import core as jex_core

Params = dict[str, Any]  # {layer_scope: {param_name: array}} -- Flax's "params" collection
Batch = dict[str, jax.Array]
LossFn = Callable[[Params, Batch], jax.Array]  # (params, batch) -> float32[] loss
StepFn = Callable[[Params, Any, Batch], tuple[Params, Any, jax.Array]]

ARCH_STREAM = 0  # numpy stream that samples architectures (ENAS cells)
DATA_STREAM = 1  # numpy stream that draws the example batch
PARAM_STREAM = 2  # numpy stream that draws the initial parameters


@dataclasses.dataclass(frozen=True)
class Program:
    """A training step with everything needed to run or trace it.

    Attributes:
        name: unique program name, e.g. "nmt_l4" or "cifar10_007".
        step: pure `step(params, opt_state, batch) -> (params, opt_state, loss)`; jit-traceable.
        params: {layer_scope: {...: float32 array}} real initialised parameters (jax.ShapeDtypeStruct leaves
            when built by shape: module docstring).
        opt_state: {layer_scope: optax state}; one optax state per top-level layer (see `make_step`).
        batch: {input_name: array} example inputs, deterministic from the seed (or their shapes, likewise).
        meta: JSON-serialisable description: "family", "config", "seed", "layers", "layer_groups",
            "param_names" ({layer: ["layer/sub/kernel", ...]}), "num_params", plus family extras.
    """

    name: str
    step: StepFn
    params: Any
    opt_state: Any
    batch: Any
    meta: dict


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Which optax optimizer the step applies."""

    name: str = "sgd"
    """One of "sgd", "momentum", "adam", "rmsprop"."""
    learning_rate: float = 0.1
    """Constant learning rate."""
    clip_norm: float | None = None
    """If set, gradients are first rescaled to at most this global L2 norm (as the RNN papers do)."""


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    """The optax transformation named by `config`.

    Raises:
        ValueError: for an unknown optimizer name.
    """
    lr = config.learning_rate
    makers = {
        "sgd": lambda: optax.sgd(lr),
        "momentum": lambda: optax.sgd(lr, momentum=0.9),
        "adam": lambda: optax.adam(lr),
        "rmsprop": lambda: optax.rmsprop(lr, decay=0.9, eps=1.0),
    }
    if config.name not in makers:
        raise ValueError(f"unknown optimizer {config.name!r}; expected one of {sorted(makers)}")
    return makers[config.name]()


def make_step(loss_fn: LossFn, tx: optax.GradientTransformation, clip_norm: float | None = None) -> StepFn:
    """A training step: gradients, optional clipping, `tx` per layer.

    value_and_grad of `loss_fn`, global-norm clipping to `clip_norm` if set, then `tx`. The update runs once per
    top-level layer, under `jax.named_scope("update/<layer>")`, so every update equation names the layer that owns
    its parameter (a per-variable update, as in TensorFlow graphs). `opt_state` is therefore {layer: tx state of
    that layer's params}. Clipping needs all gradients, so its equations sit under `update/clip_by_global_norm`,
    outside every layer.
    """

    def step(params: Params, opt_state: Any, batch: Batch) -> tuple[Params, Any, jax.Array]:
        def named_loss(p: Params) -> jax.Array:
            with nn.override_named_call(True):
                return loss_fn(p, batch)

        loss, grads = jax.value_and_grad(named_loss)(params)
        if clip_norm is not None:
            with jax.named_scope("update/clip_by_global_norm"):
                scale = jnp.minimum(1.0, clip_norm / (optax.tree.norm(grads) + 1e-6))
                grads = jax.tree.map(lambda g: g * scale, grads)
        new_params, new_state = {}, {}
        for layer in params:
            with jax.named_scope(f"update/{layer}"):
                updates, new_state[layer] = tx.update(grads[layer], opt_state[layer], params[layer])
                new_params[layer] = optax.apply_updates(params[layer], updates)
        return new_params, new_state, loss

    return step


def make_program(
    name: str,
    model: nn.Module,
    batch: Mapping[str, Any],
    seed: int,
    optimizer: OptimizerConfig,
    meta: dict,
    abstract: bool = False,
) -> Program:
    """`model` initialised and wrapped as a Program.

    `model.__call__(**batch)` returns the scalar loss. `meta` must hold "layers" (top-level scopes in model order,
    exactly the params' top-level keys) and may hold "layer_groups"; "param_names", "num_params", "seed" and
    "optimizer" are filled in here. With `abstract`, `batch` may hold arrays or jax.ShapeDtypeStructs, and the
    program's params, opt_state and batch are all jax.ShapeDtypeStructs (`jax.eval_shape`: nothing allocated).

    Raises:
        ValueError: if meta["layers"] disagrees with the parameters the model created.
    """
    if abstract:
        batch = {k: jax.ShapeDtypeStruct(np.shape(v), v.dtype) for k, v in batch.items()}
        params = jax.eval_shape(model.init, jax.random.key(seed), **batch)["params"]
    else:
        batch = {k: jax.device_put(np.asarray(v)) for k, v in batch.items()}
        params = init_params(model, batch, seed)
    layers = list(meta["layers"])
    if sorted(layers) != sorted(params):
        raise ValueError(f"{name}: meta layers {layers} != parameter scopes {list(params)}")
    params = {layer: params[layer] for layer in layers}
    tx = make_optimizer(optimizer)
    # One compiled init instead of hundreds of eagerly compiled zeros_like ops.
    init_state = lambda ps: {layer: tx.init(p) for layer, p in ps.items()}  # noqa: E731
    opt_state = jax.eval_shape(init_state, params) if abstract else jax.jit(init_state)(params)

    def loss_fn(p: Params, b: Batch) -> jax.Array:
        return model.apply({"params": p}, **b)

    full_meta = dict(meta)
    full_meta.setdefault("layer_groups", [[layer] for layer in layers])
    full_meta.update(
        seed=seed,
        optimizer=dataclasses.asdict(optimizer),
        param_names=param_names(params),
        num_params=int(sum(math.prod(x.shape) for x in jax.tree.leaves(params))),
    )
    step = make_step(loss_fn, tx, optimizer.clip_norm)
    return Program(name, step, params, opt_state, batch, full_meta)


def init_params(model: nn.Module, batch: Batch, seed: int) -> Params:
    """Initial parameters of `model`, drawn on the host from the seed.

    From (seed, PARAM_STREAM). Shapes come from `jax.eval_shape(model.init, ...)` (tracing only); values follow
    Flax's default initialisers by leaf name: kernels LeCun truncated-normal (fan-in = all but the last axis),
    embeddings normal with std 1/sqrt(features), biases and batch-norm offsets 0, batch-norm scales 1. Compiling
    `model.init` with XLA instead compiles every initialiser, which is slow for the CNNs on CPU.
    """
    shapes = jax.eval_shape(model.init, jax.random.key(seed), **batch)["params"]
    rng = numpy_rng(seed, PARAM_STREAM)

    def leaf(path, shape_dtype) -> jax.Array:
        return jax.device_put(_init_value(rng, str(path[-1].key), shape_dtype.shape))

    params = jax.tree.map_with_path(leaf, shapes)
    return {layer: params[layer] for layer in params}


def _init_value(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """One float32 initial value; see `init_params` for the rules.

    Raises:
        ValueError: for a leaf name without a rule.
    """
    if name in ("bias", "offset"):
        return np.zeros(shape, np.float32)
    if name == "scale":
        return np.ones(shape, np.float32)
    if name == "embedding":
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
    if name == "kernel":
        z = rng.standard_normal(shape)
        while (bad := np.abs(z) > 2.0).any():  # truncate at 2 std, as jax's truncated_normal
            z[bad] = rng.standard_normal(int(bad.sum()))
        std = 1.0 / np.sqrt(np.prod(shape[:-1])) / 0.87962566103423978  # unit variance after truncation
        return (z * std).astype(np.float32)
    raise ValueError(f"no initialiser rule for parameter {name!r} of shape {shape}")


def param_names(params: Params) -> dict[str, list[str]]:
    """{layer: ["layer/sub/.../leaf", ...]}: every parameter leaf's path.

    Grouped by top-level layer.
    """
    out: dict[str, list[str]] = {}
    for path, _ in jax.tree.flatten_with_path(params)[0]:
        keys = [str(getattr(k, "key", k)) for k in path]
        out.setdefault(keys[0], []).append("/".join(keys))
    return out


def numpy_rng(seed: int, stream: int) -> np.random.Generator:
    """An independent, deterministic numpy generator for (seed, stream)."""
    return np.random.default_rng([seed, stream])


def config_dict(config: Any) -> dict:
    """A frozen config dataclass as a JSON-serialisable dict."""
    return dataclasses.asdict(config)


def count_equations(jaxpr: Any) -> int:
    """Number of equations in a (closed) jaxpr, sub-jaxprs included.

    Counted recursively through every sub-jaxpr. A call-like equation (pjit, custom_jvp_call, ...) counts once
    itself plus its body's equations.
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in inner.eqns:
        total += 1
        for sub in jex_core.jaxprs_in_params(eqn.params):
            total += count_equations(sub)
    return total


def name_stacks(jaxpr: Any, prefix: str = "") -> list[str]:
    """Full name stack of every equation, in order.

    Sub-jaxpr stacks are prefixed by their caller's.
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    out = []
    for eqn in inner.eqns:
        stack = str(eqn.source_info.name_stack)
        full = "/".join(s for s in (prefix, stack) if s)
        out.append(full)
        for sub in jex_core.jaxprs_in_params(eqn.params):
            out.extend(name_stacks(sub, full))
    return out
