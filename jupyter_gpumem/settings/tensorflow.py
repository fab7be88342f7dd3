"""TensorFlow's GPU memory beside JAX in one process: ``%gpumem tensorflow growth|cpu|default``,
set before TensorFlow starts and refused after, as JAX's settings are.

- ``growth``: ``TF_FORCE_GPU_ALLOW_GROWTH=true``, read by TensorFlow when it creates its GPU
  devices, so it takes memory as it needs it instead of mapping nearly all of it.
- ``cpu``: TensorFlow's GPUs hidden from it by its own ``tf.config.set_visible_devices([],
  "GPU")``, run right after ``import tensorflow`` (or now, where it is imported and not started).
  JAX keeps its GPUs: ``CUDA_VISIBLE_DEVICES`` is left alone.
- ``default``: takes back what ``%gpumem tensorflow`` set.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from jupyter_gpumem.core.errors import GpumemError
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.sources import import_watch, tensorflow_runtime

GROWTH_VAR = "TF_FORCE_GPU_ALLOW_GROWTH"
MODES = ("growth", "cpu", "default")

_state: dict[str, Any] = {"mode": "default", "env_before": None, "hid": None}


class TensorflowStartedError(GpumemError, ValueError):
    """A TensorFlow setting asked for after TensorFlow's runtime started: nothing was changed."""


def mode() -> str:
    return _state["mode"]


def _hide_now(tensorflow: Any) -> None:
    _state["hid"] = tensorflow_runtime.set_gpus_visible(tensorflow, visible=False) or "hidden"


def _restore_env() -> None:
    if _state["mode"] == "growth":
        before = _state["env_before"]
        if before is None:
            os.environ.pop(GROWTH_VAR, None)
        else:
            os.environ[GROWTH_VAR] = before


def describe() -> str:
    """What is in effect, in one line."""
    now = _state["mode"]
    started = tensorflow_runtime.tensorflow_started()
    state = (
        ("started" if started else "imported, not started")
        if tensorflow_runtime.tensorflow_imported()
        else "not imported"
    )
    text = f"gpumem: tensorflow {now} (TensorFlow {state}"
    if now == "cpu":
        hid = _state["hid"]
        text += (
            "; its GPUs are hidden from it"
            if hid == "hidden"
            else (f"; hiding its GPUs failed: {hid}" if hid else "; its GPUs will be hidden when it is imported")
        )
    if os.environ.get(GROWTH_VAR) is not None:
        text += f"; {GROWTH_VAR}={os.environ[GROWTH_VAR]}"
    return text + ")"


def set_mode(new: str) -> str:
    """Apply ``new`` (one of MODES); refused, changing nothing, once TensorFlow has started."""
    if new not in MODES:
        raise ValueError(f"takes one of {', '.join(MODES)}, got {new!r}")
    if new == _state["mode"]:
        return describe()
    if tensorflow_runtime.tensorflow_started():
        raise TensorflowStartedError(
            f"TensorFlow's runtime has already started, so `%gpumem tensorflow {new}` cannot take effect: it "
            f"reads its GPU settings once, when it starts. In effect now: {_state['mode']}. Restart the kernel "
            f"and run `%gpumem tensorflow {new}` before TensorFlow's first operation."
        )
    _restore_env()
    import_watch.cancel("tensorflow")
    if _state["mode"] == "cpu" and _state["hid"] == "hidden" and tensorflow_runtime.tensorflow_imported():
        tensorflow_runtime.set_gpus_visible(sys.modules["tensorflow"], visible=True)
    _state["hid"] = None
    if new == "growth":
        _state["env_before"] = os.environ.get(GROWTH_VAR)
        os.environ[GROWTH_VAR] = "true"
    elif new == "cpu":
        import_watch.after_import("tensorflow", _hide_now)
    _state["mode"] = new
    return describe()


def in_effect() -> str | None:
    """What ``%gpumem tensorflow`` set, as ``%gpumem status`` shows it (``growth (TensorFlow not
    imported; TF_FORCE_GPU_ALLOW_GROWTH=true)``); None while it has set nothing."""
    if _state["mode"] == "default":
        return None
    return describe().removeprefix("gpumem: tensorflow ")


def reset() -> str | None:
    """Take back what ``%gpumem tensorflow`` set, for ``%gpumem reset``: the line saying what was
    done; None where it set nothing. Once TensorFlow has started nothing changes, and the line
    says so (TensorFlow reads its GPU settings once)."""
    if _state["mode"] == "default":
        return None
    if tensorflow_runtime.tensorflow_started():
        return (
            f"tensorflow {_state['mode']} stays: TensorFlow's runtime has started and reads its GPU settings "
            "once; restart the kernel to start without it"
        )
    before = _state["mode"]
    set_mode("default")
    after = os.environ.get(GROWTH_VAR)
    if before == "growth":
        return f"tensorflow default ({'unset ' + GROWTH_VAR if after is None else f'{GROWTH_VAR}={after}'})"
    return "tensorflow default (its GPUs are visible to it again)"


TENSORFLOW_ARGS = Grammar("%gpumem tensorflow", positionals=(Option("mode", choices=MODES),))


def magic_tensorflow(argv: list[str], shell: Any) -> str:
    """``%gpumem tensorflow [growth|cpu|default]``: with no word, what is in effect."""
    word = TENSORFLOW_ARGS.parse(argv)["mode"]
    return describe() if word is None else set_mode(word)
