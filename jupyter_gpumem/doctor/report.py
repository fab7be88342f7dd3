"""Why did this cell run out of memory, and what would fix it? The OOM report, text and HTML.

Reads the numbers at failure (allocator statistics, NVML, live arrays within a time budget),
then asks ``oom_rules`` for ranked fixes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jupyter_gpumem.core import metrics, sites
from jupyter_gpumem.core.attribution import attribute, jax_pool_on
from jupyter_gpumem.core.readings import (
    AllocatorStats,
    CudaPoolReading,
    DeviceReading,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
)
from jupyter_gpumem.doctor import oom_mesh, oom_peak, oom_rules, oom_text, peak_buffers
from jupyter_gpumem.doctor.arrays import ArrayRecord, census, growth_of, not_started_note
from jupyter_gpumem.doctor.names import WALK_SECONDS_REPORT
from jupyter_gpumem.doctor.oom_readings import OomReadings, OtherProcess
from jupyter_gpumem.doctor.oom_rules import Fix
from jupyter_gpumem.doctor.oom_text import OomError, allocator_words
from jupyter_gpumem.doctor.text import (
    TextReport,
    action_label,
    bytes_or_na,
    escape_html,
    pretty_as_text,
)
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.settings.cpu_fallback import read_cpu_fallback
from jupyter_gpumem.settings.effective import recorded_settings
from jupyter_gpumem.sources import host_memory


def _process_label(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read(4096).replace(b"\0", b" ").decode(errors="replace")  # argv[0] is what is shown
    except OSError:
        return "process"
    if "ipykernel" in cmd or "jupyter-kernel" in cmd:
        return "Jupyter kernel"
    first = cmd.split(" ", 1)[0]
    return os.path.basename(first) or "process"


def _other_process(p: ProcessReading, label: str, here: bool = True) -> OtherProcess:
    return OtherProcess(p.pid, p.used_bytes if isinstance(p.used_bytes, int) else None, label, here)


def _unlisted_note(dev: DeviceReading, own: int | None, listed: tuple[OtherProcess, ...]) -> str:
    """With no other process listed, what of the device's used memory is still not this kernel's
    (the monitor draws it as other processes: used less this process)."""
    if listed or own is None:
        return ""
    unlisted = max(0, dev.used_bytes - own)
    if not unlisted:
        return ""
    return (
        f"none listed by NVML, yet {bytes_or_na(unlisted)} of the device's used memory is not this kernel's: "
        "the driver's own, or processes NVML does not list here (another container's)"
    )


@dataclass(frozen=True)
class DeviceState:
    """One device at the failure, for the report.

    ``driver_pool``: the pool is the CUDA driver's default pool (cuda_async), which no fraction
    caps; ``limit`` is then the pool's release threshold, where JAX reports one.
    """

    label: str
    in_use: int | None = None
    pool: int | None = None
    limit: int | None = None
    largest_free: int | None = None
    fragmentation: float | None = None
    headroom: int | None = None
    note: str = ""
    driver_pool: bool = False

    def driver_pool_words(self) -> str:
        """What the cuda_async pool is and what the fraction does to it, for people."""
        if self.limit is None:
            threshold = (
                "with preallocation off its release threshold is 0, so unused pool memory goes back "
                "to the device at each synchronisation"
            )
        else:
            threshold = f"the fraction sets only its release threshold ({bytes_or_na(self.limit)}), below which it keeps unused memory"
        return f"the pool is the CUDA driver's default pool (cuda_async), and no fraction caps it: {threshold}"


@dataclass(frozen=True)
class OomReport(TextReport):
    """The report shown when a cell fails for want of memory. Text in a terminal, HTML in a
    notebook, ``to_json()`` for tools."""

    _repr_pretty_ = pretty_as_text

    error: OomError
    settings: tuple[tuple[str, str, str], ...]
    devices: tuple[DeviceState, ...]
    others: tuple[OtherProcess, ...]
    others_note: str
    arrays: tuple[ArrayRecord, ...]
    arrays_note: str
    readings: OomReadings
    fixes: tuple[Fix, ...]
    # XLA's peak buffers from the error text, by source line (rows), and the totals they sit in
    peak_rows: tuple[str, ...] = ()
    peak_title: str = ""
    on_device: int | None = None  # the failing device, where the error names it among several

    def arrays_title(self) -> str:
        there = f" on {self.readings.failing_label} (their bytes there)" if self.on_device is not None else ""
        return f"Largest live arrays{there}:"

    def held(self, r: ArrayRecord) -> int:
        """What ``r`` holds on the failing device, where it is one of several; else all its bytes."""
        return r.nbytes if self.on_device is None else r.bytes_per_device.get(self.on_device, 0)

    def growth_line(self) -> str:
        """``Growing, run after run: ...`` for the three largest growing lines, or ``""``."""
        return sites.growth_sentence(self.readings.growing)

    def requested_line(self) -> str:
        e = self.error
        if e.requested_bytes is None:
            return "Requested: the error does not say how much."
        if e.exact:
            return f"Requested: {bytes_or_na(e.requested_bytes)} ({e.requested_bytes:,} bytes)."
        low_high = e.requested_range
        if low_high and low_high[0] != low_high[1]:
            return (
                f"Requested: {bytes_or_na(e.requested_bytes)} (the error printed it rounded: "
                f"{low_high[0]:,} to {low_high[1]:,} bytes)."
            )
        return (
            f"Requested: {bytes_or_na(e.requested_bytes)} ({e.requested_bytes:,} bytes; the error printed it rounded)."
        )

    def raised_by_line(self) -> str:
        """Which of XLA's allocators refused, and when, where the text says; else ``""``."""
        e = self.error
        said = []
        if e.allocator:
            words = allocator_words(e.allocator)
            said.append(f"Raised by XLA's allocator {e.allocator}" + (f" ({words})" if words else "") + ".")
        if e.autotuning:
            said.append(
                "While compiling: XLA's autotuner ran out as it tried kernels for the program, so the size is "
                "one trial's scratch, not an array of the program."
            )
        return " ".join(said)

    def program_line(self) -> str:
        p = self.readings.program
        if p is None:
            return ""
        donated = "some arguments donated" if p.donated else "no argument donated"
        return (
            f"{p.call}: arguments {bytes_or_na(p.argument_bytes)}, outputs {bytes_or_na(p.output_bytes)}, temporaries "
            f"{bytes_or_na(p.temp_bytes)}, code {bytes_or_na(p.code_bytes)}, aliased {bytes_or_na(p.alias_bytes)}; {donated}."
        )

    def lines(self) -> list[str]:
        out = [
            "JAX ran out of memory (jupyter-gpumem doctor)"
            + (" [synthetic readings]" if self.readings.synthetic else ""),
            self.requested_line(),
            *filter(None, [self.raised_by_line()]),
        ]
        if self.peak_rows:
            out += ["", self.peak_title, *self.peak_rows]
        out += ["", "Allocator settings in effect:"]
        # each setting as the magic spells it (async-prealloc), as %gpumem status shows it
        out += [f"  {name.replace('_', '-'):<15} {shown:<16} ({source})" for name, shown, source in self.settings]
        out += ["", "Device state at failure:"]
        for d in self.devices:
            if d.note:
                out.append(f"  {d.label}: {d.note}")
                continue
            if d.driver_pool:
                out.append(
                    f"  {d.label}: in use {bytes_or_na(d.in_use)}, pool {bytes_or_na(d.pool)}; {d.driver_pool_words()}"
                )
                continue
            frag = "n/a" if d.fragmentation is None else f"{d.fragmentation:.0%}"
            out.append(
                f"  {d.label}: in use {bytes_or_na(d.in_use)}, pool {bytes_or_na(d.pool)}, limit {bytes_or_na(d.limit)}, "
                f"largest free block {bytes_or_na(d.largest_free)}, fragmentation {frag}, headroom {bytes_or_na(d.headroom)}"
            )
        out += ["", "Other processes on the device:"]
        listed = self.others + self.readings.host_pid_processes
        out += [f"  pid {p.pid} ({p.label}): {bytes_or_na(p.used_bytes)}" for p in listed]
        if self.others_note or not listed:
            out.append(f"  {self.others_note or 'none'}")
        out += ["", self.arrays_title()]
        if self.arrays:
            out += [
                f"  {bytes_or_na(self.held(r)):>11}  {r.dtype}{list(r.shape)}  held by {', '.join(r.names) or '(no name: held elsewhere)'}"
                + (f"  (cell {r.cell})" if r.cell is not None else "")
                for r in self.arrays
            ]
            if self.arrays_note:
                out.append(f"  {self.arrays_note}")
        else:
            out.append(f"  {self.arrays_note or 'none'}")
        if self.readings.growing:
            out.append(f"  {self.growth_line()}")
        if self.readings.program is not None:
            out += ["", "The failing call's program (compiled again, not run):", f"  {self.program_line()}"]
        out += ["", "What to do, best first:"]
        if not self.fixes:
            out.append(
                "  No fix stands out from these numbers: make the program need less (smaller batch, "
                "lower precision), or run `%gpumem arrays` to see what holds memory."
            )
        for i, f in enumerate(self.fixes, 1):
            out.append(f"  {i}. {f.title}.")
            out.append(f"     {action_label(f.action)}: {f.action}")
            out += [f"     Or:  {a}" for a in f.extra_actions]
            out.append(f"     Why: {f.why}")
        out.append("(The error above is unchanged and still stops the run.)")
        return out

    def _device_rows_html(self) -> list[str]:
        """One table row per device: its note, its driver pool's words, or its numbers."""
        devs = []
        for d in self.devices:
            if d.note:
                devs.append(f"<tr><td>{escape_html(d.label)}</td><td colspan='6'>{escape_html(d.note)}</td></tr>")
            elif d.driver_pool:
                cells = "".join(
                    f"<td>{escape_html(c)}</td>" for c in (d.label, bytes_or_na(d.in_use), bytes_or_na(d.pool))
                )
                devs.append(f"<tr>{cells}<td colspan='4'>{escape_html(d.driver_pool_words())}</td></tr>")
            else:
                frag = "n/a" if d.fragmentation is None else f"{d.fragmentation:.0%}"
                cells = [
                    d.label,
                    bytes_or_na(d.in_use),
                    bytes_or_na(d.pool),
                    bytes_or_na(d.limit),
                    bytes_or_na(d.largest_free),
                    frag,
                    bytes_or_na(d.headroom),
                ]
                devs.append("<tr>" + "".join(f"<td>{escape_html(c)}</td>" for c in cells) + "</tr>")
        return devs

    def _array_rows_html(self) -> str:
        """The largest live arrays as table rows, or the note that says why there are none."""
        return (
            "".join(
                f"<tr><td>{escape_html(bytes_or_na(self.held(r)))}</td><td>{escape_html(r.dtype)}{escape_html(list(r.shape))}</td>"
                f"<td>{escape_html(', '.join(r.names) or '(no name)')}</td><td>{'' if r.cell is None else r.cell}</td></tr>"
                for r in self.arrays
            )
            + (
                f"<tr><td colspan='4'>{escape_html(self.arrays_note)}</td></tr>"
                if self.arrays and self.arrays_note
                else ""
            )
            or f"<tr><td colspan='4'>{escape_html(self.arrays_note or 'none')}</td></tr>"
        )

    def _repr_html_(self) -> str:
        settings = "".join(
            f"<tr><td>{escape_html(n.replace('_', '-'))}</td><td><b>{escape_html(s)}</b></td><td>{escape_html(src)}</td></tr>"
            for n, s, src in self.settings
        )
        devs = self._device_rows_html()
        listed = self.others + self.readings.host_pid_processes
        others = "".join(
            f"<li>pid {p.pid} ({escape_html(p.label)}): {escape_html(bytes_or_na(p.used_bytes))}</li>" for p in listed
        ) + (f"<li>{escape_html(self.others_note or 'none')}</li>" if self.others_note or not listed else "")
        arrays = self._array_rows_html()
        fixes = (
            "".join(
                f"<li><b>{escape_html(f.title)}</b><br>{action_label(f.action)}: <code>{escape_html(f.action)}</code>"
                + "".join(f"<br>Or: <code>{escape_html(a)}</code>" for a in f.extra_actions)
                + f"<br><small>{escape_html(f.why)}</small></li>"
                for f in self.fixes
            )
            or "<li>No fix stands out from these numbers: make the program need less, or run <code>%gpumem arrays</code>.</li>"
        )
        synthetic = " <i>(synthetic readings)</i>" if self.readings.synthetic else ""
        headline = " ".join(filter(None, [self.requested_line(), self.raised_by_line()]))
        return (
            "<div class='jupyter-gpumem-oom' style='border-left:4px solid var(--jp-error-color1, #d32f2f);padding-left:8px'>"
            f"<p><b>JAX ran out of memory</b>{synthetic}. {escape_html(headline)}</p>"
            # the fixes first: the traceback above is already long, the numbers behind them follow
            f"<p>What to do, best first:</p><ol>{fixes}</ol>"
            + (
                f"<p>{escape_html(self.peak_title)}</p><pre>{escape_html(chr(10).join(self.peak_rows))}</pre>"
                if self.peak_rows
                else ""
            )
            + (
                f"<p>The failing call's program (compiled again, not run): {escape_html(self.program_line())}</p>"
                if self.readings.program is not None
                else ""
            )
            + f"<p>Allocator settings in effect:</p><table>{settings}</table>"
            "<p>Device state at failure:</p><table><thead><tr><th>device</th><th>in use</th><th>pool</th><th>limit</th>"
            f"<th>largest free block</th><th>fragmentation</th><th>headroom</th></tr></thead><tbody>{''.join(devs)}</tbody></table>"
            f"<p>Other processes on the device:</p><ul>{others}</ul>"
            f"<p>{escape_html(self.arrays_title())}</p><table><thead><tr><th>bytes</th><th>array</th><th>held by</th><th>cell</th></tr></thead>"
            f"<tbody>{arrays}</tbody></table>"
            + (f"<p>{escape_html(self.growth_line())}</p>" if self.readings.growing else "")
            + "<p><small>The error above is unchanged and still stops the run.</small></p></div>"
        )

    def to_json(self) -> dict:
        return {
            "error": self.error.to_json(),
            "settings": [list(s) for s in self.settings],
            "devices": [d.__dict__ for d in self.devices],
            "others": [p.__dict__ for p in self.others],
            "arrays": [r.to_json() for r in self.arrays],
            "growing": [
                {"site": g.site, "runs": g.runs, "arrays": g.arrays, "nbytes": g.nbytes} for g in self.readings.growing
            ],
            "live_bytes": self.readings.live_bytes,  # None: not known (a replay, or JAX not started)
            "fixes": [f.to_json() for f in self.fixes],
            "peak": [self.peak_title, *self.peak_rows] if self.peak_rows else [],
            "synthetic": self.readings.synthetic,
        }


