"""Check, on a GPU, each fact that shared/reference/jax-memory-facts.md (and the docs) mark unverified.

    python bench/gpu_proof_facts.py --out DIR [--only NAME ...] [--timeout S]

Each probe is a short script run in a fresh interpreter with its own environment (JAX reads its
settings once per process). It prints its observations as one JSON line; each of the probe's
checks turns them into what was seen and a verdict: "holds", "does not hold", or "no reading"
(the probe crashed, timed out, or lacked the number). Writes ``facts.json`` and ``facts.md``
under DIR, prints the table, and exits 0 only when every fact holds.

The helpers the probes use are in ``bench/gpu_proof_jobs/_gpu.py``. Error texts the probes
provoke are kept whole under ``$GPU_PROOF_TEXTS`` when it is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS_DIR = os.path.join(HERE, "gpu_proof_jobs")
RESULT_PREFIX = "GPU_PROOF_RESULT "
GiB = 1 << 30
MiB = 1 << 20
FACTS_PAGE = "shared/reference/jax-memory-facts.md"

HOLDS, FAILS, NO_READING = "holds", "does not hold", "no reading"

# Variables that choose JAX's allocator: cleared before each probe sets its own.
_CLEARED_PREFIXES = ("XLA_", "TF_CUDA", "TF_GPU", "TF_FORCE", "JAX_PJRT", "JAX_PLATFORMS")

_PRELUDE = f"import os, sys\nsys.path.insert(0, {JOBS_DIR!r})\nfrom _gpu import *\n"


@dataclass(frozen=True)
class Check:
    """One fact: the page's words, where it says so, what a GPU should show, and the judge that
    turns a probe's observations into ``(seen, holds)``."""

    fact: str
    source: str
    expected: str
    judge: Callable[[Mapping[str, Any]], tuple[str, bool]]


@dataclass(frozen=True)
class Probe:
    name: str
    env: Mapping[str, str]
    code: str
    checks: tuple[Check, ...]
    expect_exit: bool = True  # False: the process is meant to die (its checks read _rc)
    cpu_is_an_answer: bool = False  # True: running on the CPU is what the fact is about


@dataclass
class Row:
    probe: str
    fact: str
    source: str
    expected: str
    seen: str
    verdict: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# --- small pure helpers the judges share ---------------------------------------------------


def share(part: Any, whole: Any) -> float:
    return float(part) / float(whole)


def gib(n: Any) -> str:
    return f"{float(n) / GiB:.2f} GiB"


def between(value: float, low: float, high: float) -> bool:
    return low <= value <= high


def human_oom_size(text: str | None) -> str | None:
    """The human size in XLA's "Out of memory while trying to allocate 21.88GiB." (or None); JAX
    0.11.2 follows the size with " with allocator GPU_0_bfc on device 0." (seen on an H100)."""
    found = re.search(
        r"Out of memory while trying to allocate (\d+(?:\.\d+)?(?:B|KiB|MiB|GiB|TiB))(?:\.| with allocator )",
        text or "",
    )
    return found.group(1) if found else None


def first_line(text: str | None, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:limit]


# --- the probes ------------------------------------------------------------------------------

_CUDA_ASYNC_GROWING = """
first_op()
s0 = stats()
a = hold(4_000_004)  # 1,000,001 float32: not a multiple of 256
s1 = stats()
b = hold(GiB)
s2 = stats()
from jupyter_gpumem.sources.libcuda import read_default_pool
pool = read_default_pool(device().local_hardware_id)
emit(s0=s0, s1=s1, s2=s2, requested=a.nbytes, total=nvml_memory()["total"],
     pool_used=getattr(pool, "used_bytes", None), pool_reserved=getattr(pool, "reserved_bytes", None), pool=repr(pool))
"""

_CUDA_ASYNC_PREALLOCATED = """
first_op()
from jupyter_gpumem.sources.libcuda import read_default_pool
pool = read_default_pool(device().local_hardware_id)
emit(s=stats(), total=nvml_memory()["total"], pool_reserved=getattr(pool, "reserved_bytes", None), pool=repr(pool))
"""

