"""Who started JAX's backend, as the sentence a refused setting and ``%gpumem status`` give:
``JAX was started by eager_lib.py:2 (imported in cell [3] line 1); ...``.

The stack comes from ``sources/jax_start`` (recorded when the first backend was created);
this module only words it.
"""

from __future__ import annotations

from jupyter_gpumem.core.sites import Origin
from jupyter_gpumem.sources import jax_start


def describe(origin: Origin, advice: bool = True) -> str | None:
    """The sentence for a recorded start; None where no frame outside JAX was on the stack.
    ``advice``: end with what to do for a setting to take effect (a refusal says it; a status
    that refused nothing does not)."""
    first, cell = origin.first, origin.cell
    if first is None:
        return None
    if first.cell is not None:
        where, what = "", "that line"
    else:
        imported = first.function == "<module>"
        where = f" ({'imported' if imported else 'called'} in {cell})" if cell is not None else ""
        what = "that import" if imported else "that call"
    if not advice:
        return f"JAX was started by {first}{where}."
    return (
        f"JAX was started by {first}{where}; run the settings before {what}, or restart the kernel and run them first."
    )


def started_by_sentence(advice: bool = True) -> str | None:
    """Who started the backend, where it was seen; else, if it was running before the extension
    loaded, that; else None."""
    origin = jax_start.starter()
    if origin is not None:
        return describe(origin, advice)
    if jax_start.started_before_watch():
        return (
            "JAX was started before jupyter_gpumem loaded, so where it was started is not known; "
            "load the extension first to see it."
        )
    return None


def suffix() -> str:
    """`` `` and the sentence, to end a refusal with; empty where nothing is known."""
    sentence = started_by_sentence()
    return " " + sentence if sentence else ""


def where_started() -> str:
    """`` `` and who started JAX without advice, for ``%gpumem status``; empty where nothing is known."""
    sentence = started_by_sentence(advice=False)
    return " " + sentence if sentence else ""
