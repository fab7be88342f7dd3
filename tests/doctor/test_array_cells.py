"""Which cell made each array, when jaxlib lists arrays in more than one run.

jaxlib keeps live arrays in one list per bucket of creating threads, and ``jax.live_arrays()``
joins the lists one after another (jaxlib/py_array.cc at jax-v0.10.2: the ``Storage``
constructor and ``PyClient::LiveArrays``). Within a list the newest comes first, so the
per-cell walk may stop at the first array it knows only when every live array is then known.
The listing and the arrays are stood in for here (they are JAX's, the outside system), so that
this test process never starts JAX's backend: later in-process tests rely on it not running.
"""

from __future__ import annotations

import pytest

from jupyter_gpumem.doctor import array_cells
from jupyter_gpumem.sources import jax_arrays


class FakeArray:
    """An array as the bookkeeping sees it: an identity that can be weakly referenced."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


def ones(n: int) -> FakeArray:
    return FakeArray(4 * n)


class Listing(list):
    """jax.live_arrays() as jaxlib would return it, counting how many arrays were read."""

    read = 0

    def __iter__(self):
        for item in list.__iter__(self):
            self.read += 1
            yield item


@pytest.fixture
def listing(monkeypatch):
    array_cells.forget_all()
    now = Listing()
    monkeypatch.setattr(jax_arrays, "live_arrays_newest_first", lambda: now)
    monkeypatch.setattr(array_cells, "_device_bytes", lambda array: array.nbytes)
    yield now
    array_cells.forget_all()


def test_an_array_listed_after_known_ones_is_still_given_its_cell(listing):
    a = ones(3)
    listing[:] = [a]
    assert array_cells.note_new_arrays(1) == 1
    b, c = ones(4), ones(5)  # c as if made on another thread: listed in a run of its own
    listing[:] = [b, a, c]
    assert array_cells.note_new_arrays(2) == 2
    assert (array_cells.cell_of(a), array_cells.cell_of(b), array_cells.cell_of(c)) == (1, 2, 2)


def test_when_every_live_array_is_known_the_walk_stops_at_the_first_known_one(listing):
    old = [ones(n) for n in (3, 4, 5)]
    listing[:] = list(reversed(old))
    array_cells.note_new_arrays(1)
    new = ones(6)
    listing[:] = [new, *reversed(old)]
    listing.read = 0
    assert array_cells.note_new_arrays(2) == 1
    assert listing.read == 2  # the new array, then the first known one
    assert array_cells.cell_of(new) == 2
