"""cuda_async's limits, said where the user looks: the notes of a %gpumem line and %gpumem status.

What XLA does, read from openxla/xla (the allocator JAX 0.10 and 0.11 build):

- xla/pjrt/gpu/se_gpu_pjrt_client.cc, ``CreateCudaAsyncAllocator``: the device's default pool
  (``create_new_pool`` false) with ``reserve_memory_size = reserve_memory ? allocator_memory : 0``.
- xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc: that size is the release threshold
  and ``bytes_limit``; the default pool gets no maximum size. ``SetStreamAndPreallocateMemory``:
  ``TF_CHECK_OK(tsl::ReadInt64FromEnvVar("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", 0, ...))`` in
  the source at openxla/xla 16569562; jax-cuda12-pjrt 0.10.2's plugin holds absl's CHECK_OK text
  for it (``tsl::ReadInt64FromEnvVar("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", 0, &prealloc_size) is OK``);
  ``-1`` takes the release threshold; ``reserve_memory`` takes it whatever the value; then
  ``AllocateRaw`` and ``DeallocateRaw`` at once.
- xla/tsl/util/env_var.cc, ``ReadInt64FromEnvVar``: ``strings::safe_strto64``, which is
  ``absl::SimpleAtoi`` (base 10, ASCII blanks around, a sign, int64's range).

So: the fraction is no cap (with preallocation on it is only the release threshold), the async-prealloc bytes go back at the next
synchronisation (release threshold 0), and a value XLA cannot read aborts the process.
"""

from __future__ import annotations

import os

import pytest

from jupyter_gpumem.core.readings import AllocatorSettings, NotAvailable
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.settings.apply import SettingsError, validate
from jupyter_gpumem.settings.cuda_async_limits import (
    async_prealloc_note,
    async_prealloc_problem,
    fraction_note,
    read_async_prealloc,
)
from jupyter_gpumem.settings.status import status
from jupyter_gpumem.sources import jax_backend, jax_options

pytestmark = pytest.mark.jax_versions

NO_NVML = NotAvailable("no_library", "synthetic: no NVML in this test")

_VARS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC",
    "TF_GPU_ALLOCATOR",
    "JAX_PJRT_CLIENT_CREATE_OPTIONS",
)

PREALLOC = "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    # No jax.config create options in these tests, whatever this process imported before.
    monkeypatch.setattr(jax_backend, "pjrt_create_options", lambda env=None: None)


def _warnings(monkeypatch, **env) -> tuple[str, ...]:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    return status(NO_NVML).warnings


CUDA_ASYNC_OFF = {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


# --- the variable, read as XLA reads it -------------------------------------------------------


@pytest.mark.parametrize(
    "raw, read",
    [
        ("2147483648", 2147483648),
        (" 42\t", 42),  # absl::SimpleAtoi strips ASCII blanks
        ("+7", 7),
        ("-1", -1),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),  # past int64
        ("2GiB", None),
        ("1_000", None),  # Python's int() takes it; XLA does not
        ("1e9", None),
        ("0x10", None),
        ("", None),
        ("\u0663", None),  # an Arabic-Indic three: a digit to Python, not to absl
    ],
)
def test_async_prealloc_is_read_as_xla_reads_it(raw, read):
    assert read_async_prealloc(raw) == read


@pytest.mark.parametrize("allocator", ["cuda_async", "bfc"])
@pytest.mark.parametrize("raw", ["2GiB", "1_000", ""])
def test_status_flags_an_async_prealloc_xla_cannot_read_before_jax_starts(monkeypatch, allocator, raw):
    warnings = _warnings(monkeypatch, XLA_PYTHON_CLIENT_ALLOCATOR=allocator, **{PREALLOC: raw})
    assert jax_backend.backend_started() is False
    flagged = [w for w in warnings if w.startswith(f"{PREALLOC}={raw!r}")]
    assert len(flagged) == 1 and "aborts the process" in flagged[0] and "inside a CHECK_OK" in flagged[0]


def test_status_shows_an_unreadable_async_prealloc_as_it_was_written(monkeypatch):
    monkeypatch.setenv(PREALLOC, "1_000")
    row = next(s for s in status(NO_NVML).settings if s.name == "async_prealloc")
    assert (row.value, row.shown) == ("1_000", "1_000")