def _failing_device(error: OomError, jax_readings: tuple[JaxDeviceReading, ...]) -> JaxDeviceReading | None:
    """The device named by the error, else the one with the least room, else the first.

    The "device ordinal" of XLA's message is the CUDA ordinal (XLA's ``local_device_ordinal``,
    JAX's ``local_hardware_id``), not JAX's device id: they differ once
    ``jax_cuda_visible_devices`` picks devices. Readings that carry no CUDA ordinal (traces
    recorded without one) are taken in order, as XLA numbers a process's devices.
    """
    if not jax_readings:
        return None
    if error.ordinal is not None:
        named = [r for r in jax_readings if r.cuda_ordinal == error.ordinal]
        if named:
            return named[0]
        if all(r.cuda_ordinal is None for r in jax_readings) and 0 <= error.ordinal < len(jax_readings):
            return jax_readings[error.ordinal]
    with_stats = [r for r in jax_readings if isinstance(r.stats, AllocatorStats)]
    if with_stats:
        return min(with_stats, key=lambda r: metrics.largest_likely_request(r.stats, r.cuda_pool) or 0)
    return jax_readings[0]


def device_state(r: JaxDeviceReading, arrays_known: bool = True) -> DeviceState:
    label = f"{r.platform} {r.jax_id}" + (f" ({r.kind})" if r.kind else "")
    s = r.stats
    if not isinstance(s, AllocatorStats):
        instead = "live-array bytes are used instead" if arrays_known else "a replay has no arrays to count instead"
        return DeviceState(label, note=f"{s.reason}; {instead}")
    pool = r.cuda_pool
    return DeviceState(
        label,
        s.bytes_in_use,
        metrics.pool_bytes(s, pool),
        s.bytes_limit,
        s.largest_free_block_bytes,
        metrics.fragmentation(s, pool),
        metrics.headroom(s, pool),
        driver_pool=metrics.uses_driver_pool(s, pool),
    )