_CUDA_ASYNC_NO_CAP = """
first_op()
total = nvml_memory()["total"]
kept = []
text = error_text(lambda: kept.append(hold(int(0.2 * total))))
save_text("cuda_async_past_fraction", text)
emit(total=total, held=sum(k.nbytes for k in kept), error=text, s=stats())
"""

_STATS_AND_OOM = """
first_op()
s = stats()
total = nvml_memory()["total"]
text = error_text(lambda: hold(int(1.2 * total)))
save_text({name!r}, text)
emit(stats_is_none=s is None, s=s, platform=device().platform, error=text)
"""

_CREATE_OPTIONS = """
import jax
jax.config.update("jax_pjrt_client_create_options", {"memory_fraction": 0.5, "preallocate": False})
first_op()
n = nvml_memory()
emit(s=stats(), total=n["total"], mine=n["mine"], platform=device().platform)
"""

_BFC_GROWING = """
first_op()
s0 = stats()
total = nvml_memory()["total"]
a = hold(GiB)
s1 = stats()
b = hold(3 * GiB)
s2 = stats()
a.delete()
s3 = stats()
text = error_text(lambda: hold(2 * total))
save_text("bfc_oom_array", text)
emit(s0=s0, s1=s1, s2=s2, s3=s3, total=total, error=text)
"""

_SHARE_AFTER_FIRST_OP = """
first_op()
n = nvml_memory()
emit(mine=n["mine"], total=n["total"], platform=device().platform, s=stats())
"""

_ENV_AFTER_IMPORT = """
import jax
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
first_op()
n = nvml_memory()
emit(mine=n["mine"], total=n["total"], platform=device().platform)
"""

_PLATFORM_OR_ERROR = """
from importlib import metadata
plugins = [d.metadata["Name"] for d in metadata.distributions() if (d.metadata["Name"] or "").startswith("jax-cuda")]
text = error_text(first_op)
import jax
from jax._src import xla_bridge
emit(error=text, platform=None if text else device().platform, cuda_plugins=plugins,
     backend_errors={k: str(v)[:300] for k, v in getattr(xla_bridge, "_backend_errors", {}).items()})
"""

_JIT_OOM = """
import math, jax, jax.numpy as jnp
first_op()
total = nvml_memory()["total"]
n = int(math.sqrt(1.5 * total / 4))
x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
program = jax.jit(lambda v: jnp.sort(v[:, None] * v[None, :], axis=0)[0])
temp = None
phase = "compile"
def go():
    global temp, phase
    compiled = program.lower(x).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    phase = "run"
    compiled(x).block_until_ready()
text = error_text(go)
save_text("jit_oom_" + phase, text)
emit(n=n, product_bytes=n * n * 4, temp=temp, phase=phase, error=text, total=total)
"""

_LATE_FRACTION = """
from jupyter_gpumem.sources import jax_start
jax_start.watch()  # as %load_ext does before the first JAX operation in a kernel
first_op()
os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.3"  # after JAX started: changes nothing
import jupyter_gpumem
report = jupyter_gpumem.status()
fraction = next(x for x in report.settings if x.name == "fraction")
emit(s=stats(), total=nvml_memory()["total"], status=str(report), fraction_shown=fraction.shown,
     fraction_source=fraction.source, late=fraction.changed_after_start, warnings=list(report.warnings))
"""

_CUDA_ASYNC_POOL_AFTER_DELETE = """
import time, jax, jax.numpy as jnp
from jupyter_gpumem.sources.libcuda import read_default_pool
first_op()
ordinal = device().local_hardware_id
def reading():
    pool = read_default_pool(ordinal)
    return {"reserved": getattr(pool, "reserved_bytes", None), "used": getattr(pool, "used_bytes", None),
            "nvml_used": nvml_memory()["used"], "jax_in_use": (stats() or {}).get("bytes_in_use")}
arrays = [hold(GiB) for _ in range(8)]
seen = {"holding": reading()}
for a in arrays:
    a.delete()
arrays.clear()
seen["deleted"] = reading()
jax.effects_barrier()
seen["effects_barrier"] = reading()
jnp.zeros(8).block_until_ready()
seen["small_op_synced"] = reading()
jax.clear_caches()
seen["clear_caches"] = reading()
time.sleep(3.0)
seen["waited_3s"] = reading()
jnp.ones(8).block_until_ready()
seen["op_after_wait"] = reading()
emit(seen=seen, order=list(seen), total=nvml_memory()["total"])
"""


