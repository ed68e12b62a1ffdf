"""Shared test setup: no test writes into the user's JAX compilation cache (placeto.compile_cache).

The `placeto` commands the tests run (in-process or as subprocesses, which inherit the environment) compile
as they did before the cache existed; tests/test_compile_cache.py turns it on in temporary directories.
"""

import os

os.environ["PLACETO_COMPILE_CACHE"] = "off"
