"""Which NVML GPU is each CUDA device? The join on UUID, PCI bus id or CUDA_VISIBLE_DEVICES.

Pure: the CUDA side comes from ``libcuda`` (``CudaDeviceIdentity``), the NVML side from
``nvml`` (``GpuIdentity``), and ``match_nvml`` joins them. The ordinal is never trusted alone:
CUDA numbers devices fastest first by default (``CUDA_DEVICE_ORDER=FASTEST_FIRST``), NVML by
PCI bus id, and NVML's docs say its index "may not correlate with other APIs, such as the CUDA
device index" (nvml.h, nvmlDeviceGetHandleByIndex). When no join holds, the answer says why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CudaDeviceIdentity",
    "GpuIdentity",
    "NvmlMatch",
    "match_nvml",
    "normalise_pci_bus_id",
    "uuid_hex",
    "visible_devices",
]


@dataclass(frozen=True)
class CudaDeviceIdentity:
    """What the CUDA driver says one device (a CUDA ordinal in this process) is.

    ``uuid_hex``: the 32 hex digits of ``cuDeviceGetUuid_v2``, which for a MIG instance are the
    instance's own UUID, not its GPU's. ``pci_bus_id``: from ``cuDeviceGetPCIBusId``, in
    ``normalise_pci_bus_id``'s form. Either is None where the driver did not say (``why``).
    """

    uuid_hex: str | None
    pci_bus_id: str | None
    why: str = ""


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU as NVML lists it: its index, ``nvmlDeviceGetUUID`` ("GPU-8-4-4-4-12") and the
    ``busId`` of ``nvmlDeviceGetPciInfo`` (None where NVML did not say)."""

    index: int
    uuid: str
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class NvmlMatch:
    """The NVML GPU a CUDA device is, and how that was found (``how``), or why it is not known
    (``nvml_index`` None, ``why_not`` a sentence)."""

    nvml_index: int | None
    how: str = ""
    why_not: str | None = None


_HEX32 = re.compile(r"[0-9a-f]{32}")
_PCI = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def uuid_hex(text: str | bytes | None) -> str | None:
    """The 32 lowercase hex digits of a UUID written as NVML or CUDA_VISIBLE_DEVICES write it
    ("GPU-5a1e0000-0000-4000-8000-000000000000", "MIG-..."), or None if it is not one."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not isinstance(text, str):
        return None
    digits = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if digits.startswith(prefix):
            digits = digits[len(prefix) :]
    digits = digits.replace("-", "")
    return digits if _HEX32.fullmatch(digits) else None


def normalise_pci_bus_id(text: str | bytes | None) -> str | None:
    """A PCI bus id as ``"dddddddd:bb:dd.f"`` (lowercase), from NVML's ``"00000000:3B:00.0"`` or
    CUDA's ``"0000:3b:00.0"``; None if it is not one."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not isinstance(text, str):
        return None
    found = _PCI.match(text.strip().rstrip("\0"))
    if not found:
        return None
    domain, bus, device, function = found.groups()
    return f"{int(domain or '0', 16):08x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function)}"


def visible_devices(raw: str | None) -> tuple[str, ...] | None:
    """CUDA_VISIBLE_DEVICES as its entries (ints, "GPU-..." UUIDs or prefixes, "MIG-..."), in
    the order CUDA numbers them; None when it is not set."""
    if raw is None:
        return None
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _by_uuid(hex_digits: str, gpus: Sequence[GpuIdentity], *, prefix: bool = False) -> list[GpuIdentity]:
    found = []
    for gpu in gpus:
        theirs = uuid_hex(gpu.uuid)
        if theirs is not None and (theirs.startswith(hex_digits) if prefix else theirs == hex_digits):
            found.append(gpu)
    return found


def _by_pci(bus_id: str, gpus: Sequence[GpuIdentity]) -> list[GpuIdentity]:
    return [gpu for gpu in gpus if gpu.pci_bus_id is not None and normalise_pci_bus_id(gpu.pci_bus_id) == bus_id]


