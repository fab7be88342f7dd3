"""Is this exception JAX running out of memory, and how much did it ask for? Pure: no jax, no I/O.

``recognise(exc)`` gives an ``OomError`` for JAX's out-of-memory errors in every message form
known (GPU BFC with human units or bytes, the pinned host memory pool, a compiled kernel that
could not be loaded, a CUDA graph that could not be instantiated, the platform/address
allocator, the CPU), by class name and by text,
whatever the JAX version; None for anything else. ``parse_request(text)`` gives the requested
size in bytes, and the device ordinal where the text names one.

The GPU texts as XLA writes them (the format strings are in jax-cuda12-pjrt 0.10.2's
xla_cuda_plugin.so):

- ``MemoryAllocationError`` (xla/stream_executor/integrations/tf_allocator_adapter.cc):
  ``"Out of " + ("host " if host memory) + "memory while trying to allocate " + SIZE + "."``, the
  host one followed by "Please set the environment variable XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB to
  allocate larger host memory than the default 64 GB." SIZE was ``N + " bytes"`` until
  openxla/xla#33504 (November 2025); since then it is ``tsl::strings::HumanReadableNumBytes(N)``
  ("14.16GiB"): jax-cuda12-pjrt 0.10.2's ``stream_executor::MemoryAllocationError`` calls it
  (read from the plugin's disassembly). ``xla_human_bytes`` reads that format back.
- ``GpuCommandBuffer::Finalize`` (xla/stream_executor/gpu/gpu_command_buffer.cc, openxla/xla
  b1a49b1291459293c102f4b30dbb1b47f59ddac2; the same format string is in jax-cuda12-pjrt 0.10.2):
  ``"Underlying backend ran out of memory trying to instantiate command buffer with %d (total of
  %d alive graphs in the process). You can try to ... Original error: %s"``, RESOURCE_EXHAUSTED,
  when the driver cannot instantiate a CUDA graph (``cuGraphInstantiate``: "Failed to instantiate
  CUDA graph: CUDA_ERROR_OUT_OF_MEMORY ...").
- ``LoadCubin`` (xla/stream_executor/cuda/cuda_executor.cc): ``"[0] Failed to load in-memory
  CUBIN (compiled for a different GPU?)."``, to which ``cuda::ToStatus``
  (xla/stream_executor/cuda/cuda_status.cc) adds ``": CUDA_ERROR_OUT_OF_MEMORY: out of memory"``
  and makes it RESOURCE_EXHAUSTED; older XLA (and TensorFlow) made it INTERNAL, without the
  device prefix or the question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jupyter_gpumem.core.units import parse_bytes

# JaxRuntimeError since jax 0.8 (module jax.errors); XlaRuntimeError before (jaxlib).
_RUNTIME_CLASS_NAMES = ("JaxRuntimeError", "XlaRuntimeError")


# A size as tsl::strings::HumanReadableNumBytes prints it: "1023B", "1.5KiB", "14.16GiB".
_HUMAN_SIZE = r"\d+B|\d+\.\d[KMGTPE]iB|\d+\.\d\d[KMGTPE]iB"
_HUMAN_UNITS = "KMGTPE"


@dataclass(frozen=True)
class XlaSize:
    """A size as XLA printed it, read back: ``lowest`` and ``highest``, the byte counts that XLA
    prints that way; ``printed``, the bytes the text says, rounded (``"14.16GiB"``:
    round(14.16 * 2**30)), or the nearest of those counts where the text says a count XLA would
    print otherwise (``"1024.00MiB"``)."""

    printed: int
    lowest: int
    highest: int


def read_xla_size(text: str) -> XlaSize | None:
    """``text`` (surrounding spaces allowed) read as ``tsl::strings::HumanReadableNumBytes``
    prints a count; None if ``text`` is not in XLA's format.

    That function (xla/tsl/platform/numbers.cc; the format string ``"%s%.*f%ciB"`` is in jaxlib
    0.10.2 and jax-cuda12-pjrt 0.10.2) prints a count under 1024 as ``"<n>B"``. Otherwise it
    divides by 1024, dropping the remainder, while the count is at least 1024 * 1024, one unit
    of K, M, G, T, P, E per division, then prints count / 1024 with one decimal for KiB and two
    for the others (printf rounds the exact binary value half to even, as Python's format
    does). So "14.16GiB" is any count of MiB ``m`` with ``format(m / 1024, ".2f") == "14.16"``,
    times 1 MiB, plus a remainder under 1 MiB.
    """
    match = re.fullmatch(r"(?P<whole>\d+)B|(?P<num>\d+\.(?P<dec>\d+))(?P<unit>[KMGTPE])iB", text.strip())
    if not match:
        return None
    if match.group("whole") is not None:
        count = int(match.group("whole"))
        return XlaSize(count, count, count) if count < 1024 else None
    unit, printed, decimals = match.group("unit"), match.group("num"), len(match.group("dec"))
    if decimals != (1 if unit == "K" else 2):
        return None
    step = 1024 ** _HUMAN_UNITS.index(unit)  # bytes per count left after the divisions
    centre = round(float(printed) * 1024)
    counts = [
        c
        for c in range(centre - 64, centre + 65)
        if 1024 <= c < 1024 * 1024 and format(c / 1024, f".{decimals}f") == printed
    ]
    if not counts:
        return None
    lowest, highest = counts[0] * step, (counts[-1] + 1) * step - 1
    # "1024.00MiB" says 1 GiB, which XLA would have printed "1.00GiB": the nearest count it stands for
    return XlaSize(min(max(round(float(printed) * 1024 * step), lowest), highest), lowest, highest)


def xla_human_bytes(text: str) -> tuple[int, int] | None:
    """The byte counts XLA could have printed as ``text``, as ``(lowest, highest)``
    (:func:`read_xla_size`); None if ``text`` is not in XLA's format."""
    size = read_xla_size(text)
    return None if size is None else (size.lowest, size.highest)


