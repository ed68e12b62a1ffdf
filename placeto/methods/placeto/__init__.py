"""Placeto (Addanki et al., NeurIPS 2019): a GNN policy that places one node per step of an MDP, trained with
REINFORCE on families of graphs.

    config.py           PlacetoConfig (frozen, `tiny` preset), --set parsing
    env.py              the MDP: reset/step, visit order, rewards, memory penalty
    policy.py           the network: message passing (placeto.gnn) and a device-count agnostic scoring head
    rollout.py          episodes of the policy on one graph (`Rollout`), shared by training, placing and search
    episodes.py         per-episode sampling of a batch's episodes (any split across workers gives the same batch)
    rollout_workers.py  Placeto's rollout worker (placeto.rollouts.workers runs it in this process or on Ray actors)
    gradient.py         the REINFORCE update: per-step baselines, clipped Adam, entropy schedule
    train.py            training over a family of (graph, cluster) tasks: run directory, checkpoints, resume
    place.py            zero-shot placement from a run directory or shipped policy
    cli.py              `placeto train` (the default method)'s library call

Policy-guided search with this policy ("placeto-search") is placeto.methods.placeto.guided. Shared with the other learned
methods, below them all: graph features (placeto.features), message passing (placeto.gnn), checkpoints
(placeto.checkpoint_io), the objective and its meter (placeto.objective), rollout workers (placeto.rollouts.workers).
"""

from __future__ import annotations

from placeto.methods.base import Method
from placeto.methods.placeto.config import PRESETS, PlacetoConfig


def _train(args, graphs, clusters, workers=None) -> int:
    from placeto.methods.placeto.cli import train_from_args

    return train_from_args(args, graphs, clusters, workers)


def _run(variant, graph, cluster, seed=0, budget=None, seconds=None, checkpoint=None, finetune_episodes=0):
    from placeto.methods.placeto.guided import run_learned

    return run_learned(variant, graph, cluster, seed, budget, seconds, checkpoint, finetune_episodes)


def _place(graph, cluster, checkpoint=None, samples=0, seed=0):
    from placeto.methods.placeto.place import place

    result = place(graph, cluster, checkpoint, samples=samples, seed=seed)
    return result.placement, result.sim_calls


def _load(run_dir):
    from placeto.methods.placeto.place import load_policy_params

    return load_policy_params(run_dir)


METHOD = Method(
    name="placeto", description="Placeto: GNN policy over an MDP placing one node per step, REINFORCE on families",
    config_cls=PlacetoConfig, presets=PRESETS, variants=("placeto", "placeto-search"), train=_train, run=_run,
    load=_load, finetunes=True, default_checkpoint=None, place=_place)  # None: placeto.policies.DEFAULT_POLICY
