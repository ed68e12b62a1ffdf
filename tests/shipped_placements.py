"""The placements `placeto place` gives with the shipped policies (default settings: 4 devices, greedy, seed 0)
on two test graphs of each family: `python tests/shipped_placements.py` writes tests/data/shipped_placements.json,
which tests/test_shipped_unchanged.py recomputes. Rewrite the fixture only when a change of placements is meant.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).resolve().parents[0] / "data" / "shipped_placements.json"
# (shipped policy, graph files): two test-split graphs of each family
CASES = [
    ("nmt", ["datasets/nmt/nmt_004.json.gz", "datasets/nmt/nmt_011.json.gz"]),
    ("ptb", ["datasets/ptb/ptb_006.json.gz", "datasets/ptb/ptb_013.json.gz"]),
    ("cifar10", ["datasets/cifar10/cifar10_000.json.gz", "datasets/cifar10/cifar10_005.json.gz"]),
    ("gdp-nmt", ["datasets/nmt/nmt_004.json.gz", "datasets/nmt/nmt_011.json.gz"]),
    ("default", ["datasets/nmt/nmt_004.json.gz"]),  # no --checkpoint: the default shipped policy
]


def place_with_cli(policy: str, graph: str) -> list[int]:
    """The placement `placeto place <graph> --checkpoint <policy>` writes (in this process)."""
    from placeto.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "placement.json"
        chosen = [] if policy == "default" else ["--checkpoint", policy]
        rc = main(["place", str(ROOT / graph), *chosen, "--out", str(out)])
        assert rc == 0, (policy, graph, rc)
        return [int(d) for d in json.loads(out.read_text())["placement"]]


def compute() -> dict[str, dict[str, list[int]]]:
    return {policy: {graph: place_with_cli(policy, graph) for graph in graphs} for policy, graphs in CASES}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(compute(), separators=(",", ":")) + "\n")
    print(f"wrote {FIXTURE}")
