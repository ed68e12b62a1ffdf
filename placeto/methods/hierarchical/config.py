"""The hierarchical planner's configuration (config.json of a hierarchical run), a `tiny` preset for tests."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from placeto.methods.sequence.pergraph import PerGraphConfig


@dataclasses.dataclass(frozen=True)
class HierarchicalConfig(PerGraphConfig):
    """PerGraphConfig (model width, devices, REINFORCE, run) plus the number of groups."""

    METHOD: ClassVar[str] = "hierarchical"
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "op_types", "devices", "logit_clip", "stay_prior",
                                               "groups", "block_prior")

    entropy: float = 1e-3
    """PerGraphConfig's entropy bonus, on by default here (the seeds use none): without it the Grouper and
    Placer turn deterministic within ~20 updates. Measured at 4 devices, 20,000 simulator calls each
    (`train_in_budget`, the compare row; the removed pergraph_entropy grid, experiments/README.md): best
    placement on nmt_l2 46.0 ms with 0, 43.8 with 3e-4, 36.1 / 37.7 ms (seeds 0 / 1) with 1e-3, 38.4 / 37.9 with
    3e-3; on nmt_l4 76.7 with 0, 59.7 with 3e-4, 61.7 with 1e-3."""
    groups: int = 64
    """G: the Grouper puts every op in one of G groups; the Placer gives each group a device."""
    block_prior: float = 3.0
    """Beyond the seed: a fixed term added to the Grouper's logits, -block_prior * (distance in groups from the
    op's place in the depth-first order to the group)^2, so that untrained groups are mostly contiguous blocks
    (3: an op at the centre of a block puts 91% of its mass on it); 0: the seed's plain Grouper. Measured: on
    two chains of 8 ops (100 us transfers, 2 devices) 3.0 finds the optimum in 2-11 updates (3 seeds of 3), 0.0
    in none of 4 within 100 (random groups mix the chains); on nmt_l2 at 2 devices the best placement of 400
    updates is 0.88x the single-device time with 3.0 and 0.98x with 0.0 (seed 0)."""


def tiny(**changes: Any) -> HierarchicalConfig:
    """A CPU-friendly config for tests: narrow, few groups, small batches, checkpoint after every update,
    no entropy bonus (the tests check that the policy becomes certain of a small optimum within 48 updates)."""
    return HierarchicalConfig(hidden=16, op_types=8, groups=8, episodes=256, samples_per_update=16, lr=1e-2,
                              checkpoint_seconds=0.0, entropy=0.0).replace(**changes)


PRESETS = {"default": HierarchicalConfig, "tiny": tiny}