def _replay_note(stats: AllocatorStats | None) -> str:
    """Why a replayed report lists no arrays, and what the reading says they came to."""
    held = (
        f": together at most the {bytes_or_na(stats.bytes_in_use)} in use"
        if stats is not None and stats.bytes_in_use is not None
        else ""
    )
    return f"not known for a replayed trace, which records the allocator's readings, not the arrays{held}"


@dataclass(frozen=True)
class _Failing:
    """The device that ran out, as the sample shows it."""

    jax: JaxDeviceReading | None
    stats: AllocatorStats | None
    cuda_pool: CudaPoolReading | None
    platform: str
    nvml: DeviceReading | None


@dataclass(frozen=True)
class _WhoElse:
    """Who else holds the failing device's memory: other processes, host pids that may be this
    kernel, this process's own bytes, and what NVML could not say."""

    others: tuple[OtherProcess, ...] = ()
    host_pids: tuple[OtherProcess, ...] = ()
    own: int | None = None
    note: str = ""


def _failing(error: OomError, sample: Sample) -> _Failing:
    """Pure: the failing JAX device in ``sample``, its allocator readings and its NVML device."""
    jax_readings = () if isinstance(sample.jax, NotAvailable) else tuple(sample.jax)
    failing = _failing_device(error, jax_readings)
    if failing is None:
        return _Failing(None, None, None, "cpu" if error.form == "cpu" else "gpu", None)
    nvml = sample.device(failing.nvml_index) if failing.nvml_index is not None else None
    return _Failing(
        failing,
        failing.stats if isinstance(failing.stats, AllocatorStats) else None,
        failing.cuda_pool if isinstance(failing.cuda_pool, CudaPoolReading) else None,
        failing.platform,
        nvml if isinstance(nvml, DeviceReading) else None,
    )