def _late_fraction_not_applied(o):
    share_now = share(o["s"]["bytes_limit"], o["total"])
    return f"bytes_limit = {share_now:.3f} × total after XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 was set late", between(
        share_now, 0.74, 0.76
    )


def _late_fraction_reported(o):
    late = o["late"] or {}
    seen = (
        f"fraction shown {o['fraction_shown']!r} ({o['fraction_source']}); late change "
        f"{late.get('variable')} asks {late.get('asked')!r}, in effect {late.get('in_effect')!r}"
        if late
        else f"fraction shown {o['fraction_shown']!r} ({o['fraction_source']}); no late change named"
    )
    named = any("XLA_PYTHON_CLIENT_MEM_FRACTION" in w for w in o["warnings"])
    return seen, o["fraction_shown"] == "0.75" and late.get("variable") == "XLA_PYTHON_CLIENT_MEM_FRACTION" and named


def _pool_readings(o):
    return "; ".join(
        f"{step}: pool {gib(r['reserved']) if r['reserved'] is not None else 'no reading'}, NVML used {gib(r['nvml_used'])}"
        for step, r in ((k, o["seen"][k]) for k in o["order"])
    )


def _pool_kept_after_delete(o):
    held, waited = o["seen"]["holding"]["reserved"], o["seen"]["waited_3s"]["reserved"]
    if held is None or waited is None:
        raise ValueError(f"no pool reading: {_pool_readings(o)}")
    return _pool_readings(o), waited >= 0.5 * held


def _pool_returned_by_a_later_op(o):
    held, after = o["seen"]["holding"]["reserved"], o["seen"]["op_after_wait"]["reserved"]
    if held is None or after is None:
        raise ValueError(f"no pool reading: {_pool_readings(o)}")
    return f"pool {gib(held)} holding, {gib(after)} after an operation following the wait", after < 0.1 * held


def _cuda_async_exact(o):
    delta = o["s1"]["bytes_in_use"] - o["s0"]["bytes_in_use"]
    return f"bytes_in_use rose by {delta:,} for {o['requested']:,} requested", delta == o["requested"]


def _limit_zero(o):
    return f"bytes_limit = {o['s0'].get('bytes_limit')}", o["s0"].get("bytes_limit") == 0


def _no_free_block(key):
    def judge(o):
        s = o[key]
        seen = f"largest_free_block_bytes = {s.get('largest_free_block_bytes')}, pool_bytes {'present' if 'pool_bytes' in s else 'absent'}"
        return seen, s.get("largest_free_block_bytes") == 0 and "pool_bytes" not in s

    return judge


def _default_pool_is_jax(o):
    used, in_use = o["pool_used"], o["s2"]["bytes_in_use"]
    if used is None:
        return f"no pool reading: {o['pool']}", False
    return f"pool used {gib(used)}, JAX bytes_in_use {gib(in_use)}", used >= in_use >= GiB


def _limit_share(key, low, high):
    def judge(o):
        s = o[key]
        limit = s.get("bytes_limit") if s else None
        if not limit:
            return f"bytes_limit = {limit}", False
        value = share(limit, o["total"])
        return f"bytes_limit = {value:.3f} × total ({gib(limit)})", between(value, low, high)

    return judge


def _pool_reserved_share(low):
    def judge(o):
        r = o["pool_reserved"]
        if r is None:
            return f"no pool reading: {o['pool']}", False
        return f"default pool reserved {share(r, o['total']):.3f} × total", share(r, o["total"]) >= low

    return judge


