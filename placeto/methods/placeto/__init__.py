"""Placeto (Addanki et al., NeurIPS 2019): a GNN placing a node per MDP step.

Trained with REINFORCE on families of graphs.

    config.py           PlacetoConfig (frozen, `tiny` preset), --set parsing
    env.py              the MDP: reset/step, visit order, rewards from the objective
    policy.py           the network: message passing (placeto.gnn) and a device-count agnostic scoring head
    rollout.py          episodes of the policy on one graph (`Rollout`), shared by training, placing and search
    episodes.py         per-episode sampling of a batch's episodes (any split across workers gives the same batch)
    rollout_workers.py  Placeto's rollout worker (placeto.rollouts.workers runs it in this process or on Ray
                        actors)
    gradient.py         the REINFORCE update: per-step baselines, clipped Adam, entropy schedule
    train.py            training over a family of (graph, cluster) tasks: run directory, checkpoints, resume
    place.py            zero-shot placement from a run directory or shipped policy
    guided.py           the policy as a placer under a budget: sampling, fine-tuning, policy-guided search
    node_context.py     the grouped view of the current node (ancestors, descendants, parallel nodes)
    cli.py              `placeto train` (the default method)'s library call

Policy-guided search with this policy ("placeto-search") is placeto.methods.placeto.guided. Shared with the other
learned methods, below them all: graph features (placeto.features), message passing (placeto.gnn), checkpoints
(placeto.checkpoint_io), the objective and its meter (placeto.objective), rollout workers
(placeto.rollouts.workers).
"""

from __future__ import annotations

from placeto.methods.base import Method, Ref
from placeto.methods.placeto.config import PRESETS, PlacetoConfig

METHOD = Method(
    name="placeto", description="Placeto: GNN policy over an MDP placing one node per step, REINFORCE on families",
    config_cls=PlacetoConfig, presets=PRESETS, variants=("placeto", "placeto-search"),
    train=Ref("placeto.methods.placeto.cli:train_from_args"), run=Ref("placeto.methods.placeto.guided:run_learned"),
    load=Ref("placeto.methods.placeto.place:load_policy_params"), finetunes=True,
    default_checkpoint=None,  # None: placeto.policies.DEFAULT_POLICY
    place=Ref("placeto.methods.placeto.place:place_graph"))
