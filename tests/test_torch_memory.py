"""PyTorch's caching allocator beside JAX: read only where torch is imported and has started
CUDA, and split out of the monitor's "this process, outside JAX" band.

The stand-in ``torch`` keeps what the reader uses, as torch/cuda/memory.py has it:
``torch.cuda.is_initialized()``; ``memory_stats(device)`` flattening the allocator's nested stats
into ``reserved_bytes.all.current`` and ``allocated_bytes.all.current`` (and answering ``{}``
before CUDA is initialised); ``device_count()``. PyTorch is not installed here.
"""

from __future__ import annotations

import sys
import types

from jupyter_gpumem.model import TorchDeviceReading
from jupyter_gpumem.sources.torch_memory import read_torch

GiB = 1 << 30


def stand_in_torch(initialised: bool, per_device: list[tuple[int, int]]) -> tuple[types.ModuleType, list]:
    """A ``torch`` whose CUDA allocator holds ``(reserved, allocated)`` per device; the list
    records every memory_stats call."""
    calls: list = []
    cuda = types.SimpleNamespace()
    cuda.is_initialized = lambda: initialised
    cuda.device_count = lambda: len(per_device)

    def memory_stats(device=None):
        calls.append(device)
        if not initialised:
            return {}
        reserved, allocated = per_device[device]
        return {"reserved_bytes.all.current": reserved, "allocated_bytes.all.current": allocated,
                "reserved_bytes.all.peak": reserved, "num_alloc_retries": 0}

    cuda.memory_stats = memory_stats
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    return torch, calls


def test_without_torch_imported_nothing_is_read(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert read_torch() == ()


def test_torch_that_has_not_started_cuda_is_not_asked(monkeypatch):
    torch, calls = stand_in_torch(False, [(GiB, GiB)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert read_torch() == () and calls == []


def test_each_device_gives_reserved_and_allocated(monkeypatch):
    torch, calls = stand_in_torch(True, [(3 * GiB, 2 * GiB), (0, 0)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert read_torch() == (TorchDeviceReading(0, 3 * GiB, 2 * GiB), TorchDeviceReading(1, 0, 0))
    assert calls == [0, 1]