def _who_else(sample: Sample, failing: _Failing, label_of: Any = _process_label) -> _WhoElse:
    """Which of NVML's processes on the failing device are this one (by pid, by elimination in a
    container, or it cannot tell), and the others; pure but for ``label_of(pid)``."""
    dev = failing.nvml
    if dev is None:
        if isinstance(sample.devices, NotAvailable):
            return _WhoElse(note=f"NVML: {sample.devices.reason}")
        why = (failing.jax.nvml_unmatched if failing.jax is not None else None) or "it was not found in NVML"
        return _WhoElse(
            note=f"no NVIDIA device matches the failing JAX device: {why}"
            if failing.platform == "gpu"
            else "the CPU is not a GPU: NVML does not list its users"
        )
    if isinstance(dev.processes, NotAvailable):
        return _WhoElse(note=dev.processes.reason)
    who = attribute(dev, sample.pid, sample.pids_not_here, jax_pool_on(sample, dev.index))
    others = tuple(_other_process(p, label_of(p.pid)) for p in who.others) + tuple(
        _other_process(p, "not a process here", here=False) for p in who.gone
    )
    host_pids = tuple(
        _other_process(p, "host pid, not a process here; may be this kernel", here=False) for p in who.unknown
    )
    own = who.own_bytes if isinstance(who.own_bytes, int) else None
    return _WhoElse(others, host_pids, own, who.reason or _unlisted_note(dev, own, others + host_pids))