def test_cuda_async_with_an_unreadable_async_prealloc_is_refused(monkeypatch):
    monkeypatch.setenv(PREALLOC, "2GiB")
    with pytest.raises(SettingsError, match="aborts the process") as err:
        validate(AllocatorSettings(allocator="cuda_async"))
    assert "Nothing was changed" in str(err.value)


def test_a_line_that_also_fixes_the_async_prealloc_is_accepted(monkeypatch):
    monkeypatch.setenv(PREALLOC, "2GiB")
    plan = validate(AllocatorSettings(allocator="cuda_async", async_prealloc=0))
    assert plan.env[PREALLOC] == "0"


# --- the fraction ------------------------------------------------------------------------------


def test_status_says_the_fraction_is_no_cap_under_cuda_async_with_preallocation_off(monkeypatch):
    warnings = _warnings(monkeypatch, **{jax_options.fraction_var(): ".4"}, **CUDA_ASYNC_OFF)
    assert [w for w in warnings if "fraction (0.4) is no cap" in w and "no size limit" in w]


def test_jax_s_default_fraction_under_cuda_async_gives_no_warning(monkeypatch):
    assert _warnings(monkeypatch, **CUDA_ASYNC_OFF) == ()


def test_the_fraction_with_preallocation_on_is_no_cap_either(monkeypatch):
    """With preallocation on, XLA makes total × fraction the default pool's release threshold and
    nothing more: ``cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ...)`` is the
    only attribute the ``GpuCudaMallocAsyncAllocator`` constructor sets on the pool it takes with
    ``cuDeviceGetDefaultMemPool`` (openxla/xla xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc,
    commit 16569562fc04a1d1eadcd6a79f2269c1ccf4c421), and a default pool has no maximum size."""
    warnings = _warnings(monkeypatch, **{jax_options.fraction_var(): ".4"}, XLA_PYTHON_CLIENT_ALLOCATOR="cuda_async")
    said = [w for w in warnings if "fraction (0.4) is no cap, even with preallocation on" in w]
    assert len(said) == 1 and "release threshold" in said[0] and "no size limit" in said[0]


def test_a_fraction_line_under_cuda_async_with_preallocation_on_notes_it_is_no_cap():
    notes = validate(AllocatorSettings(fraction=0.4, allocator="cuda_async", preallocate=True)).notes
    assert [n for n in notes if n.startswith("note: ") and "fraction (0.4) is no cap, even with preallocation on" in n]


def test_a_fraction_line_under_cuda_async_notes_it_is_no_cap():
    notes = validate(AllocatorSettings(fraction=0.4, allocator="cuda_async", preallocate=False)).notes
    assert [n for n in notes if n.startswith("note: ") and "fraction (0.4) is no cap" in n]


def test_turning_preallocation_off_under_cuda_async_with_a_fraction_notes_it_is_no_cap(monkeypatch):
    monkeypatch.setenv(jax_options.fraction_var(), "0.5")  # the name the installed JAX reads
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    notes = validate(AllocatorSettings(preallocate=False)).notes
    assert [n for n in notes if "fraction (0.5) is no cap" in n]


# --- async-prealloc ----------------------------------------------------------------------------


def test_status_says_async_prealloc_is_handed_back_with_preallocation_off(monkeypatch):
    warnings = _warnings(monkeypatch, **CUDA_ASYNC_OFF, **{PREALLOC: str(2 << 30)})
    said = [w for w in warnings if w.startswith("async-prealloc (2.00 GiB) is not kept")]
    assert len(said) == 1 and "release threshold is 0" in said[0] and "next synchronisation" in said[0]


def test_status_says_async_prealloc_all_reserves_nothing_with_preallocation_off(monkeypatch):
    warnings = _warnings(monkeypatch, **CUDA_ASYNC_OFF, **{PREALLOC: "-1"})
    assert [w for w in warnings if w.startswith("async-prealloc all reserves nothing")]


def test_status_says_async_prealloc_changes_nothing_with_preallocation_on(monkeypatch):
    warnings = _warnings(monkeypatch, XLA_PYTHON_CLIENT_ALLOCATOR="cuda_async", **{PREALLOC: str(1 << 30)})
    assert [w for w in warnings if w.startswith("async-prealloc (1.00 GiB) changes nothing while preallocation is on")]


def test_async_prealloc_zero_says_nothing(monkeypatch):
    assert _warnings(monkeypatch, **CUDA_ASYNC_OFF, **{PREALLOC: "0"}) == ()