def _past_fraction(o):
    if o["error"]:
        return first_line(o["error"]), False
    return f"held {gib(o['held'])} = {share(o['held'], o['total']):.2f} × total under a fraction of 0.1", o[
        "held"
    ] >= 0.19 * o["total"]


def _stats_none(o):
    return f"memory_stats() = {'None' if o['stats_is_none'] else o['s']} on {o['platform']}", bool(
        o["stats_is_none"]
    ) and o["platform"] != "cpu"


def _platform_oom_text(o):
    text = o["error"] or ""
    named = re.search(r"Out of memory while trying to allocate \S+ with allocator SE_\d+_space_\d+ on device \d+", text)
    return first_line(text) or "no error", named is not None


def _names_allocator(o):
    text = o["error"] or ""
    named = re.search(r"with allocator (\S+) on device \d+", text)
    seen = f"allocator {named.group(1)!r}: {first_line(text)}" if named else (first_line(text) or "no error")
    return seen, human_oom_size(text) is not None and named is not None


def _mine_below(limit):
    def judge(o):
        return f"this process holds {gib(o['mine'])} on {o['platform']}", o["mine"] < limit and o["platform"] != "cpu"

    return judge


def _mine_share_at_least(low):
    def judge(o):
        value = share(o["mine"], o["total"])
        return f"this process holds {value:.3f} × total on {o['platform']}", value >= low and o["platform"] != "cpu"

    return judge


def _first_region(o):
    return f"pool_bytes after the first operation = {o['s0'].get('pool_bytes'):,}", o["s0"].get("pool_bytes") == 2 * MiB


def _reserved_zero(o):
    s = o["s2"]
    return (
        f"bytes_reserved = {s.get('bytes_reserved')}, peak_bytes_reserved = {s.get('peak_bytes_reserved')}",
        s.get("bytes_reserved") == 0 and s.get("peak_bytes_reserved") == 0,
    )


def _in_use_multiple_of_256(o):
    values = [o[k]["bytes_in_use"] for k in ("s0", "s1", "s2", "s3")]
    return f"bytes_in_use: {', '.join(f'{v:,}' for v in values)}", all(v % 256 == 0 for v in values)


def _pool_never_shrinks(o):
    s2, s3 = o["s2"], o["s3"]
    seen = f"pool_bytes {gib(s2['pool_bytes'])} → {gib(s3['pool_bytes'])} after a delete; peak_pool_bytes {gib(s3['peak_pool_bytes'])}"
    return seen, s3["pool_bytes"] == s2["pool_bytes"] and s3["peak_pool_bytes"] == s3["pool_bytes"]


def _delete_frees_at_once(o):
    drop = o["s2"]["bytes_in_use"] - o["s3"]["bytes_in_use"]
    return f"bytes_in_use fell by {gib(drop)} at delete()", drop >= GiB


def _human_units(o):
    size = human_oom_size(o["error"])
    return (f"size written as {size!r}: {first_line(o['error'])}" if o["error"] else "no error"), size is not None


def _run_time_oom_without_buffers(o):
    text = o["error"] or ""
    seen = f"at {o['phase']}: 'BufferAssignment OOM Debugging' {'in' if 'BufferAssignment OOM Debugging' in text else 'not in'} the text, 'Peak buffers:' {'in' if 'Peak buffers:' in text else 'not in'} it"
    plain = o["phase"] == "run" and human_oom_size(text) is not None
    return seen, plain and "Peak buffers:" not in text and "BufferAssignment OOM Debugging" not in text


def _analysis_counts_temp(o):
    if o["temp"] is None:
        return f"compile failed first: {first_line(o['error'])}", False
    return f"temp_size_in_bytes {gib(o['temp'])} for a {gib(o['product_bytes'])} product", o["temp"] >= o[
        "product_bytes"
    ]


def _silent_cpu(o):
    if not o["cuda_plugins"]:
        raise KeyError("no jax-cuda plugin installed: nothing would run on a GPU anyway")
    if o["error"]:
        return f"raised: {first_line(o['error'])}", False
    return f"ran on {o['platform']}, no exception", o["platform"] == "cpu"


