"""Whether JAX's backend has started, asked from another thread while a start holds JAX's lock.

``backends()`` holds ``xla_bridge._backend_lock`` for the whole creation of the clients, and JAX's
own probe ``backends_are_initialized()`` takes that lock (jax/_src/xla_bridge.py: 0.4.38 lines
195 and 850, 0.10.2 lines 279 and 772, 0.11.2 lines 280 and 760, 0.12.0.1 lines 280 and 784), so
the sampler thread asking it waited behind a start (a GPU client preallocating takes seconds).
Here the script holds the lock itself, with real CPU JAX started, as a start in progress would;
in a fresh interpreter, so that this test run's own process never starts JAX for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from child_env import pythonpath

pytestmark = pytest.mark.jax_versions

_ASK_WHILE_HELD = """
import json, threading
import jax.numpy as jnp
from jax._src import xla_bridge
from jupyter_gpumem.sources import jax_backend

def ask():
    answers = []
    worker = threading.Thread(target=lambda: answers.append(jax_backend.backend_started()), daemon=True)
    worker.start()
    worker.join(timeout=60)  # far beyond the few milliseconds the probe may wait
    return {"waiting": worker.is_alive(), "answers": answers}

jnp.ones(3).block_until_ready()
with xla_bridge._backend_lock:
    held = ask()
print(json.dumps({"held": held, "free": ask()}))
"""


@pytest.fixture(scope="module")
def asked():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(PYTHONPATH=pythonpath(), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _ASK_WHILE_HELD], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_probe_does_not_wait_behind_a_start_that_holds_jax_s_lock(asked):
    assert asked["held"]["waiting"] is False, "backend_started() waited on JAX's backend lock"
    assert asked["held"]["answers"] == [False]  # the lock held: the start is taken as still in progress


def test_the_probe_says_started_once_the_lock_is_free(asked):
    assert asked["free"] == {"waiting": False, "answers": [True]}
