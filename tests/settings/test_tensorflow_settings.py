"""``%gpumem tensorflow growth|cpu|default``, with a stand-in ``tensorflow`` package written to a
temporary folder (TensorFlow is not installed here), in a real IPython shell.

The stand-in keeps what the extension relies on, as TensorFlow's
tensorflow/python/eager/context.py has it: one module-level ``_context``, made by ``context()``
and returned (or None) by ``context_safe()``; ``Context.set_visible_devices(devices,
device_type)`` keeps the other types' devices, returns early when nothing changes, and raises
``RuntimeError("Visible devices cannot be modified after being initialized")`` once
``_context_handle`` is set; ``ensure_initialized()`` sets that handle, starting the devices that
are visible then. ``TF_FORCE_GPU_ALLOW_GROWTH`` is read when the GPU devices start (TensorFlow's
guide "Use a GPU", cited in docs/troubleshooting.md): the stand-in reads it in
``ensure_initialized``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import pythonpath

SESSION = Path(__file__).parents[1] / "kernel_session.py"

CONTEXT = """\
import collections, os

PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])
_context = None


class Context:
    def __init__(self):
        self._context_handle = None
        self._physical_devices = [PhysicalDevice("/physical_device:CPU:0", "CPU"),
                                  PhysicalDevice("/physical_device:GPU:0", "GPU")]
        self._visible_device_list = list(self._physical_devices)
        self.started_with = None

    def list_physical_devices(self, device_type=None):
        return [d for d in self._physical_devices if device_type is None or d.device_type == device_type]

    def set_visible_devices(self, devices, device_type=None):
        if not isinstance(devices, list):
            devices = [devices]
        for d in devices:
            if d not in self._physical_devices:
                raise ValueError("Unrecognized device: %s" % repr(d))
        visible = [d for d in self._visible_device_list if d.device_type != device_type] if device_type else []
        visible += devices
        if self._visible_device_list == visible:
            return
        if self._context_handle is not None:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self._visible_device_list = visible

    def ensure_initialized(self):
        if self._context_handle is None:
            self._context_handle = object()
            self.started_with = {"gpus": [d.name for d in self._visible_device_list if d.device_type == "GPU"],
                                 "allow_growth": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")}


def context():
    global _context
    if _context is None:
        _context = Context()
    return _context


def context_safe():
    return _context
"""
CONFIG = """\
from tensorflow.python.eager import context


def list_physical_devices(device_type=None):
    return context.context().list_physical_devices(device_type)


def set_visible_devices(devices, device_type=None):
    context.context().set_visible_devices(devices, device_type)


def get_visible_devices(device_type=None):
    return [d for d in context.context()._visible_device_list if device_type is None or d.device_type == device_type]
"""
INIT = """\
from tensorflow import config
from tensorflow.python.eager import context as _context


def constant(value):
    _context.context().ensure_initialized()
    return value
"""


def write_tensorflow(root: Path) -> None:
    package = root / "tensorflow"
    (package / "python" / "eager").mkdir(parents=True)
    (package / "__init__.py").write_text(INIT)
    (package / "config.py").write_text(CONFIG)
    (package / "python" / "__init__.py").write_text("")
    (package / "python" / "eager" / "__init__.py").write_text("")
    (package / "python" / "eager" / "context.py").write_text(CONTEXT)


PATH = "import os, sys\nsys.path.insert(0, '.')\n"
START = (
    "import tensorflow as tf\ntf.constant(1)\nfrom tensorflow.python.eager import context\n"
    "print(context.context().started_with, os.environ.get('CUDA_VISIBLE_DEVICES'))"
)


def session(tmp_path: Path, cells: list[str]) -> list[dict]:
    write_tensorflow(tmp_path)
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    proc = subprocess.run(
        [sys.executable, str(SESSION), "cells.json", "--ext"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        # this checkout's package, not whichever one the environment installed
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": pythonpath()},
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


def started_with(out: str) -> tuple[dict, str]:
    first = out.strip().splitlines()[-1]
    started, _, cuda = first.rpartition("} ")
    return eval(started + "}"), cuda


def test_cpu_hides_the_gpus_from_tensorflow_at_its_import_and_not_from_jax(tmp_path):
    out = session(tmp_path, [PATH + "%gpumem tensorflow cpu", START])
    assert out[0]["out"].strip() == (
        "gpumem: tensorflow cpu (TensorFlow not imported; its GPUs will be hidden when it is imported)"
    )
    assert started_with(out[1]["out"]) == ({"gpus": [], "allow_growth": None}, "None")


def test_growth_sets_the_variable_tensorflow_reads_when_its_gpus_start(tmp_path):
    out = session(tmp_path, [PATH + "%gpumem tensorflow growth", START])
    assert started_with(out[1]["out"]) == ({"gpus": ["/physical_device:GPU:0"], "allow_growth": "true"}, "None")


def test_after_tensorflow_started_a_change_is_refused_and_changes_nothing(tmp_path):
    out = session(
        tmp_path,
        [
            PATH + "%gpumem tensorflow cpu",
            START,
            "%gpumem tensorflow growth",
            "print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))\n%gpumem tensorflow",
        ],
    )
    assert out[2]["error"] == "UsageError"
    assert (
        "TensorFlow's runtime has already started, so `%gpumem tensorflow growth` cannot take effect" in out[2]["out"]
    ) and "In effect now: cpu." in out[2]["out"]
    assert out[3]["out"].splitlines() == [
        "None",
        "gpumem: tensorflow cpu (TensorFlow started; its GPUs are hidden from it)",
    ]


def test_imported_but_not_started_is_hidden_at_once_and_default_gives_them_back(tmp_path):
    cells = [
        PATH + "import tensorflow as tf",
        "%gpumem tensorflow cpu",
        "print(tf.config.get_visible_devices('GPU'))",
        "%gpumem tensorflow default",
        "print(len(tf.config.get_visible_devices('GPU')))",
    ]
    out = session(tmp_path, cells)
    assert (
        out[1]["out"].strip()
        == "gpumem: tensorflow cpu (TensorFlow imported, not started; its GPUs are hidden from it)"
    )
    assert out[2]["out"].strip() == "[]"
    assert out[4]["out"].strip() == "1"


def test_default_takes_back_the_variable_it_set(tmp_path):
    out = session(
        tmp_path,
        [
            PATH + "%gpumem tensorflow growth",
            "%gpumem tensorflow default",
            "print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))",
        ],
    )
    assert out[2]["out"].strip() == "None"


def test_status_shows_what_tensorflow_growth_set(tmp_path):
    out = session(tmp_path, [PATH + "%gpumem tensorflow growth", "%gpumem status"])
    shown = [line for line in out[1]["out"].splitlines() if line.startswith("TensorFlow: ")]
    assert shown == ["TensorFlow: growth (TensorFlow not imported; TF_FORCE_GPU_ALLOW_GROWTH=true)"], out[1]["out"]


def test_status_has_no_tensorflow_line_while_nothing_was_set(tmp_path):
    out = session(tmp_path, ["%gpumem status"])
    assert "TensorFlow" not in out[0]["out"]


def test_reset_takes_back_tensorflow_growth(tmp_path):
    out = session(
        tmp_path,
        [
            PATH + "%gpumem tensorflow growth",
            "%gpumem reset",
            "print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))\n%gpumem tensorflow",
        ],
    )
    assert out[1]["out"].strip() == "gpumem: reset: tensorflow default (unset TF_FORCE_GPU_ALLOW_GROWTH)"
    assert out[2]["out"].splitlines() == ["None", "gpumem: tensorflow default (TensorFlow not imported)"]


def test_reset_after_tensorflow_started_keeps_its_setting_and_says_so(tmp_path):
    out = session(
        tmp_path,
        [
            PATH + "%gpumem tensorflow growth",
            START,
            "%gpumem reset",
            "print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))",
        ],
    )
    assert out[2]["out"].strip() == (
        "gpumem: reset: tensorflow growth stays: TensorFlow's runtime has started and "
        "reads its GPU settings once; restart the kernel to start without it"
    )
    assert out[3]["out"].strip() == "true"


@pytest.mark.parametrize("word", ["fast", "on"])
def test_a_bad_word_names_the_valid_ones(tmp_path, word):
    out = session(tmp_path, [f"%gpumem tensorflow {word}"])
    assert out[0]["error"] == "UsageError" and "takes one of growth, cpu, default" in out[0]["out"], out[0]