def _aborts(o):
    tail = first_line((o.get("_stderr") or "").strip().splitlines()[-1] if (o.get("_stderr") or "").strip() else "")
    return f"exit status {o['_rc']}: {tail}", o["_rc"] not in (0, None) and not o.get("_result")


def _pool_bytes_present(o):
    s = o["s"] or {}
    return f"pool_bytes {'present' if 'pool_bytes' in s else 'absent'} on {o['platform']}", "pool_bytes" in s and o[
        "platform"
    ] != "cpu"


def _section(name: str) -> str:
    return f"{FACTS_PAGE}, {name}"


PROBES: tuple[Probe, ...] = (
    Probe(
        "cuda_async_growing",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        _CUDA_ASYNC_GROWING,
        (
            Check(
                "cuda_async: bytes_in_use counts the exact requested bytes",
                _section("memory_stats() per device"),
                "rises by exactly 4,000,004 for 1,000,001 float32",
                _cuda_async_exact,
            ),
            Check(
                "cuda_async, preallocation off: bytes_limit is 0",
                _section("memory_stats() per device"),
                "bytes_limit == 0",
                _limit_zero,
            ),
            Check(
                "cuda_async: largest_free_block_bytes is 0 and there is no pool_bytes",
                _section("memory_stats() per device"),
                "0, and no pool_bytes key",
                _no_free_block("s0"),
            ),
            Check(
                "an in-process reader of the default pool sees JAX's cuda_async pool",
                _section("memory_stats() per device"),
                "read_default_pool used ≥ JAX bytes_in_use ≥ 1 GiB",
                _default_pool_is_jax,
            ),
        ),
    ),
    Probe(
        "cuda_async_preallocated",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"},
        _CUDA_ASYNC_PREALLOCATED,
        (
            Check(
                "cuda_async, preallocation on: bytes_limit is total × fraction",
                _section("memory_stats() per device"),
                "0.74–0.76 × total (default fraction 0.75)",
                _limit_share("s", 0.74, 0.76),
            ),
            Check(
                "cuda_async, preallocation on: still no free-block figure and no pool_bytes",
                _section("memory_stats() per device"),
                "0, and no pool_bytes key",
                _no_free_block("s"),
            ),
            Check(
                "cuda_async, preallocation on: the pool is reserved at start",
                "docs/settings.md, allocator",
                "default pool reserved ≥ 0.7 × total after the first operation",
                _pool_reserved_share(0.7),
            ),
        ),
    ),
    Probe(
        "cuda_async_no_cap",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_CLIENT_MEM_FRACTION": "0.1"},
        _CUDA_ASYNC_NO_CAP,
        (
            Check(
                "cuda_async, preallocation on: the fraction is no cap (the pool grows past it)",
                _section("Read from JAX 0.10.2, 0.11.0 … (second pass)"),
                "0.2 × total held under a fraction of 0.1",
                _past_fraction,
            ),
        ),
    ),
    Probe(
        "platform",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
        _STATS_AND_OOM.format(name="platform_oom"),
        (
            Check(
                "platform: memory_stats() is None",
                _section("memory_stats() per device"),
                "None, on the GPU",
                _stats_none,
            ),
            Check(
                "platform: the OOM text is XLA's allocator text, naming SE_<n>_space_<m>",
                _section("Out-of-memory errors"),
                "'Out of memory while trying to allocate … with allocator SE_0_space_0 on device 0.'",
                _platform_oom_text,
            ),
        ),
    ),
    Probe(
        "cuda_async_oom",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        _STATS_AND_OOM.format(name="cuda_async_oom"),
        (
            Check(
                "cuda_async: the OOM text names the size in human units and the allocator",
                _section("Out-of-memory errors"),
                "'Out of memory while trying to allocate … with allocator NAME on device 0.'",
                _names_allocator,
            ),
        ),
    ),
    Probe(
        "vmm",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "vmm"},
        _STATS_AND_OOM.format(name="vmm_oom"),
        (Check("vmm: memory_stats() is None", _section("memory_stats() per device"), "None, on the GPU", _stats_none),),
    ),
    Probe(
        "address",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "address"},
        _STATS_AND_OOM.format(name="address_oom"),
        (
            Check(
                "address: memory_stats() is None",
                _section("memory_stats() per device"),
                "None, on the GPU",
                _stats_none,
            ),
            Check(
                "address: the OOM text is XLA's allocator text, naming SE_<n>_space_<m>",
                _section("Out-of-memory errors"),
                "'Out of memory while trying to allocate … with allocator SE_0_space_0 on device 0.'",
                _platform_oom_text,
            ),
        ),
    ),
    Probe(
        "create_options",
        {},
        _CREATE_OPTIONS,
        (
            Check(
                "jax_pjrt_client_create_options memory_fraction is merged after the env options",
                _section("The variables"),
                "bytes_limit 0.49–0.51 × total",
                _limit_share("s", 0.49, 0.51),
            ),
            Check(
                "jax_pjrt_client_create_options preallocate=False is merged after the env options",
                _section("The variables"),
                "this process holds < 2 GiB after the first operation",
                _mine_below(2 * GiB),
            ),
        ),
    ),
    Probe(
        "bfc_growing",
        {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        _BFC_GROWING,
        (
            Check(
                "BFC, preallocation off: the first region is min(limit, 2 MiB)",
                _section("How memory grows"),
                "pool_bytes == 2 MiB after the first small operation",
                _first_region,
            ),
            Check(
                "BFC: bytes_limit is total × 0.75, reported with preallocation off",
                _section("memory_stats() per device"),
                "0.74–0.76 × total",
                _limit_share("s0", 0.74, 0.76),
            ),
            Check(
                "BFC: bytes_reserved and peak_bytes_reserved are 0 on GPU",
                _section("memory_stats() per device"),
                "both 0",
                _reserved_zero,
            ),
            Check(
                "BFC: bytes_in_use counts chunks, multiples of 256 B",
                _section("memory_stats() per device"),
                "every reading a multiple of 256",
                _in_use_multiple_of_256,
            ),
            Check(
                "BFC: pool_bytes never shrinks and peak_pool_bytes == pool_bytes",
                _section("How memory grows"),
                "unchanged by a delete; peak equal",
                _pool_never_shrinks,
            ),
            Check(
                "Array.delete() frees at once",
                _section("Inspecting live memory"),
                "bytes_in_use falls by ≥ 1 GiB",
                _delete_frees_at_once,
            ),
            Check(
                "BFC OOM names the size in human units",
                _section("Out-of-memory errors"),
                "'Out of memory while trying to allocate 12.34GiB' then '.' or ' with allocator …'",
                _human_units,
            ),
        ),
    ),
    Probe(
        "preallocate_FALSE",
        {"XLA_PYTHON_CLIENT_PREALLOCATE": "FALSE"},
        _SHARE_AFTER_FIRST_OP,
        (
            Check(
                "XLA_PYTHON_CLIENT_PREALLOCATE=FALSE leaves preallocation on",
                _section("The variables"),
                "this process holds ≥ 0.7 × total",
                _mine_share_at_least(0.7),
            ),
        ),
    ),
    Probe(
        "fraction_above_one",
        {"XLA_CLIENT_MEM_FRACTION": "1.5"},
        _SHARE_AFTER_FIRST_OP,
        (
            Check(
                "a fraction of 1.5 passes and BFC, preallocating, takes about all free memory",
                "docs/settings.md, what the generator rejects",
                "this process holds ≥ 0.9 × total",
                _mine_share_at_least(0.9),
            ),
        ),
    ),
    Probe(
        "env_after_import",
        {},
        _ENV_AFTER_IMPORT,
        (
            Check(
                "XLA_PYTHON_CLIENT_* set after import jax, before the first operation, take effect",
                _section("When settings are read"),
                "this process holds < 2 GiB",
                _mine_below(2 * GiB),
            ),
        ),
    ),
    Probe(
        "bad_allocator",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_malloc_async"},
        _PLATFORM_OR_ERROR,
        (
            Check(
                "a bad allocator value makes JAX fall back to the CPU silently",
                _section("The variables"),
                "runs on cpu, no exception (the second pass read 'Unable to initialize backend' instead)",
                _silent_cpu,
            ),
        ),
        cpu_is_an_answer=True,
    ),
    Probe(
        "async_prealloc_malformed",
        {
            "XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC": "2GiB",
        },
        _PLATFORM_OR_ERROR,
        (
            Check(
                "a malformed TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC aborts the process when cuda_async starts",
                _section("Read from the sources in a later review"),
                "non-zero exit, no result line",
                _aborts,
            ),
        ),
        expect_exit=False,
    ),
    Probe(
        "tf_gpu_allocator",
        {"TF_GPU_ALLOCATOR": "cuda_malloc_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        _SHARE_AFTER_FIRST_OP,
        (
            Check(
                "TF_GPU_ALLOCATOR=cuda_malloc_async is not read by JAX",
                _section("The variables"),
                "BFC's pool_bytes still reported",
                _pool_bytes_present,
            ),
        ),
    ),
    Probe(
        "late_fraction",
        {},
        _LATE_FRACTION,
        (
            Check(
                "a fraction set after JAX started changes nothing: BFC's limit stays 0.75 × total",
                _section("When settings are read"),
                "bytes_limit 0.74–0.76 × total, not 0.3",
                _late_fraction_not_applied,
            ),
            Check(
                "status() shows the fraction JAX started with and names the late change",
                "jupyter_gpumem/settings/started_with.py",
                "fraction '0.75'; a late change of XLA_PYTHON_CLIENT_MEM_FRACTION, named in the warnings",
                _late_fraction_reported,
            ),
        ),
    ),
    Probe(
        "cuda_async_pool_after_delete",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        _CUDA_ASYNC_POOL_AFTER_DELETE,
        (
            Check(
                "cuda_async, preallocation off: the driver pool keeps what it reserved after every array is "
                "deleted, through effects_barrier, a synced operation, clear_caches and a 3 s wait",
                "docs/gpu-facts.md, what the GPU showed (8.3 GiB kept)",
                "pool reserved after the wait ≥ half of what it held with 8 GiB live",
                _pool_kept_after_delete,
            ),
            Check(
                "cuda_async, preallocation off: an operation after the wait gives the pool's memory back",
                "docs/settings.md, async-prealloc (handed back at the next synchronisation)",
                "pool reserved after the next operation < a tenth of what it held",
                _pool_returned_by_a_later_op,
            ),
        ),
    ),
    Probe(
        "jit_oom",
        {},
        _JIT_OOM,
        (
            Check(
                "a program whose temporaries pass the device compiles, then fails at run with the allocator's text alone",
                _section("Read from JAX 0.10.2, 0.11.0 … (second pass)"),
                "at run: 'Out of memory while trying to allocate …'; no 'BufferAssignment OOM Debugging', no 'Peak buffers:'",
                _run_time_oom_without_buffers,
            ),
            Check(
                "memory_analysis() gives the temp size before running",
                _section("Inspecting live memory"),
                "temp_size_in_bytes ≥ the n×n product",
                _analysis_counts_temp,
            ),
        ),
    ),
)


# --- running and judging ----------------------------------------------------------------------


def probe_env(base: Mapping[str, str], probe: Probe) -> dict:
    """``base`` without any allocator variable, then the probe's own."""
    env = {k: v for k, v in base.items() if not k.startswith(_CLEARED_PREFIXES)}
    env.update(probe.env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_result(stdout: str) -> dict | None:
    """The probe's observations: the last line that starts with the result prefix."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return None


def run_probe(probe: Probe, python: str, base_env: Mapping[str, str], timeout: float) -> dict:
    """Run one probe in a fresh interpreter; its observations plus ``_rc``, ``_result``,
    ``_timed_out``, ``_stderr`` (the tail) and ``_seconds``."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [python, "-c", _PRELUDE + probe.code],
        env=probe_env(base_env, probe),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the probe's own process group only
        out, err = proc.communicate()
    result = None
    try:
        result = parse_result(out)
    except ValueError:
        pass
    observed = dict(result or {})
    observed.update(
        _rc=proc.returncode,
        _result=result is not None,
        _timed_out=timed_out,
        _stderr=err[-3000:],
        _seconds=round(time.monotonic() - start, 2),
    )
    return observed


def judge(probe: Probe, observed: Mapping[str, Any]) -> list[Row]:
    """One row per check of ``probe``, from what it observed."""
    rows = []
    for check in probe.checks:
        if observed.get("_skipped"):
            seen, verdict = observed["_skipped"], NO_READING
        elif observed.get("_timed_out"):
            seen, verdict = f"timed out after {observed.get('_seconds')} s", NO_READING
        elif probe.expect_exit and not observed.get("_result"):
            seen, verdict = (
                f"no result (exit {observed.get('_rc')}): {_last_error_line(observed.get('_stderr'))}",
                NO_READING,
            )
        elif observed.get("_result") and not ran_on_gpu_or_raised(observed) and not probe.cpu_is_an_answer:
            seen, verdict = f"JAX ran on {observed.get('platform')}, not on a GPU", NO_READING
        else:
            try:
                seen, ok = check.judge(observed)
                verdict = HOLDS if ok else FAILS
            except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
                seen, verdict = f"observations lacked what the check reads: {type(exc).__name__}: {exc}", NO_READING
        rows.append(Row(probe.name, check.fact, check.source, check.expected, seen, verdict))
    return rows


def ran_on_gpu_or_raised(observed: Mapping[str, Any]) -> bool:
    """Whether JAX ran on a GPU, or failed to start with an error (platform None): the two cases
    a GPU fact can be read from. A run on the CPU cannot say anything about the GPU."""
    platform = observed.get("platform")
    return platform in ("gpu", "cuda") or (platform is None and bool(observed.get("error")))


def _last_error_line(stderr: str | None) -> str:
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "nothing on stderr"


def render_table(rows: list[Row]) -> str:
    """The rows as a Markdown table: fact, expected, seen, verdict."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| probe | fact | expected | seen | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {r.probe} | {cell(r.fact)} | {cell(r.expected)} | {cell(r.seen)} | **{r.verdict}** |" for r in rows]
    counts = {v: sum(r.verdict == v for r in rows) for v in (HOLDS, FAILS, NO_READING)}
    lines += ["", f"{counts[HOLDS]} hold, {counts[FAILS]} do not hold, {counts[NO_READING]} without a reading."]
    return "\n".join(lines) + "\n"


def select(names: list[str] | None) -> tuple[Probe, ...]:
    """The probes named (all when None); an unknown name raises, listing the valid ones."""
    if not names:
        return PROBES
    known = {p.name: p for p in PROBES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown probe(s) {', '.join(unknown)}; valid: {', '.join(known)}")
    return tuple(known[n] for n in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for facts.json and facts.md")
    parser.add_argument("--only", nargs="*", help="probe names to run (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per probe (default 60)")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for all probes; those left then get no reading"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the probes")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows: list[Row] = []
    raw = {}
    end = time.monotonic() + args.budget if args.budget else None
    for probe in select(args.only):
        left = None if end is None else end - time.monotonic()
        if left is not None and left < 5:
            observed = {"_skipped": "not run: the time budget was spent"}
        else:
            observed = run_probe(
                probe, args.python, os.environ, args.timeout if left is None else min(args.timeout, left)
            )
        raw[probe.name] = observed
        probe_rows = judge(probe, observed)
        rows += probe_rows
        for r in probe_rows:
            print(f"[{r.verdict}] {r.probe}: {r.fact} | seen: {r.seen}", flush=True)
    table = render_table(rows)
    with open(os.path.join(args.out, "facts.md"), "w", encoding="utf-8") as f:
        f.write(table)
    with open(os.path.join(args.out, "facts.json"), "w", encoding="utf-8") as f:
        json.dump({"rows": [r.as_dict() for r in rows], "observed": raw}, f, indent=1, default=repr)
    print(table)
    return 0 if rows and all(r.verdict == HOLDS for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
