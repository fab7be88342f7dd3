"""The /devices JSON built from one reading: the join, hidden details, over-commit, gauges."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from prometheus_client import REGISTRY, generate_latest

from jupyter_gpumem.core.readings import NO_DRIVER, PIDS_HIDDEN, DeviceReading, NotAvailable, ProcessReading
from jupyter_gpumem.server.device_report import build_devices_report, suggested_fraction
from jupyter_gpumem.server.kernels import KernelInfo, last_activity, provisioner_pid
from jupyter_gpumem.server.metrics import gauges, kernel_key, snapshot_from
from jupyter_gpumem.server.readings import ProcessFacts, Reading, process_facts

GiB = 1024**3
ME = 1000


def gpu(*procs, index=0, total=40 * GiB, **kw):
    used = sum(p.used_bytes for p in procs if isinstance(p.used_bytes, int)) + GiB // 2
    return DeviceReading(
        index,
        "NVIDIA A100-SXM4-40GB",
        f"GPU-{index}",
        total,
        used,
        total - used,
        reserved_bytes=GiB // 2,
        processes=tuple(procs),
        **kw,
    )


def kernel(kid, pid, path=None):
    return KernelInfo(kid, "python3", pid, path, "idle")


def live(*devices, facts=None):
    return Reading(t=1.0, devices=tuple(devices), source="nvml", processes=facts or {})


def report(reading, kernels=(), **kw):
    return build_devices_report(reading, list(kernels), poll_interval=2.0, my_uid=ME, **kw)


def test_process_of_a_kernel_carries_its_kernel_and_notebook():
    body = report(live(gpu(ProcessReading(11, 5 * GiB))), [kernel("k1", 11, "a.ipynb")])
    (proc,) = body["devices"][0]["processes"]
    assert (proc["kind"], proc["kernel_id"], proc["notebook_path"], proc["preallocated"]) == (
        "kernel",
        "k1",
        "a.ipynb",
        None,
    )


def test_kernel_last_activity_is_iso_utc_with_z_or_null():
    """jupyter_server 2.21.1 (services/kernels/kernelmanager.py) sets ``kernel.last_activity =
    utcnow()``, an aware UTC datetime, and its kernel model writes it with ``_tz.isoformat``
    (``+00:00`` -> ``Z``); the same spelling here, converted to UTC from any zone."""
    when = datetime(2026, 11, 22, 21, 5, 12, 345678, tzinfo=timezone(timedelta(hours=2)))
    busy = KernelInfo("k1", "python3", 11, "a.ipynb", "busy", last_activity=when)
    body = report(live(gpu(ProcessReading(11, 5 * GiB), ProcessReading(12, GiB))), [busy])
    by_pid = {p["pid"]: p for p in body["devices"][0]["processes"]}
    assert by_pid[11]["last_activity"] == "2026-11-22T19:05:12.345678Z"
    assert by_pid[12]["last_activity"] is None  # not a kernel
    assert busy.to_json()["last_activity"] == "2026-11-22T19:05:12.345678Z"
    assert kernel("k2", 13).to_json()["last_activity"] is None


def test_last_activity_is_read_only_when_it_is_a_datetime():
    now = datetime.now(timezone.utc)
    assert last_activity(SimpleNamespace(last_activity=now)) is now
    assert last_activity(SimpleNamespace()) is None  # a kernel manager that keeps none
    assert last_activity(SimpleNamespace(last_activity="2026-11-22T19:05:12Z")) is None


def test_kernel_holding_most_of_the_card_is_marked_preallocated():
    body = report(live(gpu(ProcessReading(11, 30 * GiB))), [kernel("k1", 11)])
    assert body["devices"][0]["processes"][0]["preallocated"] is True


def test_this_kernel_bytes_counts_only_the_asked_notebooks_kernel():
    reading = live(gpu(ProcessReading(11, 5 * GiB), ProcessReading(12, 3 * GiB), ProcessReading(99, GiB)))
    body = report(reading, [kernel("k1", 11, "a.ipynb"), kernel("k2", 12, "b.ipynb")], notebook="b.ipynb")
    dev = body["devices"][0]
    assert (dev["this_kernel_bytes"], dev["kernels_bytes"], dev["other_bytes"]) == (3 * GiB, 8 * GiB, GiB)


def test_other_users_process_shows_its_user_and_withholds_its_command_line():
    """Who holds a GPU is the first question on a shared machine (nvidia-smi and nvitop name the
    user); the command line may carry paths and tokens, so it stays with show_other_users."""
    facts = {99: ProcessFacts(True, uid=ME + 1, user="bob", cmdline="python train.py")}
    body = report(live(gpu(ProcessReading(99, GiB)), facts=facts))
    proc = body["devices"][0]["processes"][0]
    assert (proc["kind"], proc["name"], proc["user"], proc["name_hidden"]) == ("other", None, "bob", True)


def test_other_users_command_line_is_shown_with_show_other_users():
    facts = {99: ProcessFacts(True, uid=ME + 1, user="bob", cmdline="python train.py")}
    body = report(live(gpu(ProcessReading(99, GiB)), facts=facts), show_other_users=True)
    proc = body["devices"][0]["processes"][0]
    assert (proc["name"], proc["user"], proc["name_hidden"]) == ("python train.py", "bob", False)


def test_a_process_that_is_not_here_has_no_user_and_nothing_withheld():
    body = report(live(gpu(ProcessReading(4_200_999, GiB)), facts={4_200_999: ProcessFacts(False)}))
    proc = body["devices"][0]["processes"][0]
    assert (proc["name"], proc["user"], proc["name_hidden"]) == (None, None, False)


def test_a_device_reports_the_memory_its_driver_reserves():
    dev = report(live(gpu(ProcessReading(99, GiB))))["devices"][0]
    assert dev["reserved"] == GiB // 2


def test_same_users_process_shows_command_and_user():
    facts = {99: ProcessFacts(True, uid=ME, user="alice", cmdline="python train.py")}
    proc = report(live(gpu(ProcessReading(99, GiB)), facts=facts))["devices"][0]["processes"][0]
    assert (proc["name"], proc["user"]) == ("python train.py", "alice")


def test_a_pid_that_is_no_process_here_may_be_an_unmatched_kernel_and_is_not_visible():
    # Inside a container NVML lists the host's pids (NVIDIA/nvidia-docker#1483).
    facts = {99: ProcessFacts(False)}
    body = report(live(gpu(ProcessReading(99, 8 * GiB)), facts=facts), [kernel("k1", 11)])
    dev = body["devices"][0]
    assert (dev["pids_visible"], dev["processes"][0]["kind"], dev["host_pid_bytes"], dev["other_bytes"]) == (
        False,
        "host_pid",
        8 * GiB,
        0,
    )
    assert "PID namespace" in dev["pids_reason"]


def test_a_pid_that_is_no_process_here_is_another_process_when_every_kernel_is_matched():
    facts = {99: ProcessFacts(False)}
    body = report(live(gpu(ProcessReading(11, 5 * GiB), ProcessReading(99, 8 * GiB)), facts=facts), [kernel("k1", 11)])
    dev = body["devices"][0]
    assert (dev["pids_visible"], dev["kernels_bytes"], dev["other_bytes"]) == (True, 5 * GiB, 8 * GiB)


def test_processes_not_available_say_why():
    hidden = NotAvailable(PIDS_HIDDEN, "MIG hides processes")
    dev = DeviceReading(0, "A100", "GPU-0", 40 * GiB, 20 * GiB, 20 * GiB, processes=hidden)
    body = report(live(dev))
    assert (body["devices"][0]["pids_visible"], body["devices"][0]["pids_reason"]) == (False, "MIG hides processes")


def test_memory_in_use_with_no_processes_listed_is_not_attributed():
    dev = DeviceReading(0, "A100", "GPU-0", 40 * GiB, 20 * GiB, 20 * GiB, processes=())
    body = report(live(dev))
    assert body["devices"][0]["pids_visible"] is False


def test_no_driver_is_a_state_with_its_reason():
    reading = Reading(t=1.0, devices=NotAvailable(NO_DRIVER, "NVIDIA driver not loaded"), source="nvml")
    body = report(reading)
    assert (body["state"], body["reason"], body["devices"]) == ("no_driver", "NVIDIA driver not loaded", [])


def test_two_kernels_filling_a_gpu_after_one_preallocated_is_an_overcommit_warning():
    reading = live(gpu(ProcessReading(11, 30 * GiB), ProcessReading(12, 8 * GiB)))
    body = report(reading, [kernel("k1", 11, "a.ipynb"), kernel("k2", 12, "b.ipynb")])
    (warning,) = body["warnings"]
    assert (warning["kind"], warning["device"], warning["kernels"], warning["suggested_fraction"]) == (
        "overcommit",
        0,
        ["k1", "k2"],
        0.45,
    )
    assert "a.ipynb" in warning["message"]


def test_the_overcommit_warning_names_notebooks_by_file_name_not_folder():
    reading = live(gpu(ProcessReading(11, 30 * GiB), ProcessReading(12, 8 * GiB)))
    body = report(reading, [kernel("k1", 11, "runs/2026/a.ipynb"), kernel("k2", 12, "b.ipynb")])
    (warning,) = body["warnings"]
    assert "preallocated: a.ipynb (75%)" in warning["message"] and "runs/2026" not in warning["message"]


def test_two_kernels_with_room_left_give_no_warning():
    reading = live(gpu(ProcessReading(11, 30 * GiB), ProcessReading(12, GiB)))
    assert report(reading, [kernel("k1", 11), kernel("k2", 12)])["warnings"] == []


def test_suggested_fraction_is_a_share_less_a_margin():
    assert [suggested_fraction(n) for n in (1, 2, 3, 4)] == [0.95, 0.45, 0.28, 0.2]


def test_replay_placeholder_pids_map_to_kernels_in_order():
    reading = Reading(
        t=1.0,
        devices=(gpu(ProcessReading(1, 5 * GiB), ProcessReading(2, 3 * GiB)),),
        source="replay",
        synthetic=True,
        placeholder_pids=(1, 2),
    )
    body = report(reading, [kernel("k1", 501, "a.ipynb"), kernel("k2", 502, "b.ipynb")])
    procs = body["devices"][0]["processes"]
    assert [(p["pid"], p["kernel_id"], p["replay_placeholder_pid"]) for p in procs] == [(501, "k1", 1), (502, "k2", 2)]
    assert (body["source"], body["synthetic"]) == ("replay", True)


def metric(text, name, **labels):
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_kernel_gauge_follows_readings_and_drops_kernels_that_left():
    g = gauges()
    kernels = [kernel("kgauge", 11, "g.ipynb")]
    g.update(snapshot_from(report(live(gpu(ProcessReading(11, 5 * GiB))), kernels), kernels))
    text = generate_latest(REGISTRY).decode()
    assert metric(text, "jupyter_gpumem_kernel_gpu_bytes", kernel=kernel_key("kgauge")) == 5 * GiB
    g.update(snapshot_from(report(live(gpu()), []), []))
    text = generate_latest(REGISTRY).decode()
    assert metric(text, "jupyter_gpumem_kernel_gpu_bytes", kernel=kernel_key("kgauge")) is None
    assert re.search(r'jupyter_gpumem_device_used_bytes\{index="0"', text)
    g.clear()


def test_process_facts_of_this_process_name_its_owner_and_command_line():
    facts = process_facts(os.getpid())
    assert (facts.exists, facts.uid) == (True, os.getuid())
    assert "pytest" in facts.cmdline


def test_process_facts_of_a_process_that_ended_say_it_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_facts(child.pid) == ProcessFacts(exists=False)


def test_provisioner_pid_is_the_started_process_and_none_without_one():
    running = SimpleNamespace(provisioner=SimpleNamespace(process=SimpleNamespace(pid=4321)))
    stopped = SimpleNamespace(provisioner=None)
    assert (provisioner_pid(running), provisioner_pid(stopped)) == (4321, None)


def test_live_readings_from_the_fake_worlds_pynvml_are_labelled_synthetic():
    """The drop-in pynvml of ``jupyter_gpumem.testing`` marks itself ``__fake__``; the server's
    live reading, and the report the panel draws, say "synthetic" for it and only for it."""
    from jupyter_gpumem.server.device_report import build_devices_report
    from jupyter_gpumem.server.readings import NvmlDevices
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        reading = NvmlDevices().read()
    assert reading.synthetic is True
    assert build_devices_report(reading, [], poll_interval=2.0)["synthetic"] is True

    # The pynvml installed here (real, with no driver on this machine) is not marked.
    assert NvmlDevices().read().synthetic is False
