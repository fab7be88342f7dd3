"""NVML's pids and this process's share a PID namespace as soon as one known process (this
kernel, one of the server's kernels) is listed by its own pid on any GPU: then the other
listed pids that are not processes here have ended (or, on a fake world, never ran), and none
of them can be this process or a kernel. Before, each GPU on which a kernel was not listed
said it "cannot tell which are this server's kernels", beside a kernel matched by pid.

NVML reports pids of the namespace the driver runs in (NVIDIA/nvidia-docker#1483, klueska
2021-04-06: "you will always get the host pids, not the container pids"): a pid match means
that namespace is this one. With /proc mounted ``hidepid=2`` another user's process has no
/proc entry (Linux Documentation/filesystems/proc.rst, "hidepid"), psutil's ``pid_exists``
reads /proc (psutil 5.9/6.x ``_pslinux.pid_exists`` falls back to ``pids()``), while
``kill(pid, 0)`` answers EPERM for it and ESRCH only for a pid no process has (kill(2)).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import psutil

from jupyter_gpumem.core.attribution import (
    NOT_LISTED,
    attribute,
    attribute_in_sample,
    pid_in_namespace,
    shares_pid_namespace,
)
from jupyter_gpumem.core.readings import DeviceReading, ProcessReading
from jupyter_gpumem.monitor.series import notes_for, series_values
from jupyter_gpumem.sampling.sampler import Sampler
from jupyter_gpumem.server import readings
from jupyter_gpumem.server.device_report import build_devices_report
from jupyter_gpumem.server.kernels import KernelInfo
from jupyter_gpumem.server.readings import NvmlDevices, process_facts
from jupyter_gpumem.sources.nvml import NvmlSource
from jupyter_gpumem.testing import fake_nvml

GiB = 1024**3
ME = 57


def gpu(index: int, *procs: ProcessReading) -> DeviceReading:
    used = sum(p.used_bytes for p in procs if isinstance(p.used_bytes, int))
    return DeviceReading(
        index, "NVIDIA A100-SXM4-40GB", f"GPU-{index}", 40 * GiB, used, 40 * GiB - used, processes=procs
    )


def test_a_known_pid_listed_on_any_gpu_shows_the_namespace_is_shared():
    devices = (gpu(0, ProcessReading(4_200_101, 30 * GiB)), gpu(2, ProcessReading(ME, 3 * GiB)))
    assert shares_pid_namespace(devices, {ME}) is True
    assert shares_pid_namespace(devices, {58}) is False


def test_in_a_shared_namespace_pids_not_here_have_ended_and_are_never_this_process():
    who = attribute(gpu(0, ProcessReading(4_200_101, 30 * GiB)), ME, {4_200_101}, jax_pool=None, shared_namespace=True)
    assert (who.how, who.own_bytes, who.unknown, [p.pid for p in who.gone]) == (NOT_LISTED, 0, (), [4_200_101])
    assert who.reason == ""


def three_gpus_with_this_kernel_on_gpu_2():
    with fake_nvml("three_gpus") as world:
        world.add_process(2, os.getpid(), 3 * GiB)
        return world, NvmlDevices().read()


def test_server_with_one_kernel_matched_names_no_host_pids_on_the_other_gpus():
    _, reading = three_gpus_with_this_kernel_on_gpu_2()
    on_gpu2 = KernelInfo("k1", "python3", os.getpid(), "a.ipynb", "idle")
    elsewhere = KernelInfo("k2", "python3", os.getppid(), "b.ipynb", "idle")  # a process here, on no GPU
    report = build_devices_report(reading, [on_gpu2, elsewhere], poll_interval=2.0, notebook="b.ipynb")
    gpu0, gpu1, gpu2 = report["devices"]
    assert [(d["pids_visible"], d["host_pid_bytes"]) for d in (gpu0, gpu1, gpu2)] == [(True, 0)] * 3
    assert (gpu0["other_bytes"], gpu1["other_bytes"], gpu2["kernels_bytes"]) == (32 * GiB, 10 * GiB, 3 * GiB)
    assert {p["kind"] for p in gpu0["processes"] + gpu1["processes"]} == {"other"}


def test_monitor_in_a_kernel_listed_on_one_gpu_has_no_host_pid_note_for_the_others():
    with fake_nvml("three_gpus") as world:
        world.add_process(2, os.getpid(), 3 * GiB)
        sample = Sampler(NvmlSource().read, lambda: ()).sample_once()
    assert attribute_in_sample(sample, 0).how == NOT_LISTED
    assert [n for key in (0, 1) for n in notes_for(sample, key) if "host pid" in n or "not a process here" in n] == []
    assert series_values(sample, 0)["other_processes"] == 32 * GiB


def test_pid_in_namespace_counts_a_process_kill_may_not_signal(monkeypatch):
    def refuse(pid, sig):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refuse)
    assert pid_in_namespace(4242) is True


def test_pid_in_namespace_is_false_for_a_pid_no_process_has():
    assert pid_in_namespace(4_200_101) is False  # above PID_MAX_LIMIT


def test_pid_in_namespace_is_true_for_a_running_process():
    # A child of its own, not this process: a kill() that sent a real signal would end only it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_in_namespace(child.pid) is True
    finally:
        child.kill()
        child.wait()


def test_a_process_proc_hides_is_still_a_process_here(monkeypatch):
    """hidepid=2: psutil finds no /proc entry (NoSuchProcess) but kill(pid, 0) answers EPERM."""

    def hidden(pid):
        raise psutil.NoSuchProcess(pid)

    def refuse(pid, sig):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(readings.psutil, "Process", hidden)
    monkeypatch.setattr(os, "kill", refuse)
    facts = process_facts(4242)
    assert (facts.exists, facts.user, facts.cmdline) == (True, None, None)


def test_the_sampler_counts_a_process_proc_hides_as_a_process_here(monkeypatch):
    def refuse(pid, sig):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(psutil, "pid_exists", lambda pid: False)  # what /proc says under hidepid
    monkeypatch.setattr(os, "kill", refuse)
    with fake_nvml("three_gpus"):
        sample = Sampler(NvmlSource().read, lambda: ()).sample_once()
    assert sample.pids_not_here == frozenset()


def test_pid_in_namespace_only_asks_with_signal_0(monkeypatch):
    sent = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert pid_in_namespace(4242) is True
    assert sent == [(4242, 0)]


def test_pid_in_namespace_is_false_when_kill_fails_otherwise(monkeypatch):
    def invalid(pid, sig):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "kill", invalid)
    assert pid_in_namespace(4242) is False


def test_pid_0_and_negative_pids_are_no_process():
    """kill(0, sig) and kill(-n, sig) address process groups (kill(2)), never one process."""
    assert (pid_in_namespace(0), pid_in_namespace(-1)) == (False, False)


def test_pid_1_is_a_process_here():
    """Every PID namespace has a pid 1, its init (pid_namespaces(7))."""
    assert pid_in_namespace(1) is True
