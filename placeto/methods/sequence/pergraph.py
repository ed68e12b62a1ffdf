"""What the per-graph placers (rnn, hierarchical) share: config, spec.

Their config base (`PerGraphConfig`) and the `MethodSpec` type.

Each method's spec is found by name with placeto.methods.sequence.specs.get_spec. Both are trained on
one graph and one cluster (the seeds' setting): a policy is good for the graph it was trained on, so `devices`
is a config field and a run directory remembers its graph. Each method is a `MethodSpec`:

    config_cls   a frozen PerGraphConfig subclass (config.json of a run, with "method": its name)
    make_inputs  (graph, cluster, config) -> the method's input pytree (host arrays, memoised per graph)
    make_net     config -> a flax module with `sample(inputs, key, batch, greedy) -> Sampled` and
                 `__call__(inputs, actions) -> Scored` (see placeto.methods.sequence.reinforce)

The REINFORCE update is placeto.methods.sequence.reinforce, the run directory placeto.methods.sequence.rundir,
placing and the compare row placeto.methods.sequence.place.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, ClassVar, NamedTuple

from placeto.config_fields import check_types_and_ranges, without_retired
from simulator.model.limits import MAX_DEVICES

PER_GRAPH = ("rnn", "hierarchical")  # method names; each is placeto.methods.<name>

RANGES: dict[str, tuple[float, float]] = {
    "hidden": (1, 1024), "op_types": (1, 4096), "devices": (1, MAX_DEVICES), "groups": (1, 4096),
    "block_prior": (0, 1e3), "logit_clip": (0, 1e3), "stay_prior": (0, 1e3),
    "episodes": (1, 10**9), "samples_per_update": (1, 4096), "lr": (1e-12, 1e3), "baseline_decay": (0, 1),
    "entropy": (0, 1e3), "grad_clip": (1e-12, 1e9),
    "seed": (0, 2**32 - 1), "time_limit_minutes": (0, 1e7), "checkpoint_seconds": (0, 1e9),
}


@dataclasses.dataclass(frozen=True)
class PerGraphConfig:
    """Fields every per-graph sequence placer has.

    Subclasses add their own and set METHOD and MODEL_FIELDS.
    """

    METHOD: ClassVar[str] = ""
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "op_types", "devices", "logit_clip", "stay_prior")

    # ---- model --------------------------------------------------------------------------------------------
    hidden: int = 64
    """Width of op embeddings, LSTM states and attention."""
    op_types: int = 32
    """Op-type vocabulary size: the graph's op_types - 1 most frequent types get their own embedding."""
    devices: int = 2
    """Devices the policy places on: the cluster's device count (a policy is per graph and per cluster)."""
    logit_clip: float = 0.0
    """Beyond the seeds: every decision's logits pass through clip * tanh(logits / clip)
    (placeto.methods.sequence.seq2seq.clip_logits), so no decision becomes certain; 0 (the seeds): unbounded."""
    stay_prior: float = 0.0
    """Beyond the seeds: a fixed bonus to the decoder's logit of the device the previous item got, so that an
    untrained policy samples runs of one device rather than independent coin flips; 0 (the seeds): none."""

    # ---- REINFORCE ----------------------------------------------------------------------------------------
    episodes: int = 4000
    """Training budget: placements sampled and simulated (a resumed run continues up to it)."""
    samples_per_update: int = 16
    """Placements sampled per update (the seeds' K), all scored in one batch of simulations."""
    lr: float = 1e-3
    """Adam learning rate."""
    baseline_decay: float = 0.9
    """Exponential moving-average baseline: b <- decay * b + (1 - decay) * mean reward of the batch."""
    entropy: float = 0.0
    """Entropy bonus on the mean per-decision entropy (nats); the seeds use none."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""

    # ---- run ----------------------------------------------------------------------------------------------
    seed: int = 0
    """Seeds initialisation and sampling: equal seeds give equal checkpoints, killed and resumed or not."""
    time_limit_minutes: float = 0.0
    """Stop (with a checkpoint) after this much wall time in one call; rerun to continue. 0: no limit."""
    checkpoint_seconds: float = 60.0
    """Checkpoint at most this often (plus after the first update and at the end)."""

    def __post_init__(self):
        check_types_and_ranges(self, RANGES)

    @property
    def updates(self) -> int:
        """Updates the budget allows: ceil(episodes / samples_per_update)."""
        return -(-self.episodes // self.samples_per_update)

    def replace(self, **changes: Any) -> "PerGraphConfig":
        return dataclasses.replace(self, **changes)

    def model_fields(self) -> tuple:
        """The fields that fix the parameter shapes and the network."""
        return tuple(getattr(self, f) for f in self.MODEL_FIELDS)

    def to_json(self) -> str:
        return json.dumps({"method": self.METHOD, **dataclasses.asdict(self)}, indent=1) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PerGraphConfig":
        """Inverse of to_json.

        Raises:
          ValueError: on another method, an unknown field or a bad value.
        """
        d = without_retired(d)
        if d.pop("method", None) != cls.METHOD:
            raise ValueError(f"{cls.__name__}: \"method\" is not {cls.METHOD!r}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown fields {unknown}")
        return cls(**d)


class MethodSpec(NamedTuple):
    """One per-graph method (see the module docstring)."""

    name: str
    config_cls: type
    presets: dict[str, Callable[..., PerGraphConfig]]  # "default", "tiny"
    make_inputs: Callable[[Any, Any, Any], Any]  # (graph, cluster, config) -> inputs pytree
    make_net: Callable[[Any], Any]  # config -> flax module
