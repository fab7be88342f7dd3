"""JSON Lines trace files: one header line, then samples and events, one object per line.

The format is documented in ``docs/trace-format.md``. Writing flushes every line, so a recording
that is interrupted keeps every full line. Reading never raises on bad input unless asked to
(``strict=True``): a bad line becomes a ``TraceError`` that names the line and what is wrong,
and everything before it stays readable.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.files import open_for_appending_lines, open_regular_for_reading
from jupyter_gpumem.core.package_version import package_version
from jupyter_gpumem.core.readings import (
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    DeviceUnreadable,
    Event,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
)
from jupyter_gpumem.core.synthetic import synthetic_fields_problem

FORMAT = 1
# Traces larger than this are refused before any of it is read: reading one builds Python
# objects several times its size, in the kernel or the server. A day at 1 s of one GPU is about
# 100 MB. Pass ``max_bytes`` to ``read_trace``, or set this, for longer recordings.
MAX_TRACE_BYTES = 256 * 2**20
# Counts beyond a signed 64-bit integer are not memory sizes any device reports.
_MAX_INT = 2**63 - 1


class TraceError(ValueError):
    """A trace line that cannot be read. ``partial`` is the Trace of the lines before it."""

    def __init__(self, line: int, message: str, partial: Trace | None = None):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message
        self.partial = partial


@dataclass
class Trace:
    """A trace read back: its header, samples and events in file order.

    ``error`` is set when a line could not be read (reading stopped there); ``truncated`` when
    the last line was cut off mid-write, as happens when a recording is killed.
    """

    header: dict
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    error: TraceError | None = None
    truncated: bool = False

    @property
    def synthetic(self) -> bool:
        return bool(self.header.get("synthetic", False))


class _Bad(Exception):
    """A value in a line that does not fit the format; message names where and why."""


# --- writing ---------------------------------------------------------------------------------


def _na(value: NotAvailable) -> dict:
    return value.to_json()


def _maybe_out(value: Any) -> Any:
    return _na(value) if isinstance(value, NotAvailable) else value


def _device_to_json(dev: DeviceReading | DeviceUnreadable) -> dict:
    if isinstance(dev, DeviceUnreadable):
        return {"index": dev.index, "name": dev.name, "uuid": dev.uuid, "unreadable": _na(dev.why)}
    if isinstance(dev.processes, NotAvailable):
        processes: Any = _na(dev.processes)
    else:
        processes = []
        for proc in dev.processes:
            item = {"pid": proc.pid, "used_bytes": _maybe_out(proc.used_bytes)}
            if proc.name is not None:
                item["name"] = proc.name
            if proc.user is not None:
                item["user"] = proc.user
            processes.append(item)
    return {
        "index": dev.index,
        "name": dev.name,
        "uuid": dev.uuid,
        "total_bytes": dev.total_bytes,
        "used_bytes": dev.used_bytes,
        "free_bytes": dev.free_bytes,
        "reserved_bytes": _maybe_out(dev.reserved_bytes),
        "utilization_percent": _maybe_out(dev.utilization_percent),
        "display_active": _maybe_out(dev.display_active),
        "mig_mode": _maybe_out(dev.mig_mode),
        "processes": processes,
    }


def _jax_to_json(dev: JaxDeviceReading) -> dict:
    out: dict[str, Any] = {
        "id": dev.jax_id,
        "platform": dev.platform,
        "kind": dev.kind,
        "nvml_index": dev.nvml_index,
    }
    if isinstance(dev.stats, NotAvailable):
        out["allocator"] = None
        out["memory_stats"] = None
        # Keeps why there were no stats (not started, an error), which null alone would lose.
        out["stats_na"] = _na(dev.stats)
    else:
        out["allocator"] = dev.stats.allocator
        if dev.stats.raw:
            out["memory_stats"] = dict(dev.stats.raw)
        else:  # built without the raw dict: write the stats it does have, so they read back
            out["memory_stats"] = {
                key: getattr(dev.stats, key) for key in model.STAT_KEYS if getattr(dev.stats, key) is not None
            }
    pool = dev.cuda_pool
    if isinstance(pool, CudaPoolReading):
        out["cuda_pool"] = {
            "reserved_bytes": pool.reserved_bytes,
            "reserved_high_bytes": pool.reserved_high_bytes,
            "used_bytes": pool.used_bytes,
            "used_high_bytes": pool.used_high_bytes,
        }
    else:
        out["cuda_pool"] = _maybe_out(pool)
    return out


def sample_to_json(sample: Sample) -> dict:
    """A Sample as the JSON object of a ``"kind": "sample"`` line."""
    nvml = sample.devices
    devices = _na(nvml) if isinstance(nvml, NotAvailable) else [_device_to_json(d) for d in nvml]
    jax = _na(sample.jax) if isinstance(sample.jax, NotAvailable) else [_jax_to_json(d) for d in sample.jax]
    out = {"kind": "sample", "t": sample.t, "pid": sample.pid, "devices": devices, "jax": jax}
    if sample.pids_not_here is not None:
        out["pids_not_here"] = sorted(sample.pids_not_here)
    if sample.cpu_arrays is not None:
        out["cpu_arrays"] = sample.cpu_arrays.to_json()
    return out


def event_to_json(event: Event) -> dict:
    return {"kind": "event", "t": event.t, "name": event.name, "data": dict(event.data)}


def _tool() -> str:
    return f"jupyter-gpumem {package_version()}"


def header_devices(devices: Any) -> list[dict]:
    """The header's device list from an NVML reading (readable devices only)."""
    if isinstance(devices, NotAvailable):
        return []
    return [
        {"index": d.index, "name": d.name, "uuid": d.uuid, "total_bytes": d.total_bytes}
        for d in devices
        if isinstance(d, DeviceReading)
    ]


