"""The shipped policies place as they did: `placeto place` (4 devices, greedy, seed 0) with the nmt, ptb, cifar10,
gdp-nmt and default policies on test graphs gives the placements recorded in tests/data/shipped_placements.json
(written by tests/shipped_placements.py before Placeto moved under placeto/methods/placeto/)."""

from __future__ import annotations

import json

import pytest

import tests.shipped_placements as S


@pytest.mark.parametrize("policy, graphs", S.CASES, ids=[c[0] for c in S.CASES])
def test_shipped_policy_places_as_recorded(policy, graphs):
    recorded = json.loads(S.FIXTURE.read_text())[policy]
    for graph in graphs:
        assert S.place_with_cli(policy, graph) == recorded[graph], (policy, graph)