def _read_arrays(shell: Any, live: list[ArrayRecord] | None, arrays_known: bool) -> tuple[list[ArrayRecord], str]:
    """The live arrays (``live`` where given, else a time-boxed census) and the walk's note."""
    if live is not None:
        return list(live), ""
    if not arrays_known:
        return [], ""
    found = census(shell, seconds=WALK_SECONDS_REPORT)
    return list(found.records), found.walk.note()


def _typed(values: dict[str, Any], name: str, kind: type) -> Any:
    value = values.get(name)
    return value if isinstance(value, kind) else None


def _oom_readings(
    error: OomError,
    failing: _Failing,
    who: _WhoElse,
    values: dict[str, Any],
    records: list[ArrayRecord],
    arrays_known: bool,
    read: _Beside,
    synthetic: bool,
) -> OomReadings:
    """Pure: the numbers the rules read, from what was read at failure."""
    beside, gpus = read.cpu_fallback, read.gpus
    stats, nvml_dev, device_id = failing.stats, failing.nvml, failing.jax.jax_id if failing.jax is not None else None
    on_device = [r for r in records if device_id is None or device_id in r.bytes_per_device]
    live_bytes = sum(
        r.bytes_per_device.get(device_id, 0) if device_id is not None else r.device_bytes for r in on_device
    )
    return OomReadings(
        requested=error.requested_bytes,
        device_total=nvml_dev.total_bytes if nvml_dev is not None else read.host_total,
        device_free=nvml_dev.free_bytes if nvml_dev is not None else read.host_available,
        bytes_in_use=stats.bytes_in_use if stats else None,
        pool_bytes=stats.pool_bytes if stats else None,
        bytes_limit=stats.bytes_limit if stats else None,
        largest_free_block=stats.largest_free_block_bytes if stats else None,
        own_process_bytes=who.own,
        others=who.others,
        host_pid_processes=who.host_pids,
        preallocate=_typed(values, "preallocate", bool),
        fraction=_typed(values, "fraction", float),
        allocator=stats.allocator if stats else str(values.get("allocator")),
        remat=_typed(values, "remat", bool),
        live_bytes=live_bytes if arrays_known else None,
        history_bytes=sum(r.device_bytes for r in on_device if r.history_only),
        growing=tuple(growth_of(on_device)),
        error_form=error.form,
        autotuning=error.autotuning,
        host_array_bytes=sum(r.host_bytes for r in records) if arrays_known else None,
        platform=failing.platform,
        synthetic=synthetic,
        cuda_pool=failing.cuda_pool,
        visible_gpus=beside.gpus if beside is not None else 0,
        idle_gpus=sum(1 for d in gpus if isinstance(d, DeviceReading) and d.processes == ()),
        gpu_fix=(beside.fix if beside.is_command else beside.fix[:1].upper() + beside.fix[1:])
        if beside is not None
        else None,
        program=read.program,
    )