class TraceWriter:
    """Writes a trace line by line; each line is flushed as it is written. Thread-safe.

    ``header_fields`` must say ``synthetic`` (True for anything not read from a real GPU);
    ``kind`` and ``format`` are always the writer's own (a caller's are ignored), and ``host``,
    ``pid``, ``created`` and ``tool`` are filled in when absent.
    The file at ``path`` is created or emptied; a link, FIFO or device there is refused
    (files.UnsafePathError) and left as it is. With ``file`` (a text file open for writing) the
    lines go there instead, and ``path`` only names it.
    """

    def __init__(self, path: str | os.PathLike, header_fields: Mapping[str, Any], *, file: Any = None):
        if "synthetic" not in header_fields or not isinstance(header_fields["synthetic"], bool):
            raise ValueError("header_fields must give 'synthetic': true or false")
        header = {
            "kind": "header",
            "format": FORMAT,
            "synthetic": header_fields["synthetic"],
            "host": socket.gethostname(),
            "jax_version": None,
            "settings": {},
            "devices": [],
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "tool": _tool(),
        }
        header.update((key, value) for key, value in header_fields.items() if key not in ("kind", "format"))
        try:
            _check_header(json.loads(json.dumps(header)))
        except _Bad as exc:
            raise ValueError(f"bad header: {exc}") from None
        self.path = os.fspath(path)
        self.header = header
        self._lock = threading.Lock()
        self._file = file if file is not None else open_for_appending_lines(self.path)
        self._write(header)

    def _write(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False)
        with self._lock:
            if self._file is None:
                raise ValueError(f"trace {self.path} is closed")
            self._file.write(line + "\n")
            self._file.flush()

    def write_sample(self, sample: Sample) -> None:
        self._write(sample_to_json(sample))

    def write_event(self, event: Event) -> None:
        self._write(event_to_json(event))

    @property
    def closed(self) -> bool:
        return self._file is None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- reading: strict checks that name the field and the problem -----------------------------


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}" if len(repr(value)) < 40 else "a huge number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _int(obj: Mapping, key: str, where: str, *, minimum: int = 0, nullable: bool = False) -> Any:
    if key not in obj:
        raise _Bad(f"{where}.{key} is missing")
    value = obj[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{where}.{key} must be an integer, got {_type_name(value)}")
    if not minimum <= value <= _MAX_INT:
        raise _Bad(f"{where}.{key} must be an integer from {minimum} to 2**63-1, got {_type_name(value)}")
    return value


def _float(obj: Mapping, key: str, where: str) -> float:
    if key not in obj:
        raise _Bad(f"{where}.{key} is missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{where}.{key} must be a number, got {_type_name(value)}")
    if isinstance(value, int) and abs(value) > _MAX_INT:
        raise _Bad(f"{where}.{key} must be a finite number of seconds, got a huge number")
    value = float(value)
    if not math.isfinite(value):
        raise _Bad(f"{where}.{key} must be a finite number, got {value!r}")
    return value


def _str(obj: Mapping, key: str, where: str, *, nullable: bool = False, default: Any = ...) -> Any:
    if key not in obj:
        if default is not ...:
            return default
        raise _Bad(f"{where}.{key} is missing")
    value = obj[key]
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise _Bad(f"{where}.{key} must be a string, got {_type_name(value)}")
    return value


def _obj(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{where} must be an object, got {_type_name(value)}")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise _Bad(f"{where} must be a list, got {_type_name(value)}")
    return value


def _is_na(value: Any) -> bool:
    return isinstance(value, dict) and "na" in value


def _na_in(value: Any, where: str) -> NotAvailable:
    if (
        set(value) - {"na", "reason"}
        or not isinstance(value.get("na"), str)
        or not isinstance(value.get("reason"), str)
    ):
        raise _Bad(f'{where} must be {{"na": code, "reason": text}} with two strings')
    return NotAvailable(value["na"], value["reason"])


def _maybe_int(obj: Mapping, key: str, where: str, default: Any) -> Any:
    if key not in obj:
        return default
    if _is_na(obj[key]):
        return _na_in(obj[key], f"{where}.{key}")
    return _int(obj, key, where)


def _maybe_bool(obj: Mapping, key: str, where: str, default: Any) -> Any:
    if key not in obj:
        return default
    value = obj[key]
    if _is_na(value):
        return _na_in(value, f"{where}.{key}")
    if not isinstance(value, bool):
        raise _Bad(f"{where}.{key} must be true, false or a not-available value, got {_type_name(value)}")
    return value


_DEFAULTS = DeviceReading(0, "", "", 0, 0, 0)


def _device_in(value: Any, where: str) -> DeviceReading | DeviceUnreadable:
    obj = _obj(value, where)
    index = _int(obj, "index", where)
    name = _str(obj, "name", where, default="")
    uuid = _str(obj, "uuid", where, default="")
    if "unreadable" in obj:
        why = obj["unreadable"]
        if not _is_na(why):
            raise _Bad(f"{where}.unreadable must be a not-available value")
        return DeviceUnreadable(index=index, why=_na_in(why, f"{where}.unreadable"), name=name, uuid=uuid)
    total = _int(obj, "total_bytes", where)
    used = _int(obj, "used_bytes", where)
    free = _int(obj, "free_bytes", where)
    processes: Any = ()
    if "processes" in obj:
        raw_procs = obj["processes"]
        if _is_na(raw_procs):
            processes = _na_in(raw_procs, f"{where}.processes")
        else:
            procs = []
            for i, item in enumerate(_list(raw_procs, f"{where}.processes")):
                pwhere = f"{where}.processes[{i}]"
                pobj = _obj(item, pwhere)
                procs.append(
                    ProcessReading(
                        pid=_int(pobj, "pid", pwhere),
                        used_bytes=_maybe_int(
                            pobj, "used_bytes", pwhere, NotAvailable(model.NOT_SUPPORTED, "not recorded")
                        ),
                        name=_str(pobj, "name", pwhere, nullable=True, default=None),
                        user=_str(pobj, "user", pwhere, nullable=True, default=None),
                    )
                )
            processes = tuple(procs)
    return DeviceReading(
        index=index,
        name=name,
        uuid=uuid,
        total_bytes=total,
        used_bytes=used,
        free_bytes=free,
        reserved_bytes=_maybe_int(obj, "reserved_bytes", where, _DEFAULTS.reserved_bytes),
        utilization_percent=_maybe_int(obj, "utilization_percent", where, _DEFAULTS.utilization_percent),
        display_active=_maybe_bool(obj, "display_active", where, _DEFAULTS.display_active),
        mig_mode=_maybe_bool(obj, "mig_mode", where, _DEFAULTS.mig_mode),
        processes=processes,
    )


def _raw_stats_in(value: Any, where: str) -> dict | None:
    if value is None:
        return None
    obj = _obj(value, where)
    for key, item in obj.items():
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int) and abs(item) <= _MAX_INT:
            continue
        if isinstance(item, float) and math.isfinite(item):
            continue
        raise _Bad(f"{where}[{key!r}] must be a number no larger than 2**63-1, got {_type_name(item)}")
    return obj


def _jax_in(value: Any, where: str) -> JaxDeviceReading:
    obj = _obj(value, where)
    platform = _str(obj, "platform", where)
    allocator = _str(obj, "allocator", where, nullable=True, default=None)
    raw = _raw_stats_in(obj.get("memory_stats"), f"{where}.memory_stats")
    if obj.get("stats_na") is not None:
        if not _is_na(obj["stats_na"]):
            raise _Bad(f"{where}.stats_na must be a not-available value")
        stats: Any = _na_in(obj["stats_na"], f"{where}.stats_na")
    else:
        # Re-normalised on read, so a trace gains whatever the normaliser learns later.
        stats = model.normalise_stats(raw, allocator or "unknown", platform)
    pool_value = obj.get("cuda_pool")
    if pool_value is None:
        pool: Any = None
    elif _is_na(pool_value):
        pool = _na_in(pool_value, f"{where}.cuda_pool")
    else:
        pwhere = f"{where}.cuda_pool"
        pobj = _obj(pool_value, pwhere)
        pool = CudaPoolReading(
            reserved_bytes=_int(pobj, "reserved_bytes", pwhere),
            reserved_high_bytes=_int(pobj, "reserved_high_bytes", pwhere),
            used_bytes=_int(pobj, "used_bytes", pwhere),
            used_high_bytes=_int(pobj, "used_high_bytes", pwhere),
        )
    return JaxDeviceReading(
        jax_id=_int(obj, "id", where),
        platform=platform,
        kind=_str(obj, "kind", where, default=""),
        nvml_index=_int(obj, "nvml_index", where, nullable=True) if "nvml_index" in obj else None,
        stats=stats,
        cuda_pool=pool,
    )


def sample_from_json(obj: Any) -> Sample:
    """The Sample a ``"kind": "sample"`` object describes; raises TraceError(line 0) if malformed."""
    try:
        return _sample_in(obj)
    except _Bad as exc:
        raise TraceError(0, str(exc)) from None


def _sample_in(value: Any) -> Sample:
    obj = _obj(value, "sample")
    t = _float(obj, "t", "sample")
    pid = _int(obj, "pid", "sample")
    if "devices" not in obj or "jax" not in obj:
        raise _Bad("sample.devices and sample.jax are both required")
    raw_devices, raw_jax = obj["devices"], obj["jax"]
    if _is_na(raw_devices):
        devices: Any = _na_in(raw_devices, "sample.devices")
    else:
        devices = tuple(_device_in(d, f"devices[{i}]") for i, d in enumerate(_list(raw_devices, "sample.devices")))
    if _is_na(raw_jax):
        jax: Any = _na_in(raw_jax, "sample.jax")
    else:
        jax = tuple(_jax_in(d, f"jax[{i}]") for i, d in enumerate(_list(raw_jax, "sample.jax")))
    not_here = None
    if "pids_not_here" in obj:  # optional: without it, pids are matched as they are
        listed = _list(obj["pids_not_here"], "sample.pids_not_here")
        not_here = frozenset(
            _int({f"pids_not_here[{i}]": p}, f"pids_not_here[{i}]", "sample") for i, p in enumerate(listed)
        )
    return Sample(t=t, pid=pid, devices=devices, jax=jax, pids_not_here=not_here, cpu_arrays=_cpu_arrays_in(obj))


def _cpu_arrays_in(obj: Mapping) -> CpuArraysReading | NotAvailable | None:
    where, value = "sample.cpu_arrays", obj.get("cpu_arrays")  # traces written before it have none
    if value is None or _is_na(value):
        return None if value is None else _na_in(value, where)
    found = _obj(value, where)
    return CpuArraysReading(_int(found, "bytes", where), _int(found, "arrays", where))


def _event_in(obj: dict) -> Event:
    t = _float(obj, "t", "event")
    name = _str(obj, "name", "event")
    if not name:
        raise _Bad("event.name must not be empty")
    data = _obj(obj.get("data", {}), "event.data")
    return Event(t=t, name=name, data=data)


def _check_header(obj: Any) -> dict:
    obj = _obj(obj, "header")
    if obj.get("kind") != "header":
        raise _Bad('the first line must be the header, {"kind": "header", ...}')
    if obj.get("format") != FORMAT or isinstance(obj.get("format"), bool):
        raise _Bad(f"format must be {FORMAT}, got {obj.get('format')!r}: this reader knows format {FORMAT} only")
    if not isinstance(obj.get("synthetic"), bool):
        raise _Bad("header.synthetic must be true or false")
    if (problem := synthetic_fields_problem(obj)) is not None:
        raise _Bad(problem)
    for key in ("host", "created", "tool"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            raise _Bad(f"header.{key} must be a string, got {_type_name(obj[key])}")
    if obj.get("jax_version") is not None and not isinstance(obj["jax_version"], str):
        raise _Bad(f"header.jax_version must be a string or null, got {_type_name(obj['jax_version'])}")
    if "settings" in obj:
        _obj(obj["settings"], "header.settings")
    if "pid" in obj:
        _int(obj, "pid", "header")
    for i, dev in enumerate(_list(obj.get("devices", []), "header.devices")):
        where = f"header.devices[{i}]"
        dev = _obj(dev, where)
        _int(dev, "index", where)
        _str(dev, "name", where)
        _str(dev, "uuid", where)
        _int(dev, "total_bytes", where)
    return obj


def _reject_constant(name: str) -> Any:
    raise _Bad(f"{name} is not a number JSON allows")


def _parse_line(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise _Bad("nested too deeply") from None
    except ValueError as exc:  # integers too long for Python to parse
        raise _Bad(f"not valid JSON ({exc})") from None


def read_trace(path: str | os.PathLike, strict: bool = False, max_bytes: int | None = None) -> Trace:
    """Read a trace file, line by line.

    Never raises on bad content unless ``strict``: the Trace's ``error`` names the first bad
    line, and the lines before it are returned. With ``strict=True`` that error is raised,
    with ``.partial`` holding what was read. A missing file raises OSError either way, and so
    does (``files.UnsafePathError``, before anything is read) a FIFO, a device, a folder, or a
    file larger than ``max_bytes`` (default ``MAX_TRACE_BYTES``).
    """
    limit = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    with open_regular_for_reading(path, limit, follow_links=True) as fh:
        return _read_lines(_lines_of(fh, limit), strict)


def read_trace_bytes(data: bytes, strict: bool = False) -> Trace:
    """``read_trace`` for content already in memory."""
    return _read_lines(_lines_of(io.BytesIO(data), len(data)), strict)


def _lines_of(fh: Any, limit: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without the newline, whether the newline was there), reading no more
    than ``limit`` bytes in all (raises _GrewPastLimit beyond: the file grew while read)."""
    number, left = 0, limit
    while True:
        raw = fh.readline(left + 1)
        if not raw:
            return
        number += 1
        left -= len(raw)
        if left < 0:
            raise _GrewPastLimit(number, limit)
        complete = raw.endswith(b"\n")
        yield number, raw[:-1] if complete else raw, complete


class _GrewPastLimit(Exception):
    def __init__(self, line: int, limit: int):
        super().__init__(f"the file grew past the limit of {limit:,} bytes while it was read")
        self.line = line


def _read_lines(lines: Iterator[tuple[int, bytes, bool]], strict: bool) -> Trace:
    trace = Trace(header={})
    read_any = False
    try:
        for number, raw, complete in lines:
            if not complete and not raw.strip():
                continue  # after the last newline: nothing, or only blanks
            read_any = True
            try:
                _read_line(trace, number, raw)
            except _Bad as exc:
                if not complete:  # a line cut mid-write, as when a recording is killed
                    trace.truncated = True
                else:
                    trace.error = TraceError(number, str(exc), trace)
                break
    except _GrewPastLimit as exc:
        trace.error = TraceError(exc.line, str(exc), trace)
    if not read_any and trace.error is None:
        trace.error = TraceError(1, "the file is empty: a trace starts with a header line", trace)
    if strict and trace.error is not None:
        raise trace.error
    return trace


def _read_line(trace: Trace, number: int, raw: bytes) -> None:
    """Add line ``number`` to ``trace``; raises _Bad for a line that does not fit the format."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("not UTF-8 text") from None
    if not text.strip():
        if number == 1:
            raise _Bad("the first line must be the header, found an empty line")
        return
    obj = _parse_line(text)
    if number == 1:
        trace.header = _check_header(obj)
        return
    kind = _obj(obj, "line").get("kind")
    if kind == "sample":
        sample = _sample_in(obj)
        if trace.samples and sample.t < trace.samples[-1].t:
            raise _Bad(
                f"sample.t is {sample.t!r}, earlier than the sample before it ({trace.samples[-1].t!r}): "
                "samples must be in time order (was the clock set back?); the trace is read up to here"
            )
        trace.samples.append(sample)
    elif kind == "event":
        trace.events.append(_event_in(obj))
    elif kind == "header":
        raise _Bad("a second header: only line 1 may be a header")
    else:
        raise _Bad(f'"kind" must be "sample" or "event", got {kind!r}')
