"""The hierarchical planner's config (a run's config.json); a `tiny` preset."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from placeto.methods.sequence.pergraph import PerGraphConfig


@dataclasses.dataclass(frozen=True)
class HierarchicalConfig(PerGraphConfig):
    """PerGraphConfig plus the number of groups.

    PerGraphConfig: model width, devices, REINFORCE, run.
    """

    METHOD: ClassVar[str] = "hierarchical"
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "op_types", "devices", "logit_clip", "stay_prior",
                                               "groups", "block_prior")

    entropy: float = 1e-3
    """PerGraphConfig's entropy bonus, on by default here (the seeds use none).

    Without it the Grouper and Placer soon turn deterministic (experiments/README.md, "Figures behind design
    choices").
    """
    groups: int = 64
    """G: the Grouper puts every op in one of G groups; the Placer gives each a device."""
    block_prior: float = 3.0
    """Beyond the seed: a prior towards groups that are contiguous blocks of the order; 0: none.

    A fixed term added to the Grouper's logits, -block_prior * (distance in groups from the op's place in the
    depth-first order to the group)^2, so that untrained groups are mostly contiguous blocks (3: an op at the
    centre of a block puts 91% of its mass on it); 0: the seed's plain Grouper. Without it random groups mix
    independent chains (experiments/README.md, "Figures behind design choices").
    """


def tiny(**changes: Any) -> HierarchicalConfig:
    """A CPU-friendly config for tests: narrow, few groups, small batches.

    A checkpoint after every update; no entropy bonus (the tests check that the policy becomes certain of a small
    optimum within 48 updates).
    """
    return HierarchicalConfig(hidden=16, op_types=8, groups=8, episodes=256, samples_per_update=16, lr=1e-2,
                              checkpoint_seconds=0.0, entropy=0.0).replace(**changes)


PRESETS = {"default": HierarchicalConfig, "tiny": tiny}
