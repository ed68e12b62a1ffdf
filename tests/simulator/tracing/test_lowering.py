"""simulator.tracing.lowering: the unit order of a placed program."""






def test_unit_order_repairs_an_order_that_is_not_topological():
    from tests.helpers.programs import mlp_step
    from simulator.tracing.lowering import unit_order, unit_programs
    from simulator.tracing.trace import trace

    step, *args = mlp_step()
    units = unit_programs(trace(step, *args))
    topo = unit_order(units)
    assert unit_order(units, topo) == topo  # a topological priority comes back unchanged
    repaired = unit_order(units, topo[::-1])  # the reverse: repaired, every input made before its use
    made = {}
    for k, u in enumerate(repaired):
        for s in units[u].outputs:
            made[s] = k
    assert sorted(repaired) == list(range(len(units)))
    assert all(made.get(s, -1) < k for k, u in enumerate(repaired) for s in units[u].inputs if s in made)