def match_nvml(
    ordinal: int,
    cuda: CudaDeviceIdentity | None,
    gpus: Sequence[GpuIdentity] | None,
    visible: tuple[str, ...] | None = None,
    device_order: str | None = None,
    nvml_problem: str = "",
) -> NvmlMatch:
    """The NVML GPU that CUDA device ``ordinal`` (JAX's ``local_hardware_id``) is.

    Tried in turn: the CUDA driver's UUID against NVML's; its PCI bus id against NVML's (a
    device whose UUID NVML does not list but whose bus it does is a MIG instance: not joined,
    since NVML's figures are the whole card's); the ``visible`` entry (CUDA_VISIBLE_DEVICES) for
    the ordinal when it is a UUID; and the ordinal itself only where CUDA's order is NVML's
    (``device_order`` "PCI_BUS_ID"), or NVML lists a single GPU. ``gpus`` None means NVML could
    not be read (``nvml_problem`` says why).
    """
    gpus_known: Sequence[GpuIdentity] = () if gpus is None else gpus
    where = f"CUDA device {ordinal}"
    if cuda is not None and gpus is not None and (cuda.uuid_hex or cuda.pci_bus_id):
        return _match_by_driver(where, cuda, gpus_known)
    entry = None
    if visible is not None:
        if ordinal >= len(visible):
            return NvmlMatch(None, why_not=f"{where} is not among CUDA_VISIBLE_DEVICES ({','.join(visible)})")
        entry = visible[ordinal]
    lowered = (entry or "").lower()
    if lowered.startswith("mig-"):
        return NvmlMatch(
            None,
            why_not=(
                f"{where} is the MIG instance {entry} (CUDA_VISIBLE_DEVICES); NVML's figures are the whole card's"
            ),
        )
    if lowered.startswith("gpu-"):
        return _match_visible_uuid(where, entry or "", gpus, nvml_problem)
    position = ordinal
    if entry is not None:
        if not entry.isdigit():
            return NvmlMatch(
                None, why_not=f"CUDA_VISIBLE_DEVICES entry {entry!r} for {where} is neither an index nor a UUID"
            )
        position = int(entry)
    if (device_order or "").strip().upper() == "PCI_BUS_ID":
        if gpus is not None and position >= len(gpus_known):
            return NvmlMatch(None, why_not=f"{where} is PCI-ordered GPU {position}, but NVML lists {len(gpus_known)}")
        return NvmlMatch(position, "pci_order")
    if gpus is not None and len(gpus_known) == 1 and position == 0:
        return NvmlMatch(gpus_known[0].index, "single_gpu")
    if gpus is None:
        return NvmlMatch(None, why_not=f"NVML cannot be read: {nvml_problem or 'unknown'}")
    return NvmlMatch(
        None,
        why_not=(
            f"the CUDA driver gave no UUID or PCI bus id for {where}, and CUDA numbers GPUs fastest first while "
            "NVML numbers them by PCI bus, so its place cannot be told (CUDA_DEVICE_ORDER=PCI_BUS_ID makes the "
            "two orders agree)"
        ),
    )


def _match_by_driver(where: str, cuda: CudaDeviceIdentity, gpus: Sequence[GpuIdentity]) -> NvmlMatch:
    """The join by the CUDA driver's UUID, then its PCI bus id (a MIG instance is not joined)."""
    if cuda.uuid_hex:
        same = _by_uuid(cuda.uuid_hex, gpus)
        if len(same) == 1:
            return NvmlMatch(same[0].index, "uuid")
    on_bus = _by_pci(cuda.pci_bus_id, gpus) if cuda.pci_bus_id else []
    if len(on_bus) == 1:
        if not cuda.uuid_hex:
            return NvmlMatch(on_bus[0].index, "pci_bus_id")
        return NvmlMatch(
            None,
            why_not=(
                f"{where} is on the PCI bus of NVML GPU {on_bus[0].index}, but its UUID is not that GPU's: it "
                "is a MIG instance, and NVML's figures for the GPU are the whole card's"
            ),
        )
    return NvmlMatch(
        None,
        why_not=(
            f"{where} (UUID {cuda.uuid_hex or '?'}, PCI bus {cuda.pci_bus_id or '?'}) is none of the "
            f"{len(gpus)} GPUs NVML lists"
        ),
    )


def _match_visible_uuid(where: str, entry: str, gpus: Sequence[GpuIdentity] | None, nvml_problem: str) -> NvmlMatch:
    """The join by a ``GPU-...`` UUID (or its prefix) in CUDA_VISIBLE_DEVICES."""
    if gpus is None:
        return NvmlMatch(None, why_not=f"NVML cannot be read to find {entry}: {nvml_problem or 'unknown'}")
    digits = entry.lower()[4:].replace("-", "")
    same = _by_uuid(digits, gpus, prefix=True) if re.fullmatch(r"[0-9a-f]+", digits or "-") else []
    if len(same) == 1:
        return NvmlMatch(same[0].index, "cuda_visible_devices")
    return NvmlMatch(
        None,
        why_not=(
            f"CUDA_VISIBLE_DEVICES names {where} {entry}, which is "
            + ("more than one" if same else "none")
            + " of the GPUs NVML lists"
        ),
    )
