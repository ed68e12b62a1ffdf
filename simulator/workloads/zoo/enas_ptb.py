"""ENAS-PTB family: language models of sampled ENAS recurrent cells.

ENAS recurrent cell (Pham et al. 2018, Sec. 2.1) with `n_nodes` nodes and highway connections:

    node 0:  c = sigmoid(W_c [x_t; h_{t-1}]),  s_0 = c * f_0(W_h [x_t; h_{t-1}]) + (1 - c) * h_{t-1}
    node j:  picks a previous node i < j,  c = sigmoid(W_c^j s_i),  s_j = c * f_j(W_h^j s_i) + (1 - c) * s_i
    h_t   =  mean of the loose ends (nodes no other node reads)

with activations f_j from {tanh, relu, sigmoid, identity}. Sampling is uniform, as the untrained ENAS
controller. Layer scopes: `embedding`, `cell` (sub-scopes `node_j`), `softmax`.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from simulator.workloads.zoo import common
from simulator.workloads.zoo.rnn_layers import SoftmaxLoss, lm_tokens, time_slices

ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")
_ACTIVATION_FNS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid, "identity": lambda x: x}


@dataclasses.dataclass(frozen=True)
class RNNNode:
    """One node of an ENAS recurrent cell."""

    prev: int
    """Index of the node it reads; -1 for node 0, which reads x_t and h_{t-1}."""
    activation: str
    """One of ACTIVATIONS."""


@dataclasses.dataclass(frozen=True)
class RNNCellArch:
    """A sampled ENAS recurrent cell; hashable, so a Flax module field."""

    nodes: tuple[RNNNode, ...]

    def loose_ends(self) -> tuple[int, ...]:
        """Indices of the nodes no other node reads: the cell averages them."""
        used = {n.prev for n in self.nodes}
        return tuple(j for j in range(len(self.nodes)) if j not in used)

    def to_json(self) -> list[dict]:
        """[{"prev": i, "activation": name}, ...]."""
        return [dataclasses.asdict(n) for n in self.nodes]


def sample_rnn_cell(rng: np.random.Generator, n_nodes: int = 8) -> RNNCellArch:
    """Uniformly sample an ENAS recurrent cell with `n_nodes` nodes."""
    nodes = [RNNNode(-1, ACTIVATIONS[rng.integers(len(ACTIVATIONS))])]
    for j in range(1, n_nodes):
        nodes.append(RNNNode(int(rng.integers(j)), ACTIVATIONS[rng.integers(len(ACTIVATIONS))]))
    return RNNCellArch(tuple(nodes))


@dataclasses.dataclass(frozen=True)
class PTBConfig:
    """Size of an ENAS-PTB program; the seed gives the architecture."""

    steps: int = 35
    """Unrolled time steps T (ENAS uses bptt 35)."""
    hidden: int = 64
    """Cell and embedding width H."""
    batch: int = 32
    """Sequences per batch B."""
    vocab: int = 1000
    """Vocabulary size V (PTB has 10000; reduced)."""
    n_nodes: int = 8
    """Nodes per sampled cell (ENAS uses 12)."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("sgd", 20.0, clip_norm=0.25)
    """SGD with ENAS's large learning rate and gradient norm clipped to 0.25."""

    @classmethod
    def tiny(cls) -> "PTBConfig":
        """A CPU-cheap preset for tests."""
        return cls(steps=3, hidden=8, batch=2, vocab=16, n_nodes=4)


class EnasRNNCell(nn.Module):
    """One step of a sampled ENAS recurrent cell; reuse it every step."""

    arch: RNNCellArch
    hidden: int

    @nn.compact
    def __call__(self, h_prev: jax.Array, x: jax.Array) -> jax.Array:
        """The next hidden state h_t.

        Args:
            h_prev: float32[B, H].
            x: float32[B, H].

        Returns:
            h_t: float32[B, H].
        """
        states = []
        for j, node in enumerate(self.arch.nodes):
            if node.prev < 0:
                inp, carry = jnp.concatenate([x, h_prev], axis=-1), h_prev
            else:
                inp = carry = states[node.prev]
            z = nn.Dense(2 * self.hidden, use_bias=False, name=f"node_{j}")(inp)
            gate, cand = jnp.split(z, 2, axis=-1)
            gate = jax.nn.sigmoid(gate)
            states.append(gate * _ACTIVATION_FNS[node.activation](cand) + (1.0 - gate) * carry)
        ends = [states[j] for j in self.arch.loose_ends()]
        return sum(ends[1:], ends[0]) / len(ends)


class EnasLM(nn.Module):
    """Embedding -> sampled cell over T steps -> softmax cross-entropy."""

    config: PTBConfig
    arch: RNNCellArch

    @nn.compact
    def __call__(self, inputs: jax.Array, targets: jax.Array) -> jax.Array:
        """The mean next-token loss.

        Args:
            inputs, targets: int32[B, T].

        Returns:
            float32[] mean loss.
        """
        cfg = self.config
        xs = time_slices(nn.Embed(cfg.vocab, cfg.hidden, name="embedding")(inputs))
        cell = EnasRNNCell(self.arch, cfg.hidden, name="cell")
        h = jnp.zeros((inputs.shape[0], cfg.hidden), jnp.float32)
        outputs = []
        for x in xs:
            h = cell(h, x)
            outputs.append(h)
        return SoftmaxLoss(cfg.vocab, name="softmax")(jnp.stack(outputs, axis=1), targets)


def build_ptb(seed: int = 0, *, config: PTBConfig | None = None, **overrides) -> common.Program:
    """An ENAS-PTB training step whose cell is sampled from `seed`.

    `overrides` replace PTBConfig fields.
    """
    cfg = dataclasses.replace(config or PTBConfig(), **overrides)
    arch = sample_rnn_cell(common.numpy_rng(seed, common.ARCH_STREAM), cfg.n_nodes)
    batch = lm_tokens(common.numpy_rng(seed, common.DATA_STREAM), cfg.batch, cfg.steps, cfg.vocab)
    meta = {
        "family": "ptb",
        "config": common.config_dict(cfg),
        "cell": arch.to_json(),
        "layers": ["embedding", "cell", "softmax"],
    }
    return common.make_program(f"ptb_{seed:03d}", EnasLM(cfg, arch), batch, seed, cfg.optimizer, meta)
