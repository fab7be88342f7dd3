"""What /metrics exports from one reading: per GPU, per kernel on a GPU, and the reader's state."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from jupyter_gpumem.core.readings import NO_DRIVER, DeviceReading, DeviceUnreadable, NotAvailable, ProcessReading
from jupyter_gpumem.server.device_report import build_devices_report
from jupyter_gpumem.server.kernels import KernelInfo, launch_env, launch_preallocates
from jupyter_gpumem.server.metrics import MAX_LABEL_CHARS, Snapshot, capped, families, kernel_key, snapshot_from
from jupyter_gpumem.server.readings import Reading

GiB = 1024**3
NOW = 1_800_000_000.0


def gpu(*procs, index=0, total=40 * GiB):
    used = sum(p.used_bytes for p in procs) + GiB // 2
    return DeviceReading(
        index,
        "NVIDIA A100-SXM4-40GB",
        f"GPU-{index}",
        total,
        used,
        total - used,
        reserved_bytes=GiB // 2,
        processes=tuple(procs),
    )


def kernel(kid, pid, state="idle", idle_for=None, launch=None, path=None):
    active = None if idle_for is None else datetime.fromtimestamp(NOW - idle_for, timezone.utc)
    return KernelInfo(
        kid, "python3", pid, path or f"{kid}.ipynb", state, last_activity=active, launch_preallocates=launch
    )


def snapshot(devices, kernels, source="nvml", **kw):
    reading = Reading(t=NOW - 1, devices=devices, source=source)
    body = build_devices_report(reading, kernels, poll_interval=2.0, my_uid=0)
    return snapshot_from(body, kernels, now=NOW, **kw)


class _Registry:
    def __init__(self, snap: Snapshot, now: float, kernel_names: bool):
        self.snap, self.now, self.kernel_names = snap, now, kernel_names

    def collect(self):
        return families(self.snap, self.now, kernel_names=self.kernel_names)


def exposition(snap: Snapshot, now: float = NOW, kernel_names: bool = True) -> dict[str, float]:
    """Prometheus text format (prometheus_client's own writer) as {'name{labels}': value}."""
    registry = CollectorRegistry()
    registry.register(_Registry(snap, now, kernel_names))
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def series(expo: dict, name: str, **labels) -> list[float]:
    return [v for k, v in expo.items() if k.split("{")[0] == name and all(f'{a}="{b}"' in k for a, b in labels.items())]


def test_an_idle_kernel_holding_memory_has_every_per_kernel_series():
    snap = snapshot((gpu(ProcessReading(11, 30 * GiB)),), [kernel("k1", 11, idle_for=3600)])
    expo = exposition(snap, now=NOW + 5)
    labels = dict(kernel=kernel_key("k1"), kernel_id="k1", notebook_path="k1.ipynb", index="0", uuid="GPU-0")
    assert series(expo, "jupyter_gpumem_kernel_gpu_bytes", **labels) == [30 * GiB]
    assert series(expo, "jupyter_gpumem_kernel_idle_seconds", **labels) == [3605.0]  # at scrape time
    assert series(expo, "jupyter_gpumem_kernel_execution_state", state="idle", **labels) == [1.0]
    assert series(expo, "jupyter_gpumem_kernel_preallocated", **labels) == [1.0]  # 30 of 40 GiB
    assert series(expo, "jupyter_gpumem_device_idle_kernel_bytes", index="0") == [30 * GiB]
    assert series(expo, "jupyter_gpumem_nvml_up", state="ok") == [1.0]


def test_idle_kernel_bytes_count_only_idle_kernels_quiet_for_idle_after():
    kernels = [
        kernel("quiet", 11, idle_for=700),
        kernel("recent", 12, idle_for=10),
        kernel("busy", 13, state="busy", idle_for=7000),
        kernel("never", 14),
    ]
    procs = [ProcessReading(pid, GiB * n) for pid, n in ((11, 1), (12, 2), (13, 4), (14, 8))]
    expo = exposition(snapshot((gpu(*procs),), kernels, idle_after=600))
    assert series(expo, "jupyter_gpumem_device_idle_kernel_bytes") == [1 * GiB]
    assert len(series(expo, "jupyter_gpumem_kernel_idle_seconds")) == 3  # "never" has no last_activity
    assert series(expo, "jupyter_gpumem_kernel_execution_state", kernel_id="busy", state="busy") == [1.0]


def test_preallocated_comes_from_the_reading_then_the_launch_environment_else_is_absent():
    kernels = [
        kernel("big", 11),
        kernel("off", 12, launch=False),
        kernel("unsaid", 13),
        kernel("on_small", 14, launch=True),
    ]
    procs = [ProcessReading(11, 30 * GiB), ProcessReading(12, GiB), ProcessReading(13, GiB), ProcessReading(14, GiB)]
    expo = exposition(snapshot((gpu(*procs, total=80 * GiB),), kernels))
    got = {
        kid: series(expo, "jupyter_gpumem_kernel_preallocated", kernel_id=kid)
        for kid in ("big", "off", "unsaid", "on_small")
    }
    # 30 of 80 GiB is under the 0.7 share: "big" is not shown preallocated by the reading either.
    assert got == {"big": [], "off": [0.0], "unsaid": [], "on_small": []}
    expo = exposition(snapshot((gpu(ProcessReading(12, 60 * GiB), total=80 * GiB),), [kernel("off", 12, launch=False)]))
    assert series(expo, "jupyter_gpumem_kernel_preallocated", kernel_id="off") == [1.0]  # the reading wins


def test_a_kernel_that_went_away_has_no_series_in_the_next_snapshot():
    first = exposition(snapshot((gpu(ProcessReading(11, GiB)),), [kernel("k1", 11, idle_for=5)]))
    after = exposition(snapshot((gpu(ProcessReading(11, GiB)),), []))  # its pid lingers, the kernel is gone
    assert any("k1" in k for k in first) and not any("k1" in k for k in after)
    assert series(after, "jupyter_gpumem_device_used_bytes", index="0") == [GiB + GiB // 2]


def test_no_driver_is_nvml_up_zero_with_its_state_and_no_device_series():
    expo = exposition(snapshot(NotAvailable(NO_DRIVER, "driver not loaded"), []))
    assert series(expo, "jupyter_gpumem_nvml_up", state="no_driver") == [0.0]
    assert series(expo, "jupyter_gpumem_device_used_bytes") == []


def test_a_lost_gpu_is_unreadable_and_the_others_still_export():
    lost = DeviceUnreadable(1, NotAvailable("gpu_lost", "GPU is lost"), name="", uuid="GPU-1")
    expo = exposition(snapshot((gpu(), lost), []))
    assert series(expo, "jupyter_gpumem_device_readable", uuid="GPU-1") == [0.0]
    assert series(expo, "jupyter_gpumem_device_readable", uuid="GPU-0") == [1.0]
    assert series(expo, "jupyter_gpumem_device_used_bytes", uuid="GPU-1") == []


def test_replays_are_not_exported():
    assert snapshot((gpu(),), [], source="replay") is None


def test_a_snapshot_past_its_max_age_is_not_exported():
    from jupyter_gpumem.server.metrics import GpuMemGauges

    g = GpuMemGauges.__new__(GpuMemGauges)  # not registered: the collector alone
    g.touch, g._snapshot = None, snapshot((gpu(),), [], max_age=60)
    assert g.collect()
    g._snapshot.made_at = time.monotonic() - 61
    assert g.collect() == []


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, False),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "False"}, False),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "0"}, False),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, True),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "no"}, True),  # anything else turns it on
    ],
)
def test_launch_environment_preallocation_as_jaxlib_reads_it(env, expected):
    """jaxlib 0.10.2, xla_client.generate_pjrt_gpu_plugin_options: ``preallocate not in
    ('false', 'False', '0')`` when the variable is set; the allocator name is lower-cased."""
    assert launch_preallocates(env, "0.11.2") is expected


