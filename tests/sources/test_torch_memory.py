"""PyTorch's caching allocator beside JAX: read only where torch is imported and has started
CUDA, and split out of the monitor's "this process, outside JAX" band.

The stand-in ``torch`` keeps what the reader uses, as torch/cuda/memory.py has it:
``torch.cuda.is_initialized()``; ``memory_stats(device)`` flattening the allocator's nested stats
into ``reserved_bytes.all.current`` and ``allocated_bytes.all.current`` (and answering ``{}``
before CUDA is initialised); ``device_count()``. PyTorch is not installed here.
"""

from __future__ import annotations

import dataclasses
import sys
import types

from jupyter_gpumem.core.readings import NotAvailable, TorchDeviceReading
from jupyter_gpumem.monitor.series import BANDS, series_values
from jupyter_gpumem.sources.torch_memory import read_torch

from doubles import bfc_sample

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
        return {
            "reserved_bytes.all.current": reserved,
            "allocated_bytes.all.current": allocated,
            "reserved_bytes.all.peak": reserved,
            "num_alloc_retries": 0,
        }

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


def with_torch(torch) -> object:
    """bfc_sample with JAX's GPU named as CUDA device 0, and ``torch`` as its PyTorch reading."""
    sample = bfc_sample()
    jax = tuple(dataclasses.replace(j, cuda_ordinal=0) for j in sample.jax)
    return dataclasses.replace(sample, jax=jax, torch=torch)


def test_the_band_outside_jax_splits_out_pytorchs_allocator():
    """bfc_sample: this process 20 GiB on GPU 0, JAX's pool 16 GiB; PyTorch reserves 3 GiB with
    2 GiB in tensors: outside JAX 20 - 16 - 3 = 1 GiB, PyTorch tensors 2, its cache 3 - 2 = 1."""
    v = series_values(with_torch((TorchDeviceReading(0, 3 * GiB, 2 * GiB),)), 0)
    assert (v["outside_jax"], v["torch_allocated"], v["torch_cached"]) == (1 * GiB, 2 * GiB, 1 * GiB)
    assert sum(v[b] or 0 for b in BANDS) == 80 * GiB


def test_without_a_reading_the_band_is_as_before():
    for torch in ((), NotAvailable("error", "reading PyTorch's CUDA allocator failed")):
        v = series_values(with_torch(torch), 0)
        assert (v["outside_jax"], v["torch_allocated"], v["torch_cached"]) == (4 * GiB, None, None)


def test_pytorch_with_its_whole_cache_in_tensors_and_all_bytes_outside_jax_leaves_zero_in_both_bands():
    """bfc_sample: 20 - 16 = 4 GiB outside JAX; PyTorch reserves those 4 GiB, all in tensors."""
    v = series_values(with_torch((TorchDeviceReading(0, 4 * GiB, 4 * GiB),)), 0)
    assert (v["outside_jax"], v["torch_allocated"], v["torch_cached"]) == (0, 4 * GiB, 0)


def test_pytorch_on_another_device_than_jax_is_not_subtracted():
    v = series_values(with_torch((TorchDeviceReading(1, 3 * GiB, 2 * GiB),)), 0)
    assert (v["outside_jax"], v["torch_allocated"]) == (4 * GiB, None)


def test_without_jax_on_the_gpu_pytorch_is_not_placed():
    """JAX's reading names the CUDA device; without it (bfc_sample gives none) nothing is split."""
    v = series_values(dataclasses.replace(bfc_sample(), torch=(TorchDeviceReading(0, 3 * GiB, 2 * GiB),)), 0)
    assert (v["outside_jax"], v["torch_allocated"]) == (4 * GiB, None)
