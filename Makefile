PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

# the bytecode of every module is compiled at install, on all cores (compileall -j 0: 20 s on a 2-core VM, where pip
# compiling one module after another took 35 s more than --no-compile): where PYTHONDONTWRITEBYTECODE is set (as
# on this project's machines) Python never writes it, and every process, each test's and each rig worker's, would
# compile JAX, flax, SciPy, ... from source again (importing them took 7.3 s without bytecode, 3.1 s with)
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[dev,test,ray]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib placeto simulator
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m placeto.cli.demo --out demo_out

# the suite on both cores (a module marked xdist_group runs on one worker: its fixtures once), then the tests
# that time real steps or wall-clock budgets alone (tests/conftest.py). The first half asserts nothing about
# speed, and compiling dominates it: PLACETO_TEST_FAST_COMPILE=1 compiles for speed of compiling (XLA's backend
# optimisations and CPU fusion emitters off: tests/conftest.py; the numbers tests/test_shipped_unchanged.py pins
# are unchanged) and makes it shorter; the timed half compiles as users do. First the numba kernels are compiled
# into their cache, in two processes (placeto.cli.warmup): else every test process that starts before a kernel is
# cached compiles it again
test: $(STAMP)
	$(BIN)/python -m placeto.cli.warmup simulator & pid=$$!; $(BIN)/python -m placeto.cli.warmup schedulers && wait $$pid
	PLACETO_TEST_FAST_COMPILE=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not serial" tests
	$(BIN)/python -m pytest -q -m serial tests

bench: $(STAMP)
	$(BIN)/python -m experiments.benchmarks.bench_simulator

clean:
	rm -rf $(VENV) demo_out

# optional: the declared JAX range's oldest and newest versions, each in its own venv (slow; not part of `test`)
.PHONY: test-jax-range
test-jax-range:
	.ci/jax_range