def oom_report(
    exc: BaseException | OomError,
    shell: Any = None,
    sample: Sample | None = None,
    live: list[ArrayRecord] | None = None,
    synthetic: bool = False,
    raised: BaseException | None = None,
    recorded_env: Mapping[str, str] | None = None,
) -> OomReport | None:
    """The OOM report for ``exc`` (an exception or a recognised ``OomError``), read now; None
    when ``exc`` is not an out-of-memory error.

    ``sample`` replaces the reading taken now (a trace replayed): the arrays of that moment are
    not in this process, so they are reported as not known, in-use bytes come from the
    allocator's reading, and no program is compiled again. ``live`` lists the arrays instead of
    a census (``[]``: there were none). ``synthetic`` marks the report as drawn from made-up readings. ``raised``: the exception,
    where ``exc`` is its recognised form, for the failing jitted call in its traceback.
    ``recorded_env``: the environment a replayed trace's process ran with (its header's
    ``settings.env``); the settings in effect are then that process's, not this one's.
    """
    error = exc if isinstance(exc, OomError) else oom_text.recognise(exc)
    if error is None:
        return None
    replayed = sample is not None and live is None  # that moment's arrays are not this process's
    if sample is None:
        from jupyter_gpumem.sampling.sampler import get_sampler

        sample = get_sampler().sample_once()
    failing = _failing(error, sample)
    who = _who_else(sample, failing)
    states = recorded_settings(recorded_env) if recorded_env is not None else tuple(allocator_shim.settings_in_effect())
    arrays_known = live is not None or (not replayed and allocator_shim.backend_started())
    records, walk_note = _read_arrays(shell, live, arrays_known)
    raised = exc if isinstance(exc, BaseException) else raised
    beside = _read_beside_the_device(
        failing,
        sample,
        shell,
        raised if arrays_known and live is None else None,
        peak_buffers.FRAME_ID in error.message,
    )
    values = {s.name: s.value for s in states}
    readings = _oom_readings(error, failing, who, values, records, arrays_known, beside, synthetic)
    arrays_note = walk_note if records else _no_arrays_note(arrays_known, replayed, failing.stats)
    devices, records, readings, device = _one_of_many(error, failing, sample, replayed, records, readings)
    title, rows = oom_peak.peak_section(error, readings.program, shell)
    return OomReport(
        error,
        tuple((s.name, s.shown, s.source_words()) for s in states),
        devices,
        who.others,
        who.note,
        tuple(records[:5]),
        arrays_note,
        readings,
        tuple(oom_rules.advise(readings)),
        rows,
        title,
        device,
    )


