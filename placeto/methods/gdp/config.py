"""GDP's config (a run's config.json) and fine-tuning settings.

Model, PPO and budget in one frozen dataclass; the settings of per-graph fine-tuning; the `tiny` and `large` presets.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from placeto.config_fields import without_retired
from placeto.coarsen import MAX_POLICY_NODES  # large's coarse_groups: the largest graph the others place as it is

NAME = "gdp"  # config.json's "method" field of a gdp run directory
DEFAULT_CHECKPOINT = "gdp-general"  # the shipped policy gdp places with when given none
LARGE_CHECKPOINT = "gdp-large"  # ... on graphs of more than base.LARGE_GRAPH_NODES nodes
DECODERS = ("independent", "heft", "etf")  # GdpConfig.decoder


@dataclasses.dataclass(frozen=True)
class GdpConfig:
    # ---- model ------------------------------------------------------------------------------------------
    hidden: int = 64
    """Width of node embeddings, attention and the device-scoring MLP."""
    sage_rounds: int = 4
    """GraphSAGE rounds (mean over parents and over children, separate weights, shared across rounds)."""
    segment: int = 128
    """Nodes per attention segment; each segment attends to itself and to the previous one (memory)."""
    attn_layers: int = 2
    """Segment-recurrent attention layers."""
    heads: int = 4
    """Attention heads."""
    max_devices: int = 8
    """Device axis padding: the policy places on any cluster of up to this many devices."""
    decoder: str = "independent"
    """How a placement is read off the network: "independent", or a list decoder ("heft", "etf").

    "independent": every node's device drawn from its own distribution, all at once (seed 003's single shot).
    "heft" and "etf": list decoders, decisions conditioned on the devices already chosen: the nodes in a list
    scheduler's order (HEFT's static upward rank, or m-ETF's earliest-start ready node), each device's logit the
    network's score plus a learned per-node weight times -log1p(finish gap / cost unit), the finish gap being how
    much later the node would finish there than on the best device given the placement so far; devices the node's
    memory does not fit are masked as the list schedulers do (placeto.methods.gdp.decoder). Still one forward pass;
    the decoding is a sequential numba loop (experiments/results/benchmarks/gdp_scale.md compares them).
    """

    greedy_ties: str = "random"
    """How a list decoder's greedy decoding (the one pass) breaks exact ties: "random" or "lowest".

    "random": uniforms of a fixed key (better on the ungrouped op graphs:
    experiments/results/ablations/gdp_decoder.md); "lowest": m-ETF's own rule (at the initialisation the one pass is
    then m-ETF's placement exactly). On the grouped family graphs "random" placed worse than m-ETF
    (experiments/README.md, "Figures behind design choices"), so the generalizing policies use "lowest".
    """

    coarse_groups: int = 0
    """Coarse-to-fine placing: the group count of large, communication-bound graphs (0: off).

    A graph of more than this many nodes whose communication-to-computation ratio exceeds `coarse_ccr`
    (`placeto.features.communication_ratio`) is grouped to this many groups (`placeto.coarsen.for_policy`:
    colocation, contractions that delay nothing, critical-path-greedy merging). The one pass places the groups and
    expands the placement to the ops; with a budget, the greedy placements of the groups and of the ops are both
    simulated and the rest goes to the better view, every sample scored on the op graph (placeto.methods.gdp.place).
    Placing only: training places the graphs it is given.
    """
    coarse_ccr: float = 4.0
    """The communication-to-computation ratio above which `coarse_groups` applies.

    On placeto-k80 the traced op graphs of gdp_scale lie above it and its generated graphs below; grouping helps the
    former and hurts the latter (experiments/results/benchmarks/gdp_scale.md: gdp-large-grouped against
    gdp-etf-fresh, at 4 and 8 devices; experiments/README.md, "GDP at scale").
    """

    # ---- PPO ----------------------------------------------------------------------------------------------
    episodes: int = 1_000_000
    """Training budget: total placements sampled (and simulated), over all tasks.

    0: no update; the run holds the initial parameters (e.g. a list decoder's starting policy).
    """
    samples_per_update: int = 512
    """Placements sampled from the current policy per update (on one task).

    They share one forward pass, so a large batch costs little beyond its simulations: on the nmt family, 512
    reached the zero-shot quality of 32 in the same wall time at several times the simulator calls per second
    (experiments/README.md, "Figures behind design choices"; experiments/results/benchmarks/gdp_throughput.md).
    """
    ppo_epochs: int = 4
    """Gradient steps on each batch of placements."""
    clip: float = 0.2
    """PPO ratio clip, per node decision.

    The ratio of a whole placement is a product over N nodes.
    """
    lr: float = 1e-3
    """Adam learning rate."""
    entropy: float = 0.01
    """Entropy bonus coefficient (mean per-node entropy, nats)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    temperature: float = 1.0
    """Temperature of the sampled and trained policy: softmax(logits / this); > 1 is flatter.

    The greedy placement (argmax) does not depend on it. Fine-tuning raises it (FinetuneSettings).
    """
    keep_single: bool = False
    """The one pass returns the single device where that simulates faster.

    The single device: every node on the device the graph alone runs fastest on (placeto.baselines.single). Two
    simulator calls, so the one pass is never slower than the single device (on a GPU+CPU cluster m-ETF's order
    and the decoder's finish times can still lean on the slow device).
    """
    baseline: str = "mean"
    """What a sample's reward is compared with: "mean" or "greedy" (list decoders only).

    "mean": the batch mean (the advantage then over the batch standard deviation); "greedy": the policy's own one
    pass on the task (a self-critical baseline, Rennie et al. 2017, as Kool et al. 2019 train their attention placers
    of routes): a sample is pushed up only if it beats the greedy decoding, so training improves the one pass, not
    only the sampled placements (one more decoding and one more simulator call per update).
    """
    imitation: float = 0.0
    """Weight of a cross-entropy toward the list scheduler's own choice, added to the PPO loss.

    At every decision a list decoder recorded: the allowed device where the node finishes first, the lowest on ties
    (m-ETF's rule for the "etf" decoder). What the policy knows from the list scheduler anchors what RL learns
    beyond it.
    """

    # ---- run --------------------------------------------------------------------------------------------
    seed: int = 0
    """Seeds initialisation and sampling: equal seeds give equal checkpoints."""
    time_limit_minutes: float = math.inf
    """Stop (with a checkpoint) after this much wall time in minutes; a rerun resumes."""
    checkpoint_seconds: float = 60.0
    """Checkpoint at most this often, in seconds (and after the first update and at the end)."""

    def __post_init__(self):
        for name in ("hidden", "sage_rounds", "segment", "attn_layers", "heads", "max_devices", "episodes",
                     "samples_per_update", "ppo_epochs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name in ("sage_rounds", "episodes") else 1):
                raise ValueError(f"GdpConfig: {name} must be a positive integer, got {v!r}")
        if self.baseline not in ("mean", "greedy"):
            raise ValueError(f"GdpConfig: baseline must be 'mean' or 'greedy', got {self.baseline!r}")
        if self.decoder == "independent" and (self.baseline != "mean" or self.imitation):
            raise ValueError("GdpConfig: baseline 'greedy' and imitation need a list decoder (decoder heft or etf)")
        if not isinstance(self.keep_single, bool):
            raise ValueError(f"GdpConfig: keep_single must be true or false, got {self.keep_single!r}")
        if self.greedy_ties not in ("random", "lowest"):
            raise ValueError(f"GdpConfig: greedy_ties must be 'random' or 'lowest', got {self.greedy_ties!r}")
        if self.decoder not in DECODERS:
            raise ValueError(f"GdpConfig: decoder must be one of {', '.join(DECODERS)}, got {self.decoder!r}")
        if self.hidden % self.heads:
            raise ValueError(f"GdpConfig: hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if isinstance(self.coarse_groups, bool) or not isinstance(self.coarse_groups, int) or self.coarse_groups < 0:
            raise ValueError(f"GdpConfig: coarse_groups must be a non-negative integer, got {self.coarse_groups!r}")
        for name in ("clip", "lr", "entropy", "imitation", "grad_clip", "checkpoint_seconds",
                     "time_limit_minutes", "coarse_ccr"):
            v = getattr(self, name)
            unbounded = name in ("checkpoint_seconds", "time_limit_minutes")  # inf: never / no limit
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 2**63 and not \
                    (unbounded and v == math.inf):
                shown = "a huge integer" if isinstance(v, int) and v > 2**63 else repr(v)[:40]
                raise ValueError(f"GdpConfig: {name} must be a {'' if unbounded else 'finite '}non-negative number, "
                                 f"got {shown}")
        if not self.lr > 0:
            raise ValueError(f"GdpConfig: lr must be positive, got {self.lr!r}")
        _check_temperature("GdpConfig", self.temperature)

    @property
    def updates(self) -> int:
        """Number of PPO updates for `episodes` sampled placements (0 for 0).

        Rounded up to whole updates of samples_per_update, as rnn and hierarchical round.
        """
        return -(-self.episodes // self.samples_per_update)

    def replace(self, **changes: Any) -> "GdpConfig":
        return dataclasses.replace(self, **changes)

    def model_fields(self) -> tuple:
        """The fields that fix the parameter shapes."""
        fields = (self.hidden, self.sage_rounds, self.attn_layers, self.heads, self.max_devices)
        return fields if self.decoder == "independent" else (*fields, self.decoder)

    def model_config(self) -> "GdpConfig":
        """This config with its non-model fields at their defaults.

        What the network is built from, so that runs differing only in budget, seed or PPO settings share compiled
        functions.
        """
        return GdpConfig(hidden=self.hidden, sage_rounds=self.sage_rounds, segment=self.segment,
                         attn_layers=self.attn_layers, heads=self.heads, max_devices=self.max_devices,
                         decoder=self.decoder)

    def to_json(self) -> str:
        d = {"method": NAME, **dataclasses.asdict(self)}
        d = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}
        return json.dumps(d, indent=1) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GdpConfig":
        """Inverse of to_json.

        Raises:
          ValueError: on a wrong method, an unknown field or a bad value.
        """
        d = without_retired(d)
        if d.pop("method", None) != NAME:
            raise ValueError(f"GdpConfig: config.json's \"method\" is not {NAME!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"GdpConfig: unknown fields {unknown}")
        if d.get("time_limit_minutes", 0) is None:
            d["time_limit_minutes"] = math.inf
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """PPO settings of per-graph fine-tuning, apart from training's.

    Used by `placeto place --finetune-episodes` and compare's gdp rows. Fine-tuning has seconds, not hours, on one
    graph, so it takes smaller batches, one gradient step per batch, a larger step size and a flatter policy than
    the policy was trained with (the removed gdp_finetune ablation: its conclusion and figures in
    experiments/README.md).
    """

    samples_per_update: int = 128
    """Placements sampled and simulated per update."""
    ppo_epochs: int = 1
    """Gradient steps on each batch."""
    lr: float = 3e-3
    """Adam learning rate (fresh Adam state)."""
    temperature: float = 2.0
    """GdpConfig.temperature while fine-tuning: flatter than in training.

    A flatter policy explores placements its confident nodes would never sample (the removed gdp_finetune
    ablation: experiments/README.md, "Figures behind design choices").
    """

    def __post_init__(self):
        for name in ("samples_per_update", "ppo_epochs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"FinetuneSettings: {name} must be a positive integer, got {v!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0 or \
                math.isinf(self.lr):
            raise ValueError(f"FinetuneSettings: lr must be a positive number, got {self.lr!r}")
        _check_temperature("FinetuneSettings", self.temperature)

    @classmethod
    def default_for(cls, config: GdpConfig) -> "FinetuneSettings":
        """The defaults above; for a list decoder, batches of 16.

        The defaults suit the "independent" decoder.

        A list decoder's placements are decoded one by one on the host (experiments/README.md, "Figures behind design
        choices"), so it takes batches of 16, at the policy's own temperature.
        """
        if config.decoder == "independent":
            return cls()
        return cls(samples_per_update=16, temperature=1.0)

    @classmethod
    def of_training(cls, config: GdpConfig) -> "FinetuneSettings":
        """The settings `config` was trained with (the ablation's baseline)."""
        return cls(config.samples_per_update, config.ppo_epochs, config.lr, config.temperature)

    def apply(self, config: GdpConfig) -> GdpConfig:
        """`config` with these settings in place of its own.

        Its PPO batch, epochs, learning rate and temperature.
        """
        return config.replace(samples_per_update=self.samples_per_update, ppo_epochs=self.ppo_epochs, lr=self.lr,
                              temperature=self.temperature)


def _check_temperature(owner: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
        raise ValueError(f"{owner}: temperature must be a positive finite number, got {v!r}")


def tiny(**changes: Any) -> GdpConfig:
    """A CPU-friendly config for tests: small widths, segments and budget."""
    return GdpConfig(hidden=16, sage_rounds=2, segment=16, attn_layers=1, heads=2, max_devices=4, episodes=256,
                     samples_per_update=16, ppo_epochs=3, lr=3e-3, checkpoint_seconds=0.0).replace(**changes)


def large(**changes: Any) -> GdpConfig:
    """The large-graph config: "etf" decoder, small batches, coarse-to-fine.

    16 placements per update and 2 epochs (the decoding is sequential per placement, so an update on a large graph
    is slow: experiments/README.md, "Figures behind design choices"), and coarse-to-fine placing of
    communication-bound graphs over 1,000 nodes (coarse_groups). The shipped gdp-large is this config at its
    initialisation (`--episodes 0`): PPO with it made the one pass worse
    (experiments/results/reproduce/gdp_large_training.md).
    """
    return GdpConfig(decoder="etf", samples_per_update=16, ppo_epochs=2, lr=1e-3, entropy=0.001, temperature=1.0,
                     checkpoint_seconds=120.0, coarse_groups=MAX_POLICY_NODES).replace(**changes)


PRESETS = {"default": GdpConfig, "tiny": tiny, "large": large}
