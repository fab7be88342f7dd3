"""How the doctor's reports read: plain text in a terminal, HTML in a notebook, bytes in words."""

from __future__ import annotations

import html
from typing import Any

from jupyter_gpumem.core.units import format_bytes, printable


def bytes_or_na(n: int | None) -> str:
    return "n/a" if n is None else format_bytes(n)


def action_label(action: str) -> str:
    """ "Run" for a line of code to type, "Do" for an action in words."""
    code = (
        action.startswith("%")
        or "(" in action.split(" ", 1)[0]
        or action.startswith(("jax.", "jupyter_gpumem."))
        or " = jax." in action  # an assignment: `w = jax.device_put(w, ...)`
    )
    return "Run" if code else "Do"


def escape_html(value: Any) -> str:
    return html.escape(str(value))


def pretty_as_text(self: Any, printer: Any, cycle: bool) -> None:
    printer.text(str(self))


class TextReport:
    """A report made of ``lines()``: printed as those lines, shown in a notebook as text.

    A dataclass subclass sets ``_repr_pretty_ = pretty_as_text`` itself: IPython prefers a
    class's own ``__repr__`` (which the dataclass writes) to an inherited ``_repr_pretty_``.
    """

    def lines(self) -> list[str]:
        raise NotImplementedError

    def __str__(self) -> str:
        # Lines carry other users' process names: control characters are shown escaped.
        return "\n".join(printable(line) for line in self.lines())


class PreReport(TextReport):
    """A text report shown in a notebook as its lines in a ``<pre>`` of ``_html_class``."""

    _html_class = ""

    def _repr_html_(self) -> str:
        return f"<pre class='{self._html_class}'>" + escape_html(str(self)) + "</pre>"
