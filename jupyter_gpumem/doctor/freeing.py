"""What can be released safely, and was it? ``%gpumem free``: output history, JAX's caches, a
garbage collection, step by step, with the memory before and after.
"""

from __future__ import annotations

import gc as _gc
import time
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor import last_error
from jupyter_gpumem.doctor.arrays import ArrayRecord, census
from jupyter_gpumem.doctor.names import (
    HISTORY_SINGLE,
    WALK_SECONDS_REPORT,
    current_shell,
    names_by_array,
    user_namespace,
)
from jupyter_gpumem.doctor.session import SESSION
from jupyter_gpumem.doctor.text import PreReport, bytes_or_na, pretty_as_text
from jupyter_gpumem.doctor.usage import memory_now
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.sources import jax_arrays


@dataclass(frozen=True)
class FreeReport(PreReport):
    """What ``%gpumem free`` released, measured before and after.

    ``actions`` are the steps that ran, ``failed`` the steps that raised (with why) and
    ``not_done`` the steps left when it stopped (an interrupt); each step is whole or not at all.
    """

    _html_class = "jupyter-gpumem-free"
    _repr_pretty_ = pretty_as_text

    actions: tuple[str, ...]
    measure: str
    before: int
    after: int
    still_held: tuple[ArrayRecord, ...]
    failed: tuple[str, ...] = ()
    not_done: tuple[str, ...] = ()
    note: str = ""

    @property
    def freed(self) -> int:
        return max(0, self.before - self.after)

    def lines(self) -> list[str]:
        out = [
            f"Freed {bytes_or_na(self.freed)}: {bytes_or_na(self.before)} -> {bytes_or_na(self.after)}, counted as {self.measure}."
        ]
        out += [f"  - {a}" for a in self.actions]
        out += [f"  - FAILED {a}" for a in self.failed]
        if self.not_done:
            out.append("Interrupted: not done: " + ", ".join(self.not_done) + ".")
        if self.still_held:
            out.append("Still held (largest):")
            for r in self.still_held:
                out.append(
                    f"  {bytes_or_na(r.nbytes):>11}  {r.dtype}{list(r.shape)}  {', '.join(r.names) or '(no name: held elsewhere)'}"
                )
        if self.note:
            out.append(self.note)
        return out


def _holds_array(value: Any) -> bool:
    return bool(names_by_array({"v": value}, seconds=0.5).names)


def _clear_history(shell: Any) -> tuple[int, list[str]]:
    """Drop Out/_N/_ references to values that hold jax arrays. ``(count, names)``."""
    ns = user_namespace(shell)
    # displayhook pushes _, __, ___ and _N into user_ns_hidden as well as user_ns.
    hidden = getattr(shell, "user_ns_hidden", None)
    hidden = hidden if isinstance(hidden, dict) else {}
    dropped: list[str] = []
    out = ns.get("Out")
    if isinstance(out, dict):
        for n in [n for n, v in list(out.items()) if _holds_array(v)]:
            del out[n]
            dropped.append(f"Out[{n}]")
            ns.pop(f"_{n}", None)
            hidden.pop(f"_{n}", None)
    # The previous cell's ExecutionResult keeps its value until this cell ends.
    last = getattr(shell, "last_execution_result", None)
    if last is not None and _holds_array(getattr(last, "result", None)):
        last.result = None
    hook = getattr(shell, "displayhook", None)
    for name in HISTORY_SINGLE:
        if name in ns and _holds_array(ns[name]):
            ns[name] = ""
            dropped.append(name)
        if name in hidden and _holds_array(hidden[name]):
            hidden[name] = ""
        if hook is not None and _holds_array(getattr(hook, name, None)):
            setattr(hook, name, "")
    return len(dropped), dropped


def _history_step(shell: Any) -> str:
    count, names = _clear_history(shell)
    shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
    return f"output history: dropped {count} reference{'s' if count != 1 else ''} to arrays" + (
        f" ({shown})" if names else ""
    )


def _caches_step() -> str:
    ran = jax_arrays.clear_caches()
    return (
        "compiled-program caches: jax.clear_caches()"
        if ran
        else "compiled-program caches: JAX is not imported, nothing to clear"
    )


def _gc_step(shell: Any) -> str:
    # The last error's traceback keeps its frames, and their arrays, alive (jax#14934).
    released = last_error.release(shell)
    found = _gc.collect()
    said = released.words()
    return f"garbage: {said + '; ' if said else ''}gc.collect() found {found} objects"


def free(history: bool = True, caches: bool = True, gc: bool = True, shell: Any = None) -> FreeReport:
    """Release what can be released safely: output-history references to arrays, compiled
    program caches (``jax.clear_caches()``), and garbage (with the last error's frames).

    Never raises part-way: a step that fails is reported as failed and the others still run;
    an interrupt stops it, and the report says which steps were done and which were not.
    """
    shell = shell if shell is not None else (SESSION.shell or current_shell())
    t0 = time.perf_counter()
    before = memory_now()
    steps = [
        (name, run)
        for name, wanted, run in (
            ("output history", history, lambda: _history_step(shell)),
            ("compiled-program caches", caches, _caches_step),
            ("garbage", gc, lambda: _gc_step(shell)),
        )
        if wanted
    ]
    actions: list[str] = []
    failed: list[str] = []
    not_done: list[str] = []
    for i, (name, run) in enumerate(steps):
        try:
            actions.append(run())
        except KeyboardInterrupt:
            not_done = [n for n, _ in steps[i:]]
            break
        except Exception as err:
            failed.append(f"{name}: {type(err).__name__}: {err}")
    still: tuple[ArrayRecord, ...] = ()
    after = memory_now()
    note = ""
    if not not_done and allocator_shim.backend_started():
        try:
            still = census(shell, seconds=WALK_SECONDS_REPORT).records[:5]
        except KeyboardInterrupt:
            note = "The list of what is still held was interrupted."
    measure = after.measure_words if after.measure == before.measure else "mixed measures"
    note = (note + " " if note else "") + f"Took {time.perf_counter() - t0:.2f} s."
    return FreeReport(tuple(actions), measure, before.in_use, after.in_use, still, tuple(failed), tuple(not_done), note)


FREE_ARGS = Grammar(
    "%gpumem free",
    options=(
        Option("--history", help="output history (Out, _, _N)"),
        Option("--caches", help="JAX's compilation caches"),
        Option("--gc", help="a garbage collection"),
    ),
)


def magic_free(argv: list[str], shell: Any) -> FreeReport:
    """``%gpumem free [--history] [--caches] [--gc]``; no option means all three."""
    opts = FREE_ARGS.parse(argv)
    if not any(opts.values()):
        opts = dict.fromkeys(opts, True)
    return free(history=opts["history"], caches=opts["caches"], gc=opts["gc"], shell=shell)
