"""The RNN placer's config (an rnn run's config.json); a `tiny` preset."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from placeto.methods.sequence.pergraph import PerGraphConfig


@dataclasses.dataclass(frozen=True)
class RnnConfig(PerGraphConfig):
    """PerGraphConfig plus the decision unit.

    PerGraphConfig: model width, devices, REINFORCE, run.
    """

    METHOD: ClassVar[str] = "rnn"
    MODEL_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "op_types", "devices", "logit_clip", "stay_prior",
                                               "colocate")

    stay_prior: float = 2.0
    """PerGraphConfig's logit bonus for the previous item's device, on by default for rnn.

    Without it, some seeds collapse onto one device (experiments/README.md, "Figures behind design choices").
    """
    entropy: float = 3e-4
    """PerGraphConfig's entropy bonus, on by default here (the seeds use none).

    Without it the policy turns deterministic within a few hundred updates and stops finding better placements;
    too large a bonus outweighs the reward (experiments/README.md, "Figures behind design choices").
    """
    colocate: bool = True
    """One decision per colocation group (ops sharing a colocation name), as the seeds.

    False: one decision per op.
    """


def tiny(**changes: Any) -> RnnConfig:
    """A CPU-friendly config for tests: narrow, small, checkpointing often.

    Small batches, a checkpoint after every update, no entropy bonus (the tests check that the policy becomes
    certain of a small optimum within 48 updates).
    """
    return RnnConfig(hidden=16, op_types=8, episodes=256, samples_per_update=16, lr=1e-2,
                     checkpoint_seconds=0.0, entropy=0.0).replace(**changes)


PRESETS = {"default": RnnConfig, "tiny": tiny}