@pytest.mark.parametrize(
    "env, jax_version, expected",
    [
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, "0.11.2", False),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "PLATFORM", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, "0.9.2", False),
        (
            {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
            "0.10.2",
            None,
        ),  # BFC there: JAX's default, unless the notebook changes it
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, "0.10.1", True),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, "0.10.2", False),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "address"}, "0.12.0.1", False),
        (
            {"XLA_PYTHON_CLIENT_ALLOCATOR": "address", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
            "0.10.2",
            False,
        ),  # refused: CPU
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, None, None),  # no JAX here to say which
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, "0.13.0", None),  # a release not read
    ],
    ids=[
        "platform-0.11",
        "platform-0.9",
        "platform-is-bfc-0.10.2",
        "platform-is-bfc-0.10.1-on",
        "platform-0.10.2-off",
        "address-0.12",
        "address-refused-0.10.2",
        "no-jax",
        "unread-release",
    ],
)
def test_the_launch_rule_for_platform_and_address_follows_the_jax_release(env, jax_version, expected):
    """``platform`` is BFC on JAX 0.10.1 and 0.10.2 only (jax#39145: openxla/xla#41761 gave the
    backend a BFC allocator the PJRT client falls back to; openxla/xla#45668 undid it for 0.11.0),
    a passthrough without a pool before and after; ``address`` is accepted from 0.11.0
    (jax#38490; jaxlib 0.10.2's generator refuses it, and JAX runs on the CPU)."""
    assert launch_preallocates(env, jax_version) is expected


