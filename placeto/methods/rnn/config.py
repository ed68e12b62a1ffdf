"""The RNN placer's configuration (config.json of an rnn run), a `tiny` preset for tests."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from placeto.methods.sequence.pergraph import PerGraphConfig


@dataclasses.dataclass(frozen=True)
class RnnConfig(PerGraphConfig):
    """PerGraphConfig (model width, devices, REINFORCE, run) plus the decision unit."""

    METHOD: ClassVar[str] = "rnn"
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "op_types", "devices", "logit_clip", "stay_prior",
                                               "colocate")

    stay_prior: float = 2.0
    """PerGraphConfig's (a fixed logit bonus for the previous item's device), on by default for rnn. Measured on
    nmt_l2 at 2 devices, best of 200 updates of 16, seeds 0-2: 0.84 / 0.96 / 0.81x the single-device time with
    2.0, 0.91 / 0.90 / 0.92x with 4.0; with 0, 0.79x for seed 0 while seeds 1 and 2 collapsed onto one device
    within 100 updates (0.98x)."""
    entropy: float = 3e-4
    """PerGraphConfig's entropy bonus, on by default here (the seeds use none): without it the policy turns
    deterministic within a few hundred updates and stops finding better placements. Measured at 4 devices, 60 s
    of training each (`train_in_budget`, the compare row; the removed pergraph_entropy grid,
    experiments/README.md): best placement on nmt_l2 46.4 ms with 0, 38.3 / 39.3 ms (seeds 0 / 1) with 3e-4,
    42.7 / 39.5 with 1e-3, 60.7 with 3e-3 (the bonus outweighs the reward); on nmt_l4 77.9 with 0 (in 120 s),
    62.7 with 3e-4."""
    colocate: bool = True
    """One decision per colocation group of the graph (ops sharing a colocation name), as the seeds; False: one
    decision per op."""


def tiny(**changes: Any) -> RnnConfig:
    """A CPU-friendly config for tests: narrow, small batches, checkpoint after every update,
    no entropy bonus (the tests check that the policy becomes certain of a small optimum within 48 updates)."""
    return RnnConfig(hidden=16, op_types=8, episodes=256, samples_per_update=16, lr=1e-2,
                     checkpoint_seconds=0.0, entropy=0.0).replace(**changes)


PRESETS = {"default": RnnConfig, "tiny": tiny}
