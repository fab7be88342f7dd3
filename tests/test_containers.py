"""Inside a container: NVML lists the host's pids, with their memory, and none of them is a
process here. The kernel must not count its own memory as another process's, nor advise
shutting itself down; the server must not count a kernel's memory as another process's.

What is real (read, not guessed):

- NVIDIA/nvidia-docker issue #1483, "NVML (`nvidia-smi`) gets wrong PIDs" (closed): the
  reporter shows `nvidia-smi` in a container getting "the real pids on host OS", which "don't
  exist inside the container"; NVIDIA's reply (klueska, 2021-04-06): "The nvidia-driver itself
  does not support pid-namespaces, so anytime you query it for the set of processes that are
  using GPUs, you will always get the host pids, not the container pids." The same in
  NVIDIA/gpu-monitoring-tools#63 for `nvmlDeviceGetComputeRunningProcesses` itself.
- NVML API Reference (docs.nvidia.com/deploy/nvml-api, R525 to R590), `nvmlProcessInfo_t`:
  `usedGpuMemory` is the "Amount of used GPU memory in bytes. Under WDDM,
  NVML_VALUE_NOT_AVAILABLE is always reported" -- so on Linux, in a container too, each process
  comes with its memory; and `nvmlDeviceGetComputeRunningProcesses_v3`: "The usedGpuMemory field
  returned is all of the memory used by the application."

The fake world's ``containerized`` scenario is that: GPU 0 lists host pid 4201001 with 30 GiB,
GPU 1 host pids 4201002 (12 GiB) and 4201003 (6 GiB); scenario pids are above PID_MAX_LIMIT, so
none is a process here, as in a container. The kernel is this test process (its pid is not
listed, as in a container), read through the real Sampler, which asks psutil which pids exist.
"""

from __future__ import annotations

import os

from jupyter_gpumem import doctor
from jupyter_gpumem.core.readings import JaxDeviceReading, normalise_stats
from jupyter_gpumem.core.tracefile import sample_from_json, sample_to_json
from jupyter_gpumem.doctor.oom_readings import OomReadings, OtherProcess
from jupyter_gpumem.doctor.oom_rules import advise
from jupyter_gpumem.doctor.oom_text import OomError
from jupyter_gpumem.monitor.series import notes_for, series_values
from jupyter_gpumem.sampling.sampler import Sampler
from jupyter_gpumem.server.device_report import HOST_PIDS_REASON, build_devices_report
from jupyter_gpumem.server.kernels import KernelInfo
from jupyter_gpumem.server.readings import NvmlDevices
from jupyter_gpumem.sources.nvml import NvmlSource
from jupyter_gpumem.testing import fake_nvml

GiB = 1024**3


def jax_on(nvml_index: int, pool: int, in_use: int) -> JaxDeviceReading:
    """This kernel's JAX (BFC) on one GPU: its backend started there and holds ``pool``."""
    stats = normalise_stats(
        {
            "bytes_in_use": in_use,
            "peak_bytes_in_use": in_use,
            "pool_bytes": pool,
            "bytes_limit": pool,
            "largest_free_block_bytes": pool - in_use,
        },
        "bfc",
    )
    return JaxDeviceReading(0, "gpu", "NVIDIA A100-SXM4-40GB", nvml_index, stats)


def sample_in_container(jax: JaxDeviceReading):
    """One sample of the ``containerized`` world, read by this process's own Sampler."""
    with fake_nvml("containerized"):
        return Sampler(NvmlSource().read, lambda: (jax,)).sample_once()


# --- the monitor -------------------------------------------------------------------------------


def test_monitor_draws_the_kernels_host_pid_found_by_elimination_as_this_process():
    # GPU 0 lists one pid, not a process here, and JAX runs on GPU 0: it is this kernel.
    sample = sample_in_container(jax_on(0, pool=24 * GiB, in_use=20 * GiB))
    v = series_values(sample, 0)
    assert (v["jax_in_use"], v["pool_unused"], v["outside_jax"]) == (20 * GiB, 4 * GiB, 6 * GiB)  # 30 - 24
    assert v["other_processes"] == 0
    assert v["host_pids"] is None and v["unattributed"] is None
    assert notes_for(sample, 0)[-1].startswith("NVML lists this process as pid 4201001")


def test_monitor_shows_host_pids_apart_when_it_cannot_tell_which_is_this_kernel():
    # GPU 1 lists two pids, neither a process here; JAX holds 10 GiB there, inside one of them.
    sample = sample_in_container(jax_on(1, pool=10 * GiB, in_use=10 * GiB))
    v = series_values(sample, 1)
    assert v["host_pids"] == 8 * GiB  # 18 GiB listed - 10 GiB JAX's pool
    assert (v["other_processes"], v["outside_jax"]) == (0, None)
    assert "cannot tell which of them, if any, is this process" in notes_for(sample, 1)[-1]


def test_monitor_says_it_cannot_tell_once_for_every_gpu_it_applies_to():
    # Without JAX on any GPU, both GPUs list pids that are not processes here: one line, not two.
    from jupyter_gpumem.monitor.header import grouped_notes

    with fake_nvml("containerized"):
        sample = Sampler(NvmlSource().read, lambda: ()).sample_once()
    lines = [
        line for line in grouped_notes({0: notes_for(sample, 0), 1: notes_for(sample, 1)}) if "cannot tell" in line
    ]
    assert len(lines) == 1 and lines[0].startswith("GPUs 0, 1: ")


# --- the OOM report ----------------------------------------------------------------------------