@pytest.mark.jax_versions
def test_the_address_rule_matches_what_the_installed_jaxlib_accepts():
    """The release table against the installed jaxlib's own generator
    (``generate_pjrt_gpu_plugin_options`` in jaxlib/xla_client.py, asked for each name)."""
    from jupyter_gpumem.server.kernels import installed_jax_version
    from jupyter_gpumem.settings.published import REJECTED, allocator_kind
    from jupyter_gpumem.sources.jax_options import accepted_allocators

    accepted = accepted_allocators()
    assert accepted, "no jaxlib generator to ask"
    refused = allocator_kind("address", installed_jax_version()) == REJECTED
    assert refused is ("address" not in accepted)
    assert allocator_kind("platform", installed_jax_version()) in ("bfc", "passthrough")  # a release read


def test_launch_env_is_the_session_env_then_the_kernelspec_env():
    """jupyter_client 8.10: KernelManager keeps start_kernel's keywords in ``_launch_args``; the
    provisioner applies the kernelspec's ``env`` over the passed env (provisioner_base.py)."""
    km = SimpleNamespace(_launch_args={"env": {"A": "1", "B": "1"}}, _kernel_spec=SimpleNamespace(env={"B": "2"}))
    assert launch_env(km) == {"A": "1", "B": "2"}
    assert launch_env(SimpleNamespace()) == {}


def test_without_kernel_names_no_kernel_id_or_notebook_path_is_exported_and_kernels_stay_apart():
    snap = snapshot(
        (gpu(ProcessReading(11, 5 * GiB), ProcessReading(12, 6 * GiB)),),
        [kernel("k1", 11, path="secret/plan.ipynb"), kernel("k2", 12)],
    )
    text = "\n".join(exposition(snap, kernel_names=False))
    assert "k1" not in text.replace(kernel_key("k1"), "") and "secret" not in text
    assert "kernel_id=" not in text and "notebook_path=" not in text
    held = sorted(series(exposition(snap, kernel_names=False), "jupyter_gpumem_kernel_gpu_bytes"))
    assert held == [5 * GiB, 6 * GiB]  # two kernels, two series


def test_the_kernel_label_is_the_same_for_one_kernel_and_differs_between_kernels():
    assert kernel_key("k1") == kernel_key("k1") != kernel_key("k2")
    assert len(kernel_key("k1")) == 12 and "k1" not in kernel_key("k1")


def test_a_200000_character_notebook_path_is_a_label_of_at_most_the_cap_and_two_stay_distinct():
    long_a, long_b = "a" * 200_000 + ".ipynb", "a" * 200_000 + "b.ipynb"
    snap = snapshot(
        (gpu(ProcessReading(11, 5 * GiB), ProcessReading(12, 6 * GiB)),),
        [kernel("k1", 11, path=long_a), kernel("k2", 12, path=long_b)],
    )
    expo = exposition(snap)
    paths = {k.split('notebook_path="')[1].split('"')[0] for k in expo if "notebook_path=" in k}
    assert len(paths) == 2 and all(len(p) == MAX_LABEL_CHARS and "…" in p for p in paths)
    assert max(len(k) for k in expo) < 1000
    assert capped("short.ipynb") == "short.ipynb"
