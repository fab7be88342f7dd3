"""Whether JAX's backend has started, asked from another thread while a start holds JAX's lock.

``backends()`` holds ``xla_bridge._backend_lock`` for the whole creation of the clients, and JAX's
own probe ``backends_are_initialized()`` takes that lock (jax/_src/xla_bridge.py: 0.4.38 lines
195 and 850, 0.10.2 lines 279 and 772, 0.11.2 lines 280 and 760, 0.12.0.1 lines 280 and 784), so
the sampler thread asking it waited behind a start (a GPU client preallocating takes seconds).
Here the test holds the lock itself, with real CPU JAX started, as a start in progress would.
"""

from __future__ import annotations

import threading

import pytest

from jupyter_gpumem.sources import jax_backend

pytestmark = pytest.mark.jax_versions


def _ask_from_another_thread() -> tuple[bool, list]:
    answers: list = []
    worker = threading.Thread(target=lambda: answers.append(jax_backend.backend_started()), daemon=True)
    worker.start()
    worker.join(timeout=60)  # far beyond the few milliseconds the probe may wait
    return worker.is_alive(), answers


def test_the_probe_does_not_wait_behind_a_start_that_holds_jax_s_lock():
    import jax.numpy as jnp
    from jax._src import xla_bridge

    jnp.ones(3).block_until_ready()
    with xla_bridge._backend_lock:
        still_waiting, answers = _ask_from_another_thread()
        assert not still_waiting, "backend_started() waited on JAX's backend lock"
    assert answers == [False]  # the lock held: the start is taken as still in progress


def test_the_probe_says_started_once_the_lock_is_free():
    import jax.numpy as jnp

    jnp.ones(3).block_until_ready()
    still_waiting, answers = _ask_from_another_thread()
    assert (still_waiting, answers) == (False, [True])
