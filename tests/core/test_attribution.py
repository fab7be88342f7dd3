"""Which of NVML's processes on a GPU is this process: by pid, by elimination, or it cannot tell.

Inside a container NVML lists the host's pids (NVIDIA/nvidia-docker#1483), so this process's
own pid is not among them; the evidence is the listed pids that are not processes here.
tests/test_containers.py runs the same cases through the monitor, the OOM report and the server.
"""

from __future__ import annotations

import pytest

from jupyter_gpumem.core.attribution import (
    BY_ELIMINATION,
    BY_PID,
    CANNOT_TELL,
    HIDDEN,
    NOT_LISTED,
    attribute,
    attribute_in_sample,
    jax_pool_on,
)
from jupyter_gpumem.core.readings import (
    NO_STATS,
    NOT_STARTED,
    PIDS_HIDDEN,
    CudaPoolReading,
    DeviceReading,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
    normalise_stats,
)

GiB = 1024**3
ME = 57  # this process's pid in its own namespace


def gpu(*procs: ProcessReading) -> DeviceReading:
    used = sum(p.used_bytes for p in procs if isinstance(p.used_bytes, int))
    return DeviceReading(0, "NVIDIA A100-SXM4-40GB", "GPU-0", 40 * GiB, used, 40 * GiB - used, processes=procs)


def test_own_pid_listed_is_this_process_and_the_rest_are_others():
    who = attribute(gpu(ProcessReading(ME, 20 * GiB), ProcessReading(99, 5 * GiB)), ME, set(), jax_pool=16 * GiB)
    assert (who.how, who.own_bytes, [p.pid for p in who.others]) == (BY_PID, 20 * GiB, [99])


def test_a_listed_pid_that_is_no_process_here_beside_this_one_is_gone_not_another_to_name():
    who = attribute(gpu(ProcessReading(ME, 20 * GiB), ProcessReading(4_200_999, 5 * GiB)), ME, {4_200_999}, 16 * GiB)
    assert (who.how, who.others, [p.pid for p in who.gone]) == (BY_PID, (), [4_200_999])


def test_not_listed_without_evidence_holds_nothing_nvml_counts():
    who = attribute(gpu(ProcessReading(99, 5 * GiB)), ME, set(), jax_pool=None)
    assert (who.how, who.own_bytes, [p.pid for p in who.others]) == (NOT_LISTED, 0, [99])


def test_without_evidence_pids_are_matched_as_they_are():
    # An old trace: nobody looked which pids were processes here.
    who = attribute(gpu(ProcessReading(812_345, 30 * GiB)), ME, None, jax_pool=24 * GiB)
    assert (who.how, who.own_bytes) == (NOT_LISTED, 0)


def test_the_one_host_pid_is_this_process_when_jax_runs_on_the_gpu():
    host = ProcessReading(812_345, 30 * GiB)
    who = attribute(gpu(host, ProcessReading(99, 2 * GiB)), ME, {812_345}, jax_pool=24 * GiB)
    assert (who.how, who.own, who.own_pid, who.own_bytes) == (BY_ELIMINATION, (host,), 812_345, 30 * GiB)
    assert [p.pid for p in who.others] == [99]
    assert who.reason == (
        "NVML lists this process as pid 812345: the only pid on this GPU that is not a process here "
        "(a container sees the host's pids), and JAX runs on this GPU"
    )


def test_a_host_pid_listed_twice_is_still_one_process():
    entries = (ProcessReading(812_345, 20 * GiB), ProcessReading(812_345, 10 * GiB))
    who = attribute(gpu(*entries), ME, {812_345}, jax_pool=24 * GiB)
    assert (who.how, who.own_bytes) == (BY_ELIMINATION, 30 * GiB)


@pytest.mark.parametrize(
    "procs, jax_pool, why",
    [
        ((ProcessReading(812_345, 12 * GiB), ProcessReading(812_399, 6 * GiB)), 4 * GiB, "which of them"),
        ((ProcessReading(812_345, 30 * GiB),), None, "JAX does not run on this GPU"),
        ((ProcessReading(812_345, 2 * GiB),), 24 * GiB, "less memory than JAX's pool"),
    ],
    ids=["two host pids", "jax not on this gpu", "less than jax's pool"],
)
def test_cannot_tell_which_is_this_process_and_says_why(procs, jax_pool, why):
    who = attribute(gpu(*procs), ME, {p.pid for p in procs}, jax_pool)
    assert (who.how, who.own, who.unknown) == (CANNOT_TELL, (), procs)
    assert why in who.reason
    assert who.own_bytes == NotAvailable(PIDS_HIDDEN, who.reason)