def test_an_async_prealloc_line_notes_it_is_not_kept_instead_of_promising_a_reserve(monkeypatch):
    for var, value in CUDA_ASYNC_OFF.items():
        monkeypatch.setenv(var, value)
    notes = validate(AllocatorSettings(async_prealloc=2 << 30)).notes
    assert notes == (
        "note: async-prealloc (2.00 GiB) is not kept: with preallocation off the pool's release threshold "
        "is 0, so the bytes cuda_async allocates and frees at start go back to the driver at the next "
        "synchronisation.",
    )


def test_async_prealloc_without_cuda_async_still_says_only_cuda_async_reads_it(monkeypatch):
    warnings = _warnings(monkeypatch, **{PREALLOC: "1024"})
    assert warnings == (f"{PREALLOC} is set but is read only by the cuda_async allocator.",)


def test_applying_does_not_write_an_unreadable_value(monkeypatch):
    monkeypatch.setenv(PREALLOC, "2GiB")
    with pytest.raises(SettingsError):
        allocator_shim.apply_settings(AllocatorSettings(allocator="cuda_async", preallocate=False))
    assert "XLA_PYTHON_CLIENT_ALLOCATOR" not in os.environ and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


# --- the sentences, whole (pure functions of the value) ---------------------------------------


@pytest.mark.parametrize(
    "raw, value",
    [
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775809", None),
        ("9223372036854775808", None),
    ],
)
def test_async_prealloc_is_read_within_int64_inclusive(raw, value):
    assert read_async_prealloc(raw) == value


def test_an_unreadable_async_prealloc_is_said_to_kill_the_kernel():
    assert async_prealloc_problem("2GiB") == (
        "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC='2GiB' is not a whole number of bytes. XLA's cuda_async "
        "allocator reads it inside a CHECK_OK when JAX's backend starts, and a value it cannot read aborts "
        "the process: the kernel dies. Use `%gpumem async-prealloc SIZE` (bytes, 512MiB, all) or unset it."
    )


@pytest.mark.parametrize("raw", ["-2", "-1", "0"])
def test_below_minus_one_async_prealloc_is_a_problem_and_minus_one_is_not(raw):
    problem = async_prealloc_problem(raw)
    if raw == "-2":
        assert problem == (
            "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC='-2' is negative: cuda_async would try to allocate that "
            "many bytes as an unsigned size, fail and log an error. Use a size in bytes, or -1 (all)."
        )
    else:
        assert problem is None


def test_the_fraction_note_says_it_is_no_cap():
    assert fraction_note(0.5, preallocate=False) == (
        "under cuda_async with preallocation off, the fraction (0.5) is no cap: XLA reserves no pool, and "
        "the CUDA driver's default pool that cuda_async allocates from has no size limit, so JAX can take "
        "all of the GPU's free memory."
    )


def test_the_fraction_note_with_preallocation_on_says_it_is_only_the_release_threshold():
    assert fraction_note(0.75, preallocate=True) == (
        "under cuda_async the fraction (0.75) is no cap, even with preallocation on: XLA makes it the "
        "release threshold of the CUDA driver's default pool (what the pool keeps), and reserves that "
        "much at start, but the pool has no size limit, so JAX can grow past it into all of the GPU's "
        "free memory."
    )


@pytest.mark.parametrize(
    "value, preallocate, note",
    [
        (0, False, None),
        (-2, False, None),
        (
            -1,
            True,
            "async-prealloc (all) changes nothing while preallocation is on: cuda_async reserves its "
            "whole pool (total × fraction) and keeps it.",
        ),
        (
            2 * 1024**3,
            True,
            "async-prealloc (2.00 GiB) changes nothing while preallocation is on: cuda_async "
            "reserves its whole pool (total × fraction) and keeps it.",
        ),
        (
            -1,
            False,
            "async-prealloc all reserves nothing with preallocation off: `all` means the pool's release "
            "threshold, which is 0 then.",
        ),
        (
            1,
            False,
            "async-prealloc (1 B) is not kept: with preallocation off the pool's release threshold is 0, "
            "so the bytes cuda_async allocates and frees at start go back to the driver at the next "
            "synchronisation.",
        ),
    ],
)
def test_the_async_prealloc_note_for_each_case(value, preallocate, note):
    assert async_prealloc_note(value, preallocate) == note