_HUMAN_SIZE_IN_TEXT = re.compile(r"(?<![\w.])(?:" + _HUMAN_SIZE + r")(?!\w)")


def xla_size_in(text: str) -> XlaSize | None:
    """The first size in ``text`` written as XLA writes it (:func:`read_xla_size`), or None."""
    for match in _HUMAN_SIZE_IN_TEXT.finditer(text):
        size = read_xla_size(match.group(0))
        if size is not None:
            return size
    return None


# (form, pattern). The size group is parsed with xla_human_bytes (else units.parse_bytes);
# "exact" wins over "size".
_FORMS: tuple[tuple[str, re.Pattern], ...] = (
    # platform / address allocator: "Failed to allocate request for 32.00MiB (33554432B) on device ordinal 0"
    (
        "platform",
        re.compile(
            r"Failed to allocate request for\s+(?P<size>[\d.]+\s*[KMGTP]?i?B)\s*\((?P<exact>\d+)\s*B\)"
            r"(?:\s+on device ordinal\s+(?P<ordinal>\d+))?",
            re.IGNORECASE,
        ),
    ),
    # GPU, a CUDA graph (XLA's command buffer) the driver had no memory to instantiate (no size):
    # "Underlying backend ran out of memory trying to instantiate command buffer with 35 (total of 2
    # alive graphs in the process). ..."
    (
        "command_buffer",
        re.compile(r"ran out of memory trying to instantiate command buffer", re.IGNORECASE),
    ),
    # GPU, pinned host memory (XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB): "Out of host memory while trying
    # to allocate 14.16GiB." (jax-cuda12-pjrt 0.10.2), "... 15200000000 bytes." before openxla/xla#33504
    (
        "host",
        re.compile(
            r"Out of host memory while trying to allocate\s+(?:(?P<exact>\d+)\s*bytes|(?P<size>" + _HUMAN_SIZE + r"))",
            re.IGNORECASE,
        ),
    ),
    # GPU, a compiled kernel's code could not be loaded for want of device memory (no size):
    # "[0] Failed to load in-memory CUBIN (compiled for a different GPU?).: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    (
        "cubin",
        re.compile(
            r"(?:\[(?P<ordinal>\d+)\]\s*)?Failed to load in-memory CUBIN[^\n]*?CUDA_ERROR_OUT_OF_MEMORY",
            re.IGNORECASE,
        ),
    ),
    # GPU, the vmm allocator's physical-memory budget (XLA's DeviceAddressVmmAllocator,
    # device_address_vmm_allocator.cc): "Not enough PA budget: pa_allocated=2097152B,
    # allocation_size=102626230272B, pa_budget=63763120128B" (recorded on JAX 0.11.2), or "Not
    # enough PA budget for allocation: pa_allocated=...B, rounded_size=...B, pa_budget=...B".
    # Both print the request rounded UP to the device's allocation granularity
    # (RoundUpToGranularity, or the physical size cuMemCreate gave), not the request itself.
    (
        "vmm",
        re.compile(
            r"Not enough PA budget[^\n]*?(?:allocation_size|rounded_size)=(?P<rounded>\d+)B",
            re.IGNORECASE,
        ),
    ),
    # GPU BFC, 0.4.30: "Out of memory while trying to allocate 7406166528 bytes."
    ("gpu_bytes", re.compile(r"Out of memory while trying to allocate\s+(?P<exact>\d+)\s*bytes", re.IGNORECASE)),
    # GPU BFC, current: "Out of memory while trying to allocate 21.88GiB." (rounded to 2 decimals);
    # JAX 0.11.2 adds the allocator and the device: "... 159.29GiB with allocator GPU_0_bfc on
    # device 0. [tf-allocator-allocation-error=''] [executable_name='jit_broadcast_in_dim']"
    (
        "gpu_human",
        re.compile(
            r"Out of memory while trying to allocate\s+(?P<size>" + _HUMAN_SIZE + r"|[\d.]+\s*[KMGTP]?i?B)\b",
            re.IGNORECASE,
        ),
    ),
    # CPU: "RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 bytes."
    ("cpu", re.compile(r"Out of memory allocating\s+(?P<exact>\d+)\s*bytes", re.IGNORECASE)),
)


_RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"


# "device ordinal 0" (the platform allocator's older text) or "on device 0" (JAX 0.11.2's texts)
_ORDINAL = re.compile(r"(?:device ordinal|on device)\s+(?P<ordinal>\d+)", re.IGNORECASE)

# "with allocator GPU_0_bfc" (JAX 0.11.2): the XLA allocator that refused, by its own name
_ALLOCATOR = re.compile(r"with allocator\s+(?P<name>[A-Za-z0-9_]+)")

# The compiler's autotuner (XLA's AutotunerUtil / GemmFusionAutotuner: "Failed to get configs for:
# N out of M instructions. See logs for all failures. Example failure: \n" + the first status),
# which keeps that status's code: an out-of-memory among its trials fails the compile.
_AUTOTUNE = re.compile(r"Failed to get configs for:|Failed to profile configs:|Autotuning failed", re.IGNORECASE)


def allocator_named(text: str) -> str | None:
    """The allocator an error text names ("GPU_0_bfc", "SE_0_space_0"), else None."""
    found = _ALLOCATOR.search(text) if isinstance(text, str) else None
    return found.group("name") if found else None


def allocator_words(name: str | None) -> str:
    """What an allocator's name means to a user, as recorded on JAX 0.11.2 (tests/data/oom_texts):
    BFC is ``GPU_<n>_bfc``, cuda_async ``gpu_async_<n>``; the platform and address allocators both
    raise as ``SE_<n>_space_<m>`` (XLA's StreamExecutor allocator for memory space m, no pool of
    JAX's own)."""
    if not name:
        return ""
    if re.fullmatch(r"GPU_\d+_bfc", name):
        return "JAX's BFC pool"
    if re.fullmatch(r"gpu_async_\d+", name):
        return "the CUDA driver's memory pool (cuda_async)"
    if re.fullmatch(r"SE_\d+_space_\d+", name):
        return "CUDA directly, without a pool (the platform or address allocator)"
    return ""


def while_autotuning(text: str) -> bool:
    """Whether the error came from the compiler's autotuner trying kernels, not from a buffer."""
    return isinstance(text, str) and bool(_AUTOTUNE.search(text))


@dataclass(frozen=True)
class OomError:
    """A recognised out-of-memory error.

    ``form``: "gpu_human", "gpu_bytes", "host" (GPU's pinned host memory pool), "cubin" (loading a
    compiled kernel onto a full device), "command_buffer" (instantiating a CUDA graph on a full
    device), "vmm" (the vmm allocator's physical budget), "platform", "cpu", or
    "resource_exhausted" (the status without a size we can read). ``requested_bytes`` is None
    where the text gives no size; ``exact`` is False where the size was printed rounded (human
    units); ``requested_range`` is then the lowest and highest byte count XLA prints that way
    (``xla_human_bytes``), and for an exact size the size twice. ``allocator``: the allocator the
    text names ("GPU_0_bfc"), else None; ``autotuning``: the compiler's autotuner ran out while
    it tried kernels (the size is one trial's scratch, not an array of the program).
    """

    form: str
    requested_bytes: int | None
    exact: bool
    ordinal: int | None
    class_name: str
    message: str
    requested_range: tuple[int, int] | None = field(default=None)
    allocator: str | None = None
    autotuning: bool = False

    def to_json(self) -> dict:
        return {
            "form": self.form,
            "allocator": self.allocator,
            "autotuning": self.autotuning,
            "requested_bytes": self.requested_bytes,
            "requested_range": list(self.requested_range) if self.requested_range else None,
            "exact": self.exact,
            "ordinal": self.ordinal,
            "class_name": self.class_name,
            "message": self.message,
        }