def test_processes_nvml_does_not_list_are_hidden_with_its_reason():
    dev = DeviceReading(0, "A100", "GPU-0", 40 * GiB, 20 * GiB, 20 * GiB, processes=NotAvailable(PIDS_HIDDEN, "MIG"))
    who = attribute(dev, ME, set(), jax_pool=0)
    assert (who.how, who.reason) == (HIDDEN, "MIG")


def sample_with(jax) -> Sample:
    return Sample(t=1.0, pid=ME, devices=(gpu(),), jax=jax)


def test_jax_pool_on_a_gpu_is_what_its_allocator_holds():
    stats = normalise_stats({"bytes_in_use": GiB, "pool_bytes": 24 * GiB}, "bfc")
    assert jax_pool_on(sample_with((JaxDeviceReading(0, "gpu", "A100", 0, stats),)), 0) == 24 * GiB


def test_jax_started_with_no_statistics_still_runs_on_the_gpu():
    no_stats = NotAvailable(NO_STATS, "the platform allocator reports none")
    assert jax_pool_on(sample_with((JaxDeviceReading(0, "gpu", "A100", 0, no_stats),)), 0) == 0


def test_jax_not_started_or_elsewhere_is_not_known_to_run_on_the_gpu():
    assert jax_pool_on(sample_with(NotAvailable(NOT_STARTED, "not yet")), 0) is None
    stats = normalise_stats({"bytes_in_use": GiB, "pool_bytes": 24 * GiB}, "bfc")
    assert jax_pool_on(sample_with((JaxDeviceReading(0, "gpu", "A100", 1, stats),)), 0) is None


OTHER = ProcessReading(4242, 1 * GiB)  # a process here, not this one


def test_one_host_pid_while_jax_is_not_on_the_gpu_is_said_whole_and_the_rest_are_others():
    host = ProcessReading(812_345, 30 * GiB)
    who = attribute(gpu(host, OTHER), ME, {812_345}, None)
    assert (who.how, who.others, who.unknown) == (CANNOT_TELL, (OTHER,), (host,))
    assert who.reason == (
        "NVML lists pid 812345, not a process here (a container's view of the host's pids, or a process "
        "that ended); JAX does not run on this GPU in this process, so it cannot tell whether this process "
        "is among them"
    )


@pytest.mark.parametrize(
    "count, listed",
    [
        (5, "812000, 812001, 812002, 812003, 812004"),
        (6, "812000, 812001, 812002, 812003, 812004 and 1 more"),
        (8, "812000, 812001, 812002, 812003, 812004 and 3 more"),
    ],
)
def test_many_host_pids_are_named_five_at_most(count, listed):
    hosts = tuple(ProcessReading(812_000 + i, GiB) for i in range(count))
    who = attribute(gpu(*hosts, OTHER), ME, {p.pid for p in hosts}, 4 * GiB)
    assert (who.how, who.others, who.unknown) == (CANNOT_TELL, (OTHER,), hosts)
    assert who.reason == (
        f"NVML lists pids {listed}, none a process here (a container sees the host's pids): it cannot tell "
        "which of them is this process"
    )
    assert attribute(gpu(*hosts), ME, {p.pid for p in hosts}, None).reason.startswith(f"NVML lists pids {listed}, not")


def test_two_host_pids_while_jax_is_not_on_the_gpu_are_named_in_the_plural():
    hosts = (ProcessReading(812_345, GiB), ProcessReading(812_399, GiB))
    who = attribute(gpu(*hosts), ME, {812_345, 812_399}, None)
    assert who.reason.startswith("NVML lists pids 812345, 812399, not a process here (a container's view")


def test_a_host_pid_holding_exactly_jaxs_pool_is_this_process():
    host = ProcessReading(812_345, 24 * GiB)
    who = attribute(gpu(host), ME, {812_345}, jax_pool=24 * GiB)
    assert (who.how, who.own) == (BY_ELIMINATION, (host,))


