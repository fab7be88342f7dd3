"""The still beside a live monitor: an output of its own, under the widget, holding the last
window as a picture (``image/svg+xml``) and in words (``text/plain``).

A notebook keeps outputs, not widgets: run by nbconvert, or saved and read where no widget
manager runs, this output is what shows where the monitor was. It is drawn again after each
cell ends, while that cell's request is still open (so nbconvert records it), and when the
monitor stops. The live widget's own output is never updated: JupyterLab would draw a second
view of it. While the live view is on the page, its CSS (``LIVE_VIEW_CSS``, a style element in
the view) hides the still; once the view closes, the still shows.
"""

from __future__ import annotations

import uuid
from typing import Any

from jupyter_gpumem.monitor.still import STILL_CLASS, still_svg, still_text
from jupyter_gpumem.sampling.cell_hooks import CellHooks

__all__ = ["StillOutput", "LIVE_VIEW_CSS", "MONITOR_CLASS", "ENDED_CLASS", "ended_bundle"]

MONITOR_CLASS = "jupyter-gpumem-monitor"  # the live monitor's root
# JupyterLab draws an SVG output as an <img> whose data URL holds the still's class: hidden in an
# output area that shows a live monitor.
LIVE_VIEW_CSS = (
    f"<style>.jp-OutputArea:has(.{MONITOR_CLASS}) .jp-OutputArea-child:has(img[src*='{STILL_CLASS}'])"
    " { display: none; }</style>"
)


ENDED_CLASS = "jupyter-gpumem-ended"  # what the widget's own output becomes once the monitor stops


def ended_bundle(title: str) -> dict[str, str]:
    """What a stopped monitor's widget output says instead of naming its closed widget: a page
    reloaded, or the notebook opened later, cannot draw a closed widget ("widget model not
    found"), and the still below it holds the last window."""
    import html

    words = f"{title}: this monitor has stopped; its last window is drawn below."
    return {
        "text/plain": words,
        "text/html": f"<div class='{ENDED_CLASS}' style='padding:4px 0;opacity:.8'>{html.escape(words)}</div>",
    }


def _shell() -> Any:
    import sys

    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


class StillOutput:
    """Shows and keeps current the still of one monitor. ``picture()`` must give
    ``(title, views, colors)`` as ``still.still_svg`` takes them."""

    def __init__(self, picture: Any):
        self._picture = picture
        self.display_id = "jupyter-gpumem-still-" + uuid.uuid4().hex
        self._hooks = CellHooks()
        self._shown = False

    def bundle(self) -> dict[str, str]:
        title, views, colors = self._picture()
        return {"image/svg+xml": still_svg(title, views, colors), "text/plain": still_text(title, views)}

    def show(self) -> None:
        """Display the still under the widget, and redraw it after each cell from now on."""
        from IPython.display import display

        display(self.bundle(), raw=True, display_id=self.display_id)
        self._shown = True
        shell = _shell()
        if shell is not None and shell not in self._hooks:
            self._hooks.add(shell, _nothing, self._after_cell)

    def _after_cell(self, *_: Any) -> None:
        # A cell hook: the drawing reads only numbers the monitor already holds (no JAX, no
        # buffer), and a failure here must not reach the user's cell.
        try:
            self.update()
        except Exception:  # reason: a hook must never fail the cell that ran before it
            self.stop()

    def update(self) -> None:
        """Draw the still again in place."""
        if not self._shown:
            return
        from IPython.display import update_display

        update_display(self.bundle(), raw=True, display_id=self.display_id)

    def stop(self) -> None:
        """No more redraws after cells (the monitor has stopped)."""
        shell = _shell()
        if shell is not None:
            self._hooks.remove(shell)


def _nothing(*_: Any) -> None:
    """No work before a cell."""
