"""``%gpumem status``: every allocator setting and its source, the backend's state, warnings.

``status()`` returns a ``StatusReport``: plain text through ``str()``, a compact table in a
notebook, and structured fields (``settings``, ``backend``, ``warnings``) that the widget and
the server reuse. It never starts JAX.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.readings import DeviceReading, DeviceUnreadable, NotAvailable
from jupyter_gpumem.core.units import printable
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.settings import plugin_options
from jupyter_gpumem.settings.cpu_fallback import CpuFallback, read_cpu_fallback
from jupyter_gpumem.settings.effective import SettingState
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.sources.jax_backend import BackendInfo
from jupyter_gpumem.sources.nvml import NvmlSource

__all__ = ["StatusReport", "status", "display_gpu_warnings", "gpu_or_replay"]

_LABELS = {"async_prealloc": "async-prealloc"}

NvmlReadings = Sequence[DeviceReading | DeviceUnreadable] | NotAvailable


@dataclass(frozen=True)
class StatusReport:
    """What ``%gpumem status`` shows.

    - ``settings``: one ``SettingState`` per setting (name, value, shown, source, env_var).
    - ``backend``: ``jax_backend.backend_info()``: started, platform, devices, fallback_reason,
      jax_version.
    - ``warnings``: sentences for people.
    - ``cpu_fallback``: JAX on the CPU while NVML sees GPUs (its sentence is the first warning), or None.
    - ``tensorflow``: what ``%gpumem tensorflow`` set (``growth (TensorFlow not imported;
      TF_FORCE_GPU_ALLOW_GROWTH=true)``), or None where it set nothing.
    """

    settings: tuple[SettingState, ...]
    backend: BackendInfo
    warnings: tuple[str, ...]
    cpu_fallback: CpuFallback | None = None
    tensorflow: str | None = None

    def backend_line(self) -> str:
        b = self.backend
        if not b.started:
            return (
                plugin_options.frozen_settings_sentence() or "JAX's backend has not started: settings can still change."
            )
        devices = ", ".join(f"{d.id}: {d.kind or d.platform}" for d in b.devices)
        line = f"JAX's backend has started on {b.platform} ({devices or 'no devices'})."
        if b.platform == "cpu" and jax_backend.cpu_chosen():
            line += ' The CPU was chosen: jax_platforms is "cpu".'
        if b.fallback_reason:
            line += f" It fell back to the CPU: {b.fallback_reason}"
        if b.error:
            line += f" (could not read it: {b.error})"
        from jupyter_gpumem.settings import started_by

        return line + started_by.where_started()

    def __str__(self) -> str:
        rows = [
            (_LABELS.get(s.name, s.name), s.shown, s.source_words(), s.env_var or f"jax.config {s.config_option}")
            for s in self.settings
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["Settings:"]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
        lines.append("Backend: " + self.backend_line())
        if self.tensorflow:
            lines.append("TensorFlow: " + self.tensorflow)
        if self.warnings:
            lines.append("Warnings:")
            lines.extend(f"  - {w}" for w in self.warnings)
        # Values from the environment, device names and JAX's errors: control characters escaped.
        return "\n".join(printable(line) for line in lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{e(_LABELS.get(s.name, s.name))}</td><td><b>{e(s.shown)}</b></td><td>{e(s.source_words())}</td>"
            f"<td><code>{e(s.env_var or 'jax.config ' + str(s.config_option))}</code></td></tr>"
            for s in self.settings
        )
        warnings = "".join(f"<li>{e(w)}</li>" for w in self.warnings)
        return (
            "<div class='jupyter-gpumem-status'>"
            "<table><thead><tr><th>setting</th><th>in effect</th><th>from</th><th>variable</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            f"<p>{e(self.backend_line())}</p>"
            + (f"<p>TensorFlow: {e(self.tensorflow)}</p>" if self.tensorflow else "")
            + (f"<p>Warnings:</p><ul>{warnings}</ul>" if warnings else "")
            + "</div>"
        )

    def to_json(self) -> dict:
        return {
            "settings": [s.to_json() for s in self.settings],
            "backend": self.backend.to_json(),
            "warnings": list(self.warnings),
            "tensorflow": self.tensorflow,
        }


def display_gpu_warnings(readings: NvmlReadings) -> list[str]:
    """A warning per GPU that drives a display, from NVML readings."""
    if isinstance(readings, NotAvailable):
        return []
    out = []
    for dev in readings:
        if isinstance(dev, DeviceReading) and dev.display_active is True:
            out.append(
                f"GPU {dev.index} ({dev.name}) drives a display. The desktop uses part of its memory and "
                "JAX's fraction is of the total, so preallocation can fail or starve the display: "
                "consider `%gpumem preallocate off` or a smaller fraction."
            )
    return out


def _read_nvml() -> NvmlReadings:
    """One NVML reading for this report; NVML is released again afterwards."""
    source = NvmlSource()
    try:
        return source.read()
    finally:
        # Each report starts NVML anew; without this every %gpumem status would add one to
        # the driver's count of open NVML sessions.
        source.shutdown()


def status(nvml_readings: NvmlReadings | None = None) -> StatusReport:
    """The settings in effect with their source, the backend's state and warnings.

    ``nvml_readings`` (NVML device readings, or NotAvailable) is read through ``nvml.py`` when
    not given.
    """
    settings = allocator_shim.settings_in_effect()
    backend = jax_backend.backend_info()
    from jupyter_gpumem.settings.started_with import late_changes

    warnings = [change.sentence() for change in late_changes()]
    warnings.extend(allocator_shim.environment_problems())
    readings = _read_nvml() if nvml_readings is None else nvml_readings
    warnings.extend(display_gpu_warnings(readings))
    # JAX on the CPU beside GPUs goes first, loudest (NVML is read again only in that case).
    fallback = read_cpu_fallback(backend, None if isinstance(readings, NotAvailable) else len(readings))
    if fallback is not None:
        warnings.insert(0, fallback.sentence())
    from jupyter_gpumem.settings import tensorflow as tensorflow_settings

    return StatusReport(
        settings=settings,
        backend=backend,
        warnings=tuple(warnings),
        cpu_fallback=fallback,
        tensorflow=tensorflow_settings.in_effect(),
    )


REPLAY_NOTE = (
    "The lessons below replay demo traces that ship with the package, labelled REPLAY. Every one "
    "is SYNTHETIC: made up to keep the relationships real readings have, not recorded on a GPU."
)


def gpu_or_replay_text(readings: NvmlReadings, cuda_plugin: bool) -> tuple[bool, str]:
    """Whether JAX can use a GPU (NVML reads one and a CUDA plugin is installed), and the words
    saying which, or why not and that the lessons replay synthetic traces. The words name the
    machine as the one the cell ran on: a notebook's saved output is read on other machines."""
    if not isinstance(readings, NotAvailable) and cuda_plugin:
        names = ", ".join(getattr(g, "name", "a GPU") for g in readings)
        return True, f"Live: JAX can use {names} on the machine this cell ran on."
    why = readings.reason if isinstance(readings, NotAvailable) else "JAX's CUDA plugin is not installed"
    return False, f"No GPU for JAX on the machine this cell ran on ({why}): JAX runs on its CPU.\n{REPLAY_NOTE}"


def gpu_or_replay() -> bool:
    """``jupyter_gpumem.gpu_or_replay()``: prints ``gpu_or_replay_text`` for this machine and
    answers whether JAX can use a GPU. Reads NVML and looks for the plugin; starts no JAX."""
    live, text = gpu_or_replay_text(_read_nvml(), jax_backend.cuda_plugin_installed())
    print(text)
    return live
