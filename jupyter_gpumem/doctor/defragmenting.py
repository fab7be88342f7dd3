"""Move a pytree through the host so the allocator can place it afresh: ``defragment(tree)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.readings import (
    AllocatorStats,
)
from jupyter_gpumem.doctor.names import names_by_array, user_namespace
from jupyter_gpumem.doctor.report import DeviceState, device_state
from jupyter_gpumem.doctor.text import TextReport, bytes_or_na, pretty_as_text
from jupyter_gpumem.doctor.usage import jax_device_readings
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.sources import jax_arrays


@dataclass(frozen=True)
class DefragSummary(TextReport):
    """Before and after moving a pytree through the host."""

    _repr_pretty_ = pretty_as_text

    arrays_moved: int
    bytes_moved: int
    before: tuple[DeviceState, ...]
    after: tuple[DeviceState, ...]
    other_names: tuple[str, ...]  # user-namespace names that referred to the moved arrays
    note: str

    def lines(self) -> list[str]:
        out = [f"defragment: moved {self.arrays_moved} arrays ({bytes_or_na(self.bytes_moved)}) through the host."]
        for b, a in zip(self.before, self.after):
            if b.note:
                out.append(f"  {b.label}: {b.note}")
                continue
            if b.driver_pool:
                out.append(
                    f"  {b.label}: pool {bytes_or_na(b.pool)} -> {bytes_or_na(a.pool)}; cuda_async's driver pool reports no "
                    "largest free block, so fragmentation is not measured"
                )
                continue
            fb = "n/a" if b.fragmentation is None else f"{b.fragmentation:.0%}"
            fa = "n/a" if a.fragmentation is None else f"{a.fragmentation:.0%}"
            out.append(
                f"  {b.label}: fragmentation {fb} -> {fa}; largest free block {bytes_or_na(b.largest_free)} -> {bytes_or_na(a.largest_free)}"
            )
        if self.other_names:
            out.append(
                "  These names held the moved arrays and now hold deleted ones: "
                + ", ".join(self.other_names)
                + ". Rebind any that is not the tree you rebound to the result."
            )
        if self.note:
            out.append("  " + self.note)
        return out


def defragment(tree: Any, shell: Any = None) -> tuple[Any, DefragSummary]:
    """Move ``tree``'s arrays to the host, free their device buffers, and put them back, so
    the BFC allocator can place them together: ``params, summary = defragment(params)``.

    What it cannot do: memory held by arrays outside ``tree`` stays where it is, and frees
    nothing that other references keep. The old arrays are deleted: any other name that
    referred to them (listed in the summary) now holds a deleted array and must be rebound.
    It needs host memory for the whole tree. Regions of a pool grown with preallocation off
    never coalesce, so the largest free block cannot exceed a region.
    """
    if not allocator_shim.backend_started():
        raise ValueError("defragment: JAX's backend has not started, so nothing is on a device yet")
    keys = set(names_by_array({"tree": tree}).names)
    namespace = user_namespace(shell)
    holders = names_by_array(namespace).names if namespace else {}
    other = sorted({n for k in keys for n in holders.get(k, ())})
    before = tuple(device_state(r) for r in jax_device_readings())
    new_tree, moved, nbytes = jax_arrays.host_round_trip(tree)
    after = tuple(device_state(r) for r in jax_device_readings())
    note = ""
    if not any(isinstance(r.stats, AllocatorStats) for r in jax_device_readings()):
        note = (
            "No allocator statistics here (CPU): fragmentation cannot be measured; the arrays were moved all the same."
        )
    return new_tree, DefragSummary(moved, nbytes, before, after, tuple(other), note)