def _one_of_many(
    error: OomError, failing: _Failing, sample: Sample, replayed: bool, records: list, readings: OomReadings
) -> tuple[tuple[DeviceState, ...], list, OomReadings, int | None]:
    """Pure: the device states, the arrays (ranked by their bytes on the failing device where
    the error names it among several), the readings with that device's replicated arrays, and
    its JAX id (None where the error names no device, or there is one)."""
    states = _device_states(sample, replayed)
    jax_readings = () if isinstance(sample.jax, NotAvailable) else tuple(sample.jax)
    if error.ordinal is None or failing.jax is None or len(jax_readings) < 2:
        return states, records, readings, None
    device = failing.jax.jax_id
    others = [s for r, s in zip(jax_readings, states) if r is not failing.jax]
    label = oom_mesh.others_label(others, [r.jax_id for r in jax_readings if r is not failing.jax])
    states = (device_state(failing.jax, not replayed), DeviceState(label, note=oom_mesh.others_in_one_line(others)))
    shared = oom_mesh.replicated_on(records, device)
    readings = replace(readings, replicated=shared, failing_label=f"{failing.platform} {device}")
    return states, oom_mesh.ranked_on(records, device), readings, device


@dataclass(frozen=True)
class _Beside:
    """What the report reads besides the sample: the GPUs NVML lists, the host's total and
    available bytes (when the CPU ran out), JAX on the CPU beside GPUs, and the failing program."""

    gpus: tuple = ()
    host_total: int | None = None
    host_available: int | None = None
    cpu_fallback: Any = None
    program: Any = None


def _no_arrays_note(arrays_known: bool, replayed: bool, stats: AllocatorStats | None) -> str:
    """Pure: why the report lists no arrays."""
    if arrays_known:
        return "no live JAX arrays"
    return _replay_note(stats) if replayed else not_started_note()


def _read_beside_the_device(
    failing: _Failing, sample: Sample, shell: Any, raised: BaseException | None, read_frames: bool = False
) -> _Beside:
    """Reads what the report needs besides the sample; the failing program is compiled again from
    shapes only where ``raised`` is given, and its module's stack-frame tables read where
    ``read_frames`` (the error's peak buffers name their sources by frame id)."""
    gpus = () if isinstance(sample.devices, NotAvailable) else tuple(sample.devices)
    on_cpu = failing.platform == "cpu" and failing.nvml is None
    host = (host_memory.total_bytes(), host_memory.available_bytes()) if on_cpu else (None, None)
    beside = read_cpu_fallback(gpu_count=len(gpus)) if failing.platform == "cpu" and gpus else None
    program = None
    if raised is not None:
        from jupyter_gpumem.doctor.program_budget import program_budget

        program = program_budget(raised, shell, read_frames)
    return _Beside(gpus, host[0], host[1], beside, program)


def _device_states(sample: Sample, replayed: bool) -> tuple[DeviceState, ...]:
    """Pure: each JAX device's state at failure, or one line saying why there are none."""
    jax_readings = () if isinstance(sample.jax, NotAvailable) else tuple(sample.jax)
    return tuple(device_state(r, not replayed) for r in jax_readings) or (
        DeviceState("JAX", note="no JAX device readings: " + getattr(sample.jax, "reason", "")),
    )
