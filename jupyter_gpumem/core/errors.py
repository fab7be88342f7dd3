"""The base of the errors this package raises on purpose, and the "did you mean" a mistyped word
gets. Kept alone so importing it is free."""

import difflib
from collections.abc import Iterable


class GpumemError(Exception):
    """An error jupyter_gpumem raises on purpose, with a message for people."""


def did_you_mean(word: str, valid: Iterable[str]) -> str:
    """``" (did you mean 'preallocate'?)"`` for the valid word nearest to ``word`` (any case;
    ``-`` and ``_`` alike), or ``""`` when none is near."""
    words = list(valid)

    def key(w: str) -> str:
        return w.lower().replace("-", "_")

    by_key = {key(w): w for w in words}
    near = difflib.get_close_matches(key(word), list(by_key), n=1, cutoff=0.75)
    return f" (did you mean {by_key[near[0]]!r}?)" if near else ""
