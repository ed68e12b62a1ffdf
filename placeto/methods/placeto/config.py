"""The Placeto agent's config: model, environment, training; a `tiny` preset.

One frozen dataclass holds everything a run needs (model, environment and REINFORCE training), so a run
directory's `config.json` reproduces the run and `place.py` rebuilds the same policy from it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from placeto.config_fields import check_types_and_ranges
from placeto.config_fields import parse_overrides as _parse_overrides

VisitOrder = Literal["topo", "reverse_topo", "random_fixed"]
InitPlacement = Literal["single", "random", "etf", "list"]


@dataclasses.dataclass(frozen=True)
class PlacetoConfig:
    # ---- model --------------------------------------------------------------------------------------------
    hidden: int = 32
    """Width of node embeddings and of every hidden layer."""
    rounds: int = 8
    """Message-passing rounds (each aggregates from parents and from children, separate weights)."""
    max_devices: int = 8
    """Device axis padding: one trained policy places on any cluster of up to this many devices."""
    device_onehot: bool = True
    """Give nodes their device as a one-hot (Placeto).

    False keeps only "on the current node's device", which makes the policy equivariant to relabelling identical
    devices (its embeddings then carry no device index).
    """
    group_agg: Literal["mean", "sum"] = "mean"
    """Pooling of the current node's ancestor / descendant / parallel groups."""
    schedule_features: bool = True
    """Give the device-scoring head what a list scheduler knows of the current node on each device.

    From the simulated schedule of the current placement: data-ready, earliest start and finish times, the
    children's lateness, the change of the load bound, memory headroom (placeto.methods.placeto.policy.
    schedule_features). Configs written before the field existed mean False (`BEFORE_FIELD`).
    """
    embed_every: int = 8
    """Run the message passing every this many steps of an episode (1: every step, as Placeto).

    Between, the device-scoring head works on the last embeddings with the current placement (device loads,
    where the node's parents and children are, ...); the policy gradient re-evaluates exactly this policy.
    Message passing is most of a step's network time (experiments/README.md, "Figures behind design choices"),
    so this divides most of the network work by `embed_every`; it does not change the parameters (policies of
    any value load each other). 8 by default: on the nmt family (400 episodes, one per update) it placed the
    test graphs at least as well as 1 (experiments/results/ablations/placeto_ablation.md) at several times the
    episodes per second (placeto_throughput.md). Configs written before the field existed mean 1
    (`BEFORE_FIELD`).
    """

    # ---- environment --------------------------------------------------------------------------------------
    visit_order: VisitOrder = "topo"
    """Visit order: topological, reversed topological, or random (fixed per graph)."""
    passes: int = 1
    """Times each node is visited per episode (Placeto's n): an episode has passes * N steps."""
    undo_worse: bool = False
    """Undo a step that does not lower the objective (the step's own simulation tells: no extra call).

    Placeto's episode goes on from whatever the policy chose; with this the pass is a descent: a wrong move costs
    its one simulation and nothing after it (its later states stay those of the best placement so far). Not a
    model field: any policy places with or without it.
    """
    init_placement: InitPlacement = "single"
    """The placement an episode starts from: "single", "random", "etf" or "list".

    "single": every node on device 0 (Placeto's); "random": uniformly random per node; "etf": what a list
    scheduler knows, m-ETF's placement (placeto.baselines.etf), or the single device (placeto.baselines.single:
    the one the graph alone runs fastest on) where that simulates faster (2 simulator calls per graph, once);
    "list": the best of the list schedulers m-ETF, m-SCT, m-TOPO and HEFT and the single device (5 simulator calls
    per graph, once). Since an episode
    returns the best placement it visited, a greedy pass is never slower (simulated) than where it starts; the
    policy learns which moves improve on it.
    """

    # ---- training -----------------------------------------------------------------------------------------
    episodes: int = 2000
    """Total training episodes (the budget; a resumed run continues up to it)."""
    episodes_per_update: int = 1
    """Episodes sampled in parallel on one graph per gradient update (the rollout batch B).

    1 by default, as the public Placeto code (one episode per worker and update): what limits learning from
    scratch is the number of updates. With 8 and a budget of 400 episodes (50 Adam steps) the policy never
    leaves "every node where it is" on the nmt family; with 1 (400 steps) it learns to place the unseen nmt_004
    below the single device for seeds 0, 1, 2 (experiments/results/ablations/placeto_ablation.md).
    """
    lr: float = 1e-3
    """Initial Adam learning rate."""
    lr_end: float = 1e-3
    """Learning rate reached (exponentially) at the last update; lr by default.

    Constant by default, as the public Placeto code: a decay to 1e-4 spent most of a short budget's steps at a
    tenth of the rate.
    """
    entropy: float = 0.01
    """Initial entropy bonus coefficient (on the mean per-step policy entropy)."""
    entropy_end: float = 0.0
    """Entropy coefficient at `entropy_decay_fraction` of training; linear in between, constant after."""
    entropy_decay_fraction: float = 0.75
    """Fraction of the episode budget over which the entropy coefficient decays."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    gamma: float = 0.0
    """Discount of the per-step rewards; 0 by default: one-step credit.

    1: return-to-go = runtime now minus final runtime; 0: each action is credited with its own runtime change
    only. With a discount near 1 the policy collapsed to "leave everything on device 0": the sum of the many later
    rewards drowns each action's own effect (experiments/README.md, "Figures behind design choices").
    """
    counterfactual: bool = False
    """Beyond Placeto: put every device's exact immediate reward into the gradient.

    At the steps the gradient samples (`grad_steps`, all when 0) also simulate each device for the current node
    (B * D more simulator calls per sampled step) and put the exact immediate reward of every device into the
    gradient (`counterfactual_loss`); REINFORCE with the per-step baseline then estimates only the discounted
    rest of the return. With gamma = 0 the gradient has no noise from the sampled actions.
    """
    counterfactual_loss: Literal["expected", "best", "improving"] = "expected"
    """With counterfactual: the "expected" immediate reward, or the "best" device's cross-entropy.

    "improving": the cross-entropy of the best move at the states where some move lowers the objective, nothing
    elsewhere (train.improving_targets): what a pass with `undo_worse` needs, where a move that does not help is
    undone and costs only its simulation; "best" would mostly teach "stay" from a good start.

    "expected" puts sum_d pi(d) * (reward(d) - mean reward) into the gradient; "best" the cross-entropy against
    the device with the highest immediate reward (the current device when it ties for best; uniform over other
    ties). "expected" vanishes where the policy has become sure (its gradient on a device is pi(d) times the
    reward gap), so a policy that learned "leave the node where it is" from a single-device start stops learning
    the rare moves that help; the cross-entropy keeps a gradient of 1 - pi(best) there. The best immediate
    device at every step (one-step lookahead on the states the policy visits) is itself a good policy
    (experiments/README.md, "Figures behind design choices").
    """
    move_weight: float = 1.0
    """With counterfactual_loss "best": the cross-entropy weight of steps whose best is a move.

    A move: a device other than the node's current one. From a good start (init_placement "etf") most steps'
    best is to stay, so an unweighted cross-entropy learns to stay almost everywhere; the shipped `general` was
    trained at 1, then 4 (experiments/results/reproduce/generalization.md, "Placeto's two stages").
    """
    normalize_advantages: bool = True
    """Divide each update's advantages by their root mean square.

    One scale for the sampled and, when counterfactual, the per-device advantages, so the entropy bonus and the
    learning rate mean the same thing on graphs whose runtime improvements differ in scale.
    """
    baseline_window: int = 32
    """Recent episodes of the same graph whose mean return-to-go per step is the baseline."""
    grad_steps: int = 64
    """Steps per episode used for the gradient (0: all).

    A random subset (the same for the B episodes), the loss a mean over them, so the gradient is unbiased.
    Backprop through the GNN costs several forward passes (experiments/README.md, "Figures behind design
    choices"), so this bounds an update's gradient cost independently of the graph size.
    """
    grad_chunk_nodes: int = 16384
    """Padded nodes per jitted gradient chunk: bounds memory.

    Chunk steps = this // (B * padded N).
    """
    seed: int = 0
    """Seed of parameters, episodes and the random_fixed visit order."""

    init_from: str = ""
    """Provenance only: the policy (shipped name or run directory) a fine-tuning started from."""

    time_limit_minutes: float = 0.0
    """Stop (with a checkpoint) after this much wall time in one call; 0: no limit.

    Rerun to continue.
    """

    # ---- bookkeeping --------------------------------------------------------------------------------------
    checkpoint_seconds: float = 60.0
    """Wall seconds between checkpoints.

    One is also written after the first update and at the end.
    """
    snapshot_seconds: float = 0.0
    """Wall seconds between parameter snapshots, snapshots/<update>.msgpack; 0: none.

    A checkpoint is overwritten; snapshots stay, so a checkpoint can be chosen afterwards on graphs the run did
    not train on (experiments/reproduce/generalization.py select).
    """
    log_every: int = 1
    """Updates between metric rows (CSV + TensorBoard)."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self):
        _check_types_and_ranges(self)
        checks = {"hidden": self.hidden >= 1, "rounds": self.rounds >= 0, "max_devices": self.max_devices >= 1,
                  "passes": self.passes >= 1, "episodes_per_update": self.episodes_per_update >= 1,
                  "episodes": self.episodes >= 0, "baseline_window": self.baseline_window >= 1,
                  "gamma": 0.0 <= self.gamma <= 1.0, "lr": self.lr > 0 and self.lr_end > 0,
                  "group_agg": self.group_agg in ("mean", "sum"),
                  "visit_order": self.visit_order in ("topo", "reverse_topo", "random_fixed"),
                  "init_placement": self.init_placement in ("single", "random", "etf", "list"),
                  "counterfactual_loss": self.counterfactual_loss in ("expected", "best", "improving")}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"PlacetoConfig: bad value for {', '.join(bad)}")

    def model_fields(self) -> tuple:
        """The fields that fix the network: equal tuples load each other's params."""
        return (self.hidden, self.rounds, self.max_devices, self.group_agg, self.device_onehot,
                self.schedule_features)

    def replace(self, **changes: Any) -> "PlacetoConfig":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PlacetoConfig":
        """Build from a dict (missing fields: `BEFORE_FIELD`, else the default).

        Unknown keys are ignored (configs written by newer versions still load); `BEFORE_FIELD` holds the values older
        runs had before a field existed.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**BEFORE_FIELD, **{k: v for k, v in d.items() if k in known}})


BEFORE_FIELD: dict[str, Any] = {"embed_every": 1, "counterfactual_loss": "expected", "schedule_features": False}
"""Fields added after policies were shipped, with the value older runs had.