def oom_in(sample, requested: int):
    error = OomError("gpu_human", requested, False, None, "JaxRuntimeError", "synthetic")
    return doctor.oom_report(error, sample=sample, live=[], synthetic=True)


def test_oom_report_counts_the_kernels_host_pid_as_its_own_and_never_advises_shutting_it_down():
    sample = sample_in_container(jax_on(0, pool=24 * GiB, in_use=23 * GiB))
    report = oom_in(sample, 8 * GiB)
    assert report.others == () and report.readings.own_process_bytes == 30 * GiB
    assert "other_process" not in [f.kind for f in report.fixes]
    assert "pid 4201001" not in " ".join(f.action for f in report.fixes)
    assert "NVML lists this process as pid 4201001" in str(report)


def test_oom_report_says_it_cannot_tell_and_names_no_host_pid_to_shut_down():
    sample = sample_in_container(jax_on(1, pool=10 * GiB, in_use=10 * GiB))
    report = oom_in(sample, 16 * GiB)
    text = str(report)
    assert "  pid 4201002 (host pid, not a process here; may be this kernel): 12.00 GiB" in text.splitlines()
    assert "it cannot tell which of them is this process" in text
    assert report.others == () and report.readings.own_process_bytes is None
    assert not any("Shut down" in f.action for f in report.fixes)


# --- the server --------------------------------------------------------------------------------


def devices_report(kernels):
    with fake_nvml("containerized"):
        reading = NvmlDevices().read()  # asks psutil about each listed pid, as the server does
    return build_devices_report(reading, kernels, poll_interval=2.0)


def test_server_counts_host_pids_that_may_be_its_kernels_as_neither_kernels_nor_other_processes():
    kernel = KernelInfo("k1", "python3", os.getpid(), "nb/a.ipynb", "idle")  # its pid in this namespace
    gpu1 = devices_report([kernel])["devices"][1]
    assert [(p["pid"], p["kind"]) for p in gpu1["processes"]] == [(4_201_002, "host_pid"), (4_201_003, "host_pid")]
    assert (gpu1["kernels_bytes"], gpu1["other_bytes"], gpu1["host_pid_bytes"]) == (0, 0, 18 * GiB)
    assert gpu1["pids_visible"] is False
    assert "cannot tell which of them, if any, are this server's kernels" in gpu1["pids_reason"]


def test_server_gives_every_gpu_with_host_pids_the_same_reason_and_lists_the_pids_in_its_processes():
    # The panel says the reason once for all such GPUs: a pid list in it made each GPU's its own.
    kernel = KernelInfo("k1", "python3", os.getpid(), "nb/a.ipynb", "idle")
    gpu0, gpu1 = devices_report([kernel])["devices"][:2]
    assert gpu0["pids_reason"] == gpu1["pids_reason"] == HOST_PIDS_REASON
    assert [p["pid"] for p in gpu0["processes"] if p["kind"] == "host_pid"] == [4_201_001]


def test_server_without_kernels_counts_pids_that_are_not_processes_here_as_other_processes():
    gpu0 = devices_report([])["devices"][0]
    assert (gpu0["pids_visible"], gpu0["other_bytes"], gpu0["host_pid_bytes"]) == (True, 30 * GiB, 0)
    assert gpu0["processes"][0]["kind"] == "other"


# --- a trace recorded in a container -------------------------------------------------------------


def test_a_trace_keeps_which_pids_were_not_processes_here():
    sample = sample_in_container(jax_on(0, pool=24 * GiB, in_use=20 * GiB))
    assert sample.pids_not_here == {4_201_001, 4_201_002, 4_201_003}
    replayed = sample_from_json(sample_to_json(sample))
    assert replayed.pids_not_here == sample.pids_not_here
    assert series_values(replayed, 0) == series_values(sample, 0)


# --- the OOM rules, from readings ----------------------------------------------------------------


def test_other_process_rule_never_names_a_pid_that_is_no_process_here():
    gone = OtherProcess(4_200_999, 30 * GiB, "not a process here", here=False)
    r = OomReadings(
        requested=8 * GiB,
        device_total=40 * GiB,
        device_free=2 * GiB,
        bytes_in_use=7 * GiB,
        pool_bytes=8 * GiB,
        bytes_limit=30 * GiB,
        largest_free_block=GiB,
        others=(gone,),
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "other_process")
    assert "Shut down" not in fix.action and "pids 4200999" in fix.action


def test_host_pids_beyond_this_kernels_pool_are_a_fix_that_names_no_pid_to_shut_down():
    # 12 + 6 GiB listed by host pid; this kernel's pool (4 GiB) is in one of them: up to 14 GiB others'.
    listed = (
        OtherProcess(4_201_002, 12 * GiB, "host pid, not a process here", here=False),
        OtherProcess(4_201_003, 6 * GiB, "host pid, not a process here", here=False),
    )
    r = OomReadings(
        requested=8 * GiB,
        device_total=40 * GiB,
        device_free=GiB,
        bytes_in_use=4 * GiB,
        pool_bytes=4 * GiB,
        bytes_limit=4 * GiB,
        largest_free_block=0,
        host_pid_processes=listed,
        synthetic=True,
    )
    (fix,) = [f for f in advise(r) if f.kind == "other_process"]
    assert fix.title == "Processes NVML lists by host pid may hold up to 14.00 GiB (35%) of this device"
    assert "Shut down" not in fix.action and "pids 4201002, 4201003" in fix.action
    assert (fix.gain_bytes, fix.enough) == (None, False)
