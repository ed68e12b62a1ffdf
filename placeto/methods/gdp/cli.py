"""`placeto train --method gdp`: the library call behind the flag.

The CLI module stays thin.
"""

from __future__ import annotations

import argparse

from placeto.checkpoint_io import check_init_model
from placeto.config_fields import parse_overrides
from placeto.methods.gdp.config import PRESETS, GdpConfig
from placeto.methods.gdp.place import load_run
from placeto.methods.gdp.train import train
from simulator.model.errors import InputError


def config_from_args(args: argparse.Namespace):
    """GdpConfig from the train flags.

    Flags: --config (default/tiny), --set FIELD=VALUE, --episodes, --seed, --minutes.
    """
    try:
        changes = parse_overrides(args.set, GdpConfig)
        changes.update({k: v for k, v in (("episodes", args.episodes), ("seed", args.seed),
                                          ("time_limit_minutes", args.minutes)) if v is not None})
        return PRESETS[args.config]().replace(**changes)
    except (TypeError, ValueError) as e:
        raise InputError(str(e)) from None


def train_from_args(args: argparse.Namespace, graphs, clusters, workers=None) -> int:
    """Train (or resume) a gdp run on `graphs` x `clusters` as the flags say.

    Prints a summary. --init-from starts from a gdp run's parameters (fine-tuning a family policy); `workers`: a
    placeto.rollouts.distributed.WorkerSpec (--workers).
    """
    config = config_from_args(args)
    init = None
    if args.init_from:
        init_config, init = load_run(args.init_from)
        check_init_model(init_config, config, args.init_from)
    s = train(config, graphs, clusters, args.out, resume=not args.fresh, init=init, workers=workers, progress=True)
    print(f"{args.out}: gdp, {s.updates} updates, {s.samples} placements ({s.updates - s.start_update} updates "
          f"now, {s.wall_seconds:.0f} s, {s.sim_calls_per_second:.0f} simulator calls/s)")
    for key, objective in sorted(s.best_objective.items()):
        print(f"  best {key}: {objective / 1e3:.3f} ms")
    return 0
