"""The learned methods' registry (placeto.methods.registry): every method package exports one Method, listing the
methods imports none of them, and old run directories (config.json without "method") are Placeto's."""

from __future__ import annotations

import json
import subprocess
import sys

from placeto.methods import registry
from placeto.methods.base import Method
from placeto.methods.placeto.config import PlacetoConfig


def test_every_method_exports_one_method_as_the_registry_lists_it():
    for name in registry.names():
        m = registry.get(name)
        assert isinstance(m, Method) and m.name == name
        assert m.variants == registry.VARIANTS[name]
        assert m.per_graph == (name in registry.PER_GRAPH)
        assert set(m.presets) >= {"default", "tiny"}
        assert isinstance(m.presets["tiny"](), m.config_cls)
        assert all(registry.of_variant(v) is m for v in m.variants)


def test_listing_the_methods_loads_none_of_them():
    code = ("import sys, placeto.methods.registry as r, placeto.harness.compare; r.names(); "
            "print(sorted(m for m in sys.modules if m.startswith(('placeto.methods.', 'jax', 'flax'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert loaded == ["placeto.methods.base", "placeto.methods.registry"], loaded


def test_run_directories_say_their_method_and_old_ones_are_placeto(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(PlacetoConfig().to_json())  # no "method" field, as every Placeto run
    assert "method" not in json.loads((old / "config.json").read_text())
    assert registry.run_method(old) == "placeto"
    assert registry.run_method(tmp_path / "missing") is None and registry.run_method(None) is None
    assert registry.checkpoint_method("nmt") == "placeto"
    assert registry.checkpoint_method("gdp-nmt") == "gdp"
    assert registry.checkpoint_method("no-such-policy") is None
    method, config, _ = registry.load_run("nmt")
    assert method.name == "placeto" and isinstance(config, PlacetoConfig)
