"""Has TensorFlow started its runtime (and with it its GPUs), found without starting it; and
hiding TensorFlow's GPUs from it, which only TensorFlow's own call does without touching JAX.

TensorFlow keeps one eager ``Context`` in ``tensorflow.python.eager.context`` (``context_safe()``
returns it, or None before it is made); its ``_context_handle`` is set by ``ensure_initialized()``,
when the runtime and its devices start, and from then on ``Context.set_visible_devices`` raises
``RuntimeError("Visible devices cannot be modified after being initialized")``
(tensorflow/python/eager/context.py). ``CUDA_VISIBLE_DEVICES`` would hide the GPUs from JAX too.
"""

from __future__ import annotations

import sys
from typing import Any

CONTEXT = "tensorflow.python.eager.context"


def tensorflow_imported() -> bool:
    return "tensorflow" in sys.modules


def tensorflow_started() -> bool:
    """Whether TensorFlow's runtime has started in this process (never starts it)."""
    module = sys.modules.get(CONTEXT)
    if module is None:
        return False
    safe = getattr(module, "context_safe", None)
    ctx = safe() if callable(safe) else getattr(module, "_context", None)
    return ctx is not None and getattr(ctx, "_context_handle", None) is not None


def set_gpus_visible(tensorflow: Any, visible: bool) -> str | None:
    """``tf.config.set_visible_devices([], "GPU")`` (or every physical GPU back, for
    ``visible``); None when done, else TensorFlow's reason."""
    config = getattr(tensorflow, "config", None)
    try:
        gpus = config.list_physical_devices("GPU") if visible else []
        config.set_visible_devices(gpus, "GPU")
    except (RuntimeError, ValueError, TypeError, AttributeError) as err:
        return f"{type(err).__name__}: {err}"
    return None
