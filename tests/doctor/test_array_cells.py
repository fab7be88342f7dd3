"""The live arrays' bookkeeping (device bytes, a tracked cell's new arrays, arrays per
traceback), when jaxlib lists arrays in more than one run, and as arrays die.

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
    """An array as the bookkeeping sees it: an identity that can be weakly referenced, and a
    ``traceback`` (jaxlib's is hashable and equal for equal stacks; a string stands in)."""

    def __init__(self, nbytes: int, traceback: str = "line 1"):
        self.nbytes = nbytes
        self.traceback = traceback


def ones(n: int, traceback: str = "line 1") -> FakeArray:
    return FakeArray(4 * n, traceback)


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


def test_an_array_listed_after_known_ones_is_still_taken_as_the_cells_own(listing):
    a = ones(3)
    listing[:] = [a]
    array_cells.begin_cell()
    b, c = ones(4), ones(5)  # c as if made on another thread: listed in a run of its own
    listing[:] = [b, a, c]
    assert array_cells.end_cell() == 2
    assert sorted(size for _, size in array_cells.made_by_last_cell()) == [16, 20]
    assert array_cells.device_bytes() == 12 + 16 + 20


def test_when_every_live_array_is_known_the_walk_stops_at_the_first_known_one(listing):
    old = [ones(n) for n in (3, 4, 5)]
    listing[:] = list(reversed(old))
    array_cells.note_new_arrays()
    new = ones(6)
    listing[:] = [new, *reversed(old)]
    listing.read = 0
    assert array_cells.note_new_arrays() == 1
    assert listing.read == 2  # the new array, then the first known one


def test_arrays_made_before_a_tracked_cell_are_not_its_own(listing):
    """The first tracked cell after ``cells on`` takes only what it made, not what earlier,
    untracked cells left."""
    earlier = [ones(3), ones(4)]
    listing[:] = earlier
    array_cells.begin_cell()
    mine = ones(5)
    listing[:] = [mine, *earlier]
    array_cells.end_cell()
    assert [size for _, size in array_cells.made_by_last_cell()] == [20]


def test_arrays_are_counted_per_traceback_until_they_die(listing):
    kept = [ones(1, "grow line") for _ in range(3)]
    other = ones(2, "other line")
    listing[:] = [*kept, other]
    array_cells.note_new_arrays()
    assert sorted(array_cells.live_by_traceback()) == [("grow line", 3, 12), ("other line", 1, 8)]
    listing[:] = kept[:1]
    del kept[1:], other
    assert array_cells.live_by_traceback() == [("grow line", 1, 4)]
