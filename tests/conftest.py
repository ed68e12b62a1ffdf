"""Shared test setup.

Compilation cache: no test writes into the user's JAX compilation cache (simulator.measure.cache), nor into
placeto's cache root (PLACETO_CACHE: calibrations, profiles). Each test process (each pytest-xdist worker) gets
its own temporary ones instead, which the `placeto` commands the tests run inherit (in-process, or as
subprocesses through the environment), so a policy compiled by one test is read back by the next; they are
removed when the process exits. tests/simulator/measure/test_cache.py and tests/docs/test_readme.py set their own.

Serial tests: `make test` runs the suite on both cores (pytest-xdist, `-m "not serial"`), then the tests marked
`serial` alone: those that time real steps on host devices or assert wall-clock budgets, which a second test
process on a 2-core machine would disturb (`make test` compiles the first half for speed of compiling,
PLACETO_TEST_FAST_COMPILE=1 (`_fast_compile`), and the serial half as users do). Plain `pytest tests` runs
everything in one process. The longest modules (SLOW_FIRST) are collected first, each module's tests together
and in file order, so that pytest-xdist starts them first and the suite does not end on one worker running the
longest test while the other idles.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

FAST_COMPILE = "PLACETO_TEST_FAST_COMPILE"  # "1": compile for speed of compiling (`make test`'s first half)
FAST_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)


def _fast_compile() -> None:
    """With PLACETO_TEST_FAST_COMPILE=1 (`make test`'s first half, which asserts nothing about speed), JAX in this
    process and in every process it starts compiles for speed of compiling, which dominates the suite:
    JAX_DISABLE_MOST_OPTIMIZATIONS (LLVM at -O0, the same HLO passes), and XLA:CPU's elemental emitters instead of
    its fusion emitters (FAST_XLA_FLAGS; gdp's PPO update of the tiny config compiled in 1.1-1.4 s instead of
    3.4 s, on a 2-core VM) where this XLA knows the flag: XLA aborts on an unknown one, so a subprocess tries it
    once. pytest-xdist's workers inherit the result."""
    if os.environ.get(FAST_COMPILE) != "1":
        return
    os.environ[FAST_COMPILE] = "done"
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    if "jax" in sys.modules:  # imported by a plugin already: its options were read from the environment then
        sys.modules["jax"].config.update("jax_disable_most_optimizations", True)
    flags = " ".join([os.environ.get("XLA_FLAGS", ""), *FAST_XLA_FLAGS]).strip()
    probe = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(2).block_until_ready()"],
                           env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu"), capture_output=True,
                           timeout=300)
    if probe.returncode == 0:
        os.environ["XLA_FLAGS"] = flags


_fast_compile()

_CACHE = tempfile.mkdtemp(prefix="placeto-test-jax-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["PLACETO_COMPILE_CACHE"] = _CACHE
if not os.environ.get("PLACETO_CACHE"):  # calibrations and profiles (eval/place --hardware): not the user's either
    _ROOT = tempfile.mkdtemp(prefix="placeto-test-cache-")
    atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
    os.environ["PLACETO_CACHE"] = _ROOT

SERIAL = (  # test files, or file::test name prefixes
    "test_synthetic.py::test_synthetic_kernels_track_costs",  # each node's time alone against its cost
    "test_compare.py::test_learned_rows_share_the_budget",
    "test_guided.py::test_sa_spends_its_budget_is_deterministic_and_never_worse_than_its_start",
    "test_step_profile.py::test_profile_units_in_the_compiled_step",  # which units the measured time goes to
)


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: run alone, not beside another test process (see tests/conftest.py)")


SLOW_FIRST = (  # the longest modules (each an xdist_group), started first so no worker idles at the end
    "test_readme.py",  # block 0's place --hardware from a cold cache, the longest test
    "test_distributed.py",
    "test_dispatch.py",  # its subprocess: staged plans, calibrate, eval --hardware
    "test_on_hardware.py::test_place_hardware_end_to_end",  # place --hardware twice on nmt_002
    "test_importer.py",
    "test_bad_inputs.py",
)


def _matches(name: str, prefixes) -> bool:
    return any(name == s or name.startswith(s + "::") or name.startswith(s + "[") for s in prefixes)


def _name(nodeid: str) -> str:
    """"file.py::test[params]" of a node id, without its folder or the "@group" pytest-xdist may have appended
    (--dist loadgroup appends it before this file's hooks see the items)."""
    return nodeid.rsplit("/", 1)[-1].split("@", 1)[0]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _matches(_name(item.nodeid), SERIAL):
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: next((k for k, s in enumerate(SLOW_FIRST)
                                      if _matches(_name(item.nodeid), (s,))), len(SLOW_FIRST)))  # stable


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: plain pytest without it still loads this file
def pytest_xdist_node_collection_finished(node, ids):
    """`--dist loadgroup` keeps a SLOW_FIRST module (each an xdist_group) on one worker only where pytest-xdist could
    append the group to the test ids; pytest 9.2 keeps ids where pytest-xdist 3.8 cannot, and every costly module
    fixture then ran on both workers: stop with one line instead."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [i for i in ids if _matches(_name(i), SLOW_FIRST) and "@" not in i]
    if lost:
        pytest.exit(f"pytest-xdist did not group {lost[0]} (and {len(lost) - 1} more): this pytest and pytest-xdist "
                    "do not work together (see the dev extra in pyproject.toml)", returncode=3)