That value reproduces runs whose config.json lacks the field.
"""


# Allowed ranges of the numeric fields (inclusive; "lr" and friends must also be > 0, checked above). They keep
# every value finite and every integer within what its array or seed takes (placements are recorded as int8).
RANGES: dict[str, tuple[float, float]] = {
    "hidden": (1, 4096), "rounds": (0, 64), "embed_every": (1, 10**6), "max_devices": (1, 127), "passes": (1, 100),
    "episodes": (0, 10**9), "episodes_per_update": (1, 4096),
    "lr": (0, 1e3), "lr_end": (0, 1e3), "entropy": (0, 1e3), "entropy_end": (0, 1e3),
    "entropy_decay_fraction": (0, 1), "move_weight": (0, 1e6),
    "grad_clip": (0, 1e9), "gamma": (0, 1), "baseline_window": (1, 10**6),
    "grad_steps": (0, 10**6), "grad_chunk_nodes": (1, 10**9), "seed": (0, 2**32 - 1),
    "time_limit_minutes": (0, 1e9), "checkpoint_seconds": (0, 1e9), "snapshot_seconds": (0, 1e9),
    "log_every": (1, 10**9),
}


def _check_types_and_ranges(config: Any, ranges: dict[str, tuple[float, float]] | None = None) -> None:
    """`check_types_and_ranges` with PlacetoConfig's RANGES by default.

    See placeto.config_fields.
    """
    check_types_and_ranges(config, RANGES if ranges is None else ranges)


def parse_overrides(items: list[str], cls: type = PlacetoConfig) -> dict[str, Any]:
    """`parse_overrides` for PlacetoConfig by default.

    See placeto.config_fields.
    """
    return _parse_overrides(items, cls)


def tiny(**changes: Any) -> PlacetoConfig:
    """A CPU-friendly preset for tests: small model, short updates, no progress bar."""
    base = PlacetoConfig(hidden=16, rounds=2, episodes=16, episodes_per_update=4, baseline_window=8,
                         checkpoint_seconds=1e9, progress=False)
    return base.replace(**changes)


PRESETS = {"default": PlacetoConfig, "tiny": tiny}