def test_a_host_pid_holding_less_than_jaxs_pool_is_said_whole_and_the_rest_are_others():
    host = ProcessReading(812_345, 2 * GiB)
    who = attribute(gpu(host, OTHER), ME, {812_345}, jax_pool=24 * GiB)
    assert (who.how, who.others, who.unknown) == (CANNOT_TELL, (OTHER,), (host,))
    assert who.reason == (
        "NVML lists pid 812345, not a process here, with less memory than JAX's pool in this process: it cannot "
        "tell which process is this one"
    )


def bfc_on_gpu_0(pool: int) -> JaxDeviceReading:
    return JaxDeviceReading(0, "gpu", "A100", 0, normalise_stats({"bytes_in_use": GiB, "pool_bytes": pool}, "bfc"))


def test_in_a_sample_the_one_host_pid_is_this_process_when_its_jax_runs_on_that_gpu():
    host = ProcessReading(812_345, 30 * GiB)
    sample = Sample(1.0, ME, (gpu(host),), (bfc_on_gpu_0(24 * GiB),), pids_not_here=frozenset({812_345}))
    who = attribute_in_sample(sample, 0)
    assert (who.how, who.own) == (BY_ELIMINATION, (host,))


def test_in_a_sample_whose_jax_is_not_on_that_gpu_it_cannot_tell():
    host = ProcessReading(812_345, 30 * GiB)
    sample = Sample(1.0, ME, (gpu(host),), (), pids_not_here=frozenset({812_345}))
    assert attribute_in_sample(sample, 0).how == CANNOT_TELL


def test_in_a_sample_that_lists_this_pid_on_another_gpu_a_host_pid_is_never_this_process():
    host = ProcessReading(812_345, 30 * GiB)
    other_gpu = DeviceReading(1, "A100", "GPU-1", 40 * GiB, GiB, 39 * GiB, processes=(ProcessReading(ME, GiB),))
    sample = Sample(1.0, ME, (gpu(host), other_gpu), (bfc_on_gpu_0(24 * GiB),), pids_not_here=frozenset({812_345}))
    who = attribute_in_sample(sample, 0)
    assert (who.how, who.gone) == (NOT_LISTED, (host,))


def test_in_a_sample_a_gpu_without_a_reading_has_no_attribution():
    assert attribute_in_sample(Sample(1.0, ME, (gpu(),), ()), 1) is None


def test_in_a_shared_namespace_a_pid_not_here_is_gone_and_processes_here_are_others():
    host = ProcessReading(812_345, 30 * GiB)
    who = attribute(gpu(host, OTHER), ME, {812_345}, jax_pool=24 * GiB, shared_namespace=True)
    assert (who.how, who.others, who.gone, who.unknown) == (NOT_LISTED, (OTHER,), (host,), ())


def test_jax_pool_on_a_cuda_async_gpu_is_the_driver_pools_reserved_bytes():
    stats = normalise_stats({"bytes_in_use": 3 * GiB, "bytes_limit": 0}, "cuda_async")
    pool = CudaPoolReading(
        reserved_bytes=8 * GiB, reserved_high_bytes=8 * GiB, used_bytes=3 * GiB, used_high_bytes=3 * GiB
    )
    assert jax_pool_on(sample_with((JaxDeviceReading(0, "gpu", "A100", 0, stats, cuda_pool=pool),)), 0) == 8 * GiB


def test_jax_pool_on_a_gpu_whose_allocator_holds_nothing_yet_is_zero():
    empty = normalise_stats({"bytes_in_use": 0, "pool_bytes": 0}, "bfc")
    assert jax_pool_on(sample_with((JaxDeviceReading(0, "gpu", "A100", 0, empty),)), 0) == 0


def test_jax_on_the_cpu_is_not_on_the_gpu():
    cpu = JaxDeviceReading(0, "cpu", "cpu", 0, NotAvailable(NO_STATS, "synthetic: the CPU keeps no statistics"))
    assert jax_pool_on(sample_with((cpu,)), 0) is None


def test_a_jax_device_whose_statistics_failed_is_not_known_to_run_on_the_gpu():
    failed = JaxDeviceReading(0, "gpu", "A100", 0, NotAvailable(NOT_STARTED, "synthetic: not started"))
    assert jax_pool_on(sample_with((failed,)), 0) is None