def parse_request(text: str) -> tuple[str, int | None, bool, int | None] | None:
    """``(form, requested_bytes, exact, ordinal)`` from an error text, or None if no form matches."""
    if not isinstance(text, str):
        return None
    for form, pattern in _FORMS:
        match = pattern.search(text)
        if not match:
            continue
        groups = match.groupdict()
        size: int | None = None
        exact = False
        if groups.get("exact"):
            size, exact = int(groups["exact"]), True
        elif groups.get("rounded"):
            size = int(groups["rounded"])  # the most it can be: rounded up to the granularity
        elif groups.get("size"):
            try:
                size = parse_bytes(groups["size"])  # it reads "21.88 GiB" as "21.88GiB"
            except ValueError:
                size = None
        ordinal = groups.get("ordinal")
        return form, size, exact, int(ordinal) if ordinal is not None else _named_ordinal(text)
    return None


def _named_ordinal(text: str) -> int | None:
    """The N of "device ordinal N" anywhere in ``text``, else None."""
    named = _ORDINAL.search(text)
    return int(named.group("ordinal")) if named else None


# The granularity vmm rounds a request up to, taken as CUDA's 2 MiB for device memory on the
# H100 the recorded texts came from (both sizes there are multiples of it); a device whose
# granularity is larger widens the range below.
VMM_GRANULARITY = 2 << 20


def requested_range(text: str) -> tuple[int, int] | None:
    """The lowest and highest request an error text can stand for: an exact size twice, a size
    in XLA's human units its rounding interval (``xla_human_bytes``); None without a size."""
    if not isinstance(text, str):
        return None
    for _form, pattern in _FORMS:
        match = pattern.search(text)
        if not match:
            continue
        groups = match.groupdict()
        if groups.get("exact"):
            return int(groups["exact"]), int(groups["exact"])
        if groups.get("rounded"):
            rounded = int(groups["rounded"])
            return max(1, rounded - VMM_GRANULARITY + 1), rounded
        if groups.get("size"):
            return xla_human_bytes(groups["size"].replace(" ", ""))
        return None
    return None


def _class_names(exc: BaseException) -> tuple[str, ...]:
    return tuple(cls.__name__ for cls in type(exc).__mro__)


def _from_text(text: str, class_name: str, jax_class: bool) -> OomError | None:
    """The ``OomError`` a text reads as: a message form, else RESOURCE_EXHAUSTED from a class of
    JAX's (``jax_class``); None for anything else."""
    parsed = parse_request(text)
    if parsed is not None:
        form, size, exact, ordinal = parsed
        size_range = requested_range(text)
    elif _RESOURCE_EXHAUSTED in text and jax_class:
        form, size, exact, ordinal, size_range = "resource_exhausted", None, False, _named_ordinal(text), None
    else:
        return None
    return OomError(
        form, size, exact, ordinal, class_name, text, size_range, allocator_named(text), while_autotuning(text)
    )


def recognise_text(text: str, class_name: str = "") -> OomError | None:
    """An ``OomError`` from a message text alone (for recorded texts and logs)."""
    return _from_text(text, class_name, not class_name or class_name in _RUNTIME_CLASS_NAMES)


def recognise(exc: BaseException | None) -> OomError | None:
    """The out-of-memory error in ``exc`` (or in what it was raised from), else None.

    Recognised by class (JAX's runtime error classes, any RuntimeError subclass) and text: an
    out-of-memory message form, or RESOURCE_EXHAUSTED on one of JAX's runtime error classes.
    MemoryError from Python itself is not JAX's and is left alone.
    """
    seen = 0
    while exc is not None and seen < 5:
        names = _class_names(exc)
        if "RuntimeError" in names:
            try:
                text = str(exc)
            except Exception:
                text = ""
            found = _from_text(text, type(exc).__name__, any(n in _RUNTIME_CLASS_NAMES for n in names))
            if found is not None:
                return found
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
