"""The settings a kernel publishes for the server: the file a real kernel writes and removes,
how the server reads it (and ignores what is not a kernel's own), and how it decides which
kernels preallocated, in /devices and on /metrics."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from jupyter_gpumem.core.readings import DeviceReading, ProcessReading
from jupyter_gpumem.server.device_report import build_devices_report
from jupyter_gpumem.server.kernel_settings import PublishedSettingsReader, connection_dir
from jupyter_gpumem.server.kernels import KernelInfo
from jupyter_gpumem.server.metrics import families, snapshot_from
from jupyter_gpumem.server.readings import Reading
from jupyter_gpumem.settings.published import (
    PublishedSettings,
    file_name,
    kernel_id_of,
    parse,
    preallocates,
    reserved_bytes,
)

from awaiting import WITHIN, own_client, started_kernel, until, waking

GiB = 1024**3
KID = "5c3b4a9e-1f0d-4c55-9a7e-2f1b8a6d0c11"


def on_gpu(
    preallocate=True,
    fraction=0.75,
    allocator="default",
    pid=11,
    started=True,
    platform="cuda",
    jax="0.11.2",
    pool_taken=True,
):
    """What a kernel on a GPU publishes (jupyter_gpumem/settings/publish.py, current()); by default
    one whose allocator has taken its pool (it ran an operation)."""
    return PublishedSettings(
        pid=pid,
        kernel_id=KID,
        backend_started=started,
        platform=platform if started else None,
        jax_version=jax,
        preallocate=preallocate,
        fraction=fraction,
        allocator=allocator,
        sources={"preallocate": "%gpumem", "fraction": "JAX default", "allocator": "JAX default"},
        pool_taken=pool_taken if started else None,
    )


# --- what the settings say ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, expected",
    [
        (on_gpu(), True),
        (on_gpu(preallocate=False), False),
        (on_gpu(allocator="bfc", fraction=0.3), True),
        (on_gpu(allocator="cuda_async"), True),  # reserves its whole pool while preallocation is on
        (on_gpu(allocator="cuda_async", preallocate=False), False),
        (on_gpu(allocator="platform"), False),
        (on_gpu(allocator="platform", jax="0.10.2"), True),  # jax#39145: BFC on 0.10.1 and 0.10.2
        (on_gpu(allocator="vmm"), None),  # not known here
        (on_gpu(started=False), None),  # JAX has not started: the settings say nothing yet
        (on_gpu(platform="cpu"), False),  # JAX runs on the CPU: no pool on a GPU
        (on_gpu(preallocate=None), None),  # a value JAX rejects
        (on_gpu(pool_taken=False), None),  # BFC takes its pool at the first allocation, not at start
        (on_gpu(pool_taken=None), None),  # a kernel that did not say whether it did
        (on_gpu(allocator="platform", jax="0.10.2", pool_taken=False), None),  # BFC there too
        (on_gpu(allocator="cuda_async", pool_taken=False), True),  # reserved when the client is created
        (on_gpu(preallocate=False, pool_taken=False), False),
        (on_gpu(allocator="address", jax="0.11.2"), False),  # the passthrough by name, from 0.11.0
        (on_gpu(allocator="platform", jax="0.13.0"), None),  # a release not read: not known
    ],
    ids=[
        "default",
        "off",
        "bfc-0.3",
        "cuda_async",
        "cuda_async-off",
        "platform",
        "platform-0.10.2",
        "vmm",
        "not-started",
        "cpu",
        "unknown",
        "bfc-pool-not-taken-yet",
        "bfc-pool-not-said",
        "platform-0.10.2-not-taken",
        "cuda_async-before-any-allocation",
        "off-not-taken",
        "address-0.11",
        "platform-unread-release",
    ],
)
def test_what_the_settings_say_about_preallocation(settings, expected):
    assert preallocates(settings) is expected


def test_a_bfc_kernel_that_has_not_allocated_reserves_nothing_yet():
    """``BFCAllocator``'s constructor leaves its pool empty (``stats_.pool_bytes = 0``) and
    ``Extend`` takes ``memory_limit_`` at the first allocation (openxla/xla
    xla/tsl/framework/bfc_allocator.cc at 80c095fc)."""
    assert reserved_bytes(on_gpu(pool_taken=False), 40 * GiB) is None


def test_the_pool_taken_flag_reads_back_as_written_and_a_file_without_it_reads_as_not_known():
    taken = on_gpu(pool_taken=False)
    assert parse(json.dumps(taken.to_json()), 11, KID).pool_taken is False
    without = {k: v for k, v in on_gpu().to_json().items() if k != "pool_taken"}
    assert parse(json.dumps(without), 11, KID).pool_taken is None


def test_a_preallocating_kernel_reserves_its_fraction_of_the_card():
    assert reserved_bytes(on_gpu(fraction=0.3), 40 * GiB) == int(0.3 * 40 * GiB)
    assert reserved_bytes(on_gpu(fraction=1.5), 40 * GiB) == 40 * GiB  # never more than the card
    assert reserved_bytes(on_gpu(preallocate=False), 40 * GiB) is None


def test_a_kernel_on_unified_memory_reserves_nothing_the_settings_can_say():
    """With ``TF_FORCE_UNIFIED_MEMORY`` XLA's BFC limit is total × max(1, fraction) of managed
    memory (``CreateBFCAllocator``, xla/pjrt/gpu/gpu_helpers.cc, openxla/xla at 963f4888): pages
    the driver moves on demand, not a reservation on the card. AlphaFold's guides set fraction 4.0."""
    unified = dataclasses.replace(on_gpu(fraction=4.0), unified_memory=True)
    assert (preallocates(unified), reserved_bytes(unified, 40 * GiB)) == (None, None)
    assert parse(json.dumps(unified.to_json()), 11, KID).unified_memory is True
    assert parse(json.dumps(on_gpu().to_json()), 11, KID).unified_memory is None


def test_the_kernel_id_is_read_from_a_server_kernel_s_connection_file_name():
    # jupyter_client 8.10, MultiKernelManager.pre_start_kernel: kernel-<kernel id>.json
    assert kernel_id_of(f"/run/user/1000/jupyter/runtime/kernel-{KID}.json") == KID
    assert kernel_id_of("/tmp/connection.json") is None


def test_published_json_reads_back_as_written():
    settings = on_gpu(fraction=0.3)
    assert parse(json.dumps(settings.to_json()), 11, KID) == settings


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        "null",
        '{"format": "something-else"}',
        json.dumps({**on_gpu().to_json(), "version": 2}),
        json.dumps({**on_gpu().to_json(), "pid": 12}),  # another process's file
        json.dumps({**on_gpu().to_json(), "kernel_id": "another-kernel"}),
        json.dumps({**on_gpu().to_json(), "backend_started": "yes"}),
        json.dumps({**on_gpu().to_json(), "settings": {"preallocate": True}}),
        b"\xff\xfe not utf-8",
    ],
    ids=["empty", "cut", "list", "null", "foreign", "version", "pid", "kernel", "started", "settings", "bytes"],
)
def test_what_is_not_a_kernel_s_own_settings_file_is_ignored(text):
    assert parse(text, 11, KID) is None


# --- the server's reader ------------------------------------------------------------------------


def publish(directory, settings: PublishedSettings | str, pid=11):
    path = directory / file_name(pid)
    path.write_text(settings if isinstance(settings, str) else json.dumps(settings.to_json()))
    return path


def test_the_reader_finds_a_kernel_s_file_by_its_pid(tmp_path):
    publish(tmp_path, on_gpu(preallocate=False))
    assert PublishedSettingsReader().read(str(tmp_path), 11, KID).preallocate is False
    assert PublishedSettingsReader().read(str(tmp_path), 12, KID) is None  # no file for that pid


def test_a_malformed_file_is_ignored(tmp_path):
    publish(tmp_path, '{"format": "jupyter-gpumem-kernel-settings", "version": 1, "pid": 11, "settings": ')
    assert PublishedSettingsReader().read(str(tmp_path), 11, KID) is None


def test_a_link_or_an_oversized_file_is_ignored(tmp_path):
    target = publish(tmp_path, on_gpu(), pid=99)
    os.symlink(target, tmp_path / file_name(11))
    assert PublishedSettingsReader().read(str(tmp_path), 11, KID) is None
    publish(tmp_path, json.dumps(on_gpu(pid=12).to_json()) + " " * 5000, pid=12)
    assert PublishedSettingsReader().read(str(tmp_path), 12, KID) is None


def test_an_unchanged_file_is_parsed_once_and_a_rewritten_one_again(tmp_path):
    path = publish(tmp_path, on_gpu())
    reader = PublishedSettingsReader()
    assert reader.read(str(tmp_path), 11, KID).preallocate is True
    assert reader.read(str(tmp_path), 11, KID).preallocate is True
    assert reader.reads == 1
    publish(tmp_path, on_gpu(preallocate=False))
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)  # a later write, whatever the clock's grain
    assert reader.read(str(tmp_path), 11, KID).preallocate is False
    assert reader.reads == 2


# --- the decision, in /devices and on /metrics ---------------------------------------------------


def gpu(*procs, total=40 * GiB):
    used = sum(p.used_bytes for p in procs)
    return DeviceReading(0, "NVIDIA A100-SXM4-40GB", "GPU-0", total, used, total - used, processes=tuple(procs))


def report(kernels, *procs):
    reading = Reading(t=1.0, devices=(gpu(*procs),), source="nvml")
    return build_devices_report(reading, kernels, poll_interval=2.0, my_uid=0)


def rows(body) -> dict[str, dict]:
    return {p["kernel_id"]: p for p in body["devices"][0]["processes"]}


def metric(body, kernels, name) -> dict[tuple, float]:
    snap = snapshot_from(body, kernels, now=2.0)
    return {
        tuple(v for k, v in s.labels.items() if k != "kernel"): s.value
        for f in families(snap, 2.0)
        for s in f.samples
        if s.name == name
    }


def test_a_kernel_that_turned_preallocation_off_is_not_preallocated_though_it_holds_75_percent():
    kernels = [KernelInfo("off", "python3", 11, "a.ipynb", "idle", settings=on_gpu(preallocate=False))]
    body = report(kernels, ProcessReading(11, 30 * GiB))
    row = rows(body)["off"]
    assert (row["preallocated"], row["preallocated_source"], row["reserved_bytes"]) == (False, "kernel_settings", None)
    assert row["settings"] == {
        "preallocate": False,
        "fraction": 0.75,
        "allocator": "default",
        "backend_started": True,
        "sources": {"preallocate": "%gpumem", "fraction": "JAX default", "allocator": "JAX default"},
        "changed_after_start": {},
    }
    assert metric(body, kernels, "jupyter_gpumem_kernel_preallocated") == {
        ("0", "GPU-0", "off", "a.ipynb", "kernel_settings"): 0.0
    }
    assert metric(body, kernels, "jupyter_gpumem_kernel_reserved_bytes") == {}


def test_a_kernel_that_preallocated_a_small_fraction_is_preallocated_with_its_reservation():
    kernels = [KernelInfo("small", "python3", 11, "a.ipynb", "idle", settings=on_gpu(fraction=0.3))]
    body = report(kernels, ProcessReading(11, 12 * GiB))
    row = rows(body)["small"]
    assert (row["preallocated"], row["preallocated_source"], row["reserved_bytes"]) == (
        True,
        "kernel_settings",
        int(0.3 * 40 * GiB),
    )
    assert metric(body, kernels, "jupyter_gpumem_kernel_reserved_bytes") == {
        ("0", "GPU-0", "small", "a.ipynb"): float(int(0.3 * 40 * GiB))
    }


def test_a_kernel_that_only_started_jax_fires_no_reservation():
    """A kernel that ran only ``jax.devices()``: JAX started on the GPU, BFC with preallocation
    on, no allocation yet, so its pool is empty (bfc_allocator.cc at openxla/xla 80c095fc) and
    the CUDA context is all it holds."""
    kernels = [
        KernelInfo("devices_only", "python3", 11, "a.ipynb", "idle", settings=on_gpu(pool_taken=False)),
        KernelInfo("other", "python3", 12, "b.ipynb", "idle", settings=on_gpu(pid=12)),
    ]
    body = report(kernels, ProcessReading(11, GiB // 2), ProcessReading(12, 30 * GiB))
    row = rows(body)["devices_only"]
    assert (row["preallocated"], row["preallocated_source"], row["reserved_bytes"]) == (None, None, None)
    assert metric(body, kernels, "jupyter_gpumem_kernel_reserved_bytes") == {
        ("0", "GPU-0", "other", "b.ipynb"): float(int(0.75 * 40 * GiB))
    }


def test_without_published_settings_the_reading_then_the_launch_environment_decide():
    kernels = [
        KernelInfo("big", "python3", 11, "a.ipynb", "idle"),
        KernelInfo("launched_off", "python3", 12, "b.ipynb", "idle", launch_preallocates=False),
        KernelInfo("not_started", "python3", 13, "c.ipynb", "idle", settings=on_gpu(pid=13, started=False)),
    ]
    body = report(kernels, ProcessReading(11, 29 * GiB), ProcessReading(12, GiB), ProcessReading(13, 2 * GiB))
    got = {kid: (r["preallocated"], r["preallocated_source"]) for kid, r in rows(body).items()}
    assert got == {"big": (True, "reading"), "launched_off": (False, "launch_environment"), "not_started": (None, None)}


def test_two_kernels_whose_settings_turned_preallocation_off_raise_no_overcommit_warning():
    kernels = [
        KernelInfo(k, "python3", pid, f"{k}.ipynb", "idle", settings=on_gpu(pid=pid, preallocate=False))
        for k, pid in (("a", 11), ("b", 12))
    ]
    body = report(kernels, ProcessReading(11, 30 * GiB), ProcessReading(12, 8 * GiB))
    assert body["warnings"] == []
    kernels[0] = KernelInfo("a", "python3", 11, "a.ipynb", "idle")  # the same without a file: the reading decides
    assert [
        w["kind"] for w in report(kernels, ProcessReading(11, 30 * GiB), ProcessReading(12, 8 * GiB))["warnings"]
    ] == ["overcommit"]


# --- a real kernel ------------------------------------------------------------------------------


async def _run(kc, code: str) -> None:
    async with waking(kc.parent):
        reply = await kc.execute_interactive(code, timeout=WITHIN)
    assert reply["content"]["status"] == "ok", reply["content"]


async def test_a_real_kernel_publishes_its_settings_and_removes_the_file_at_unload():
    """ipykernel 7.4 under jupyter_client 8.10: the kernel writes beside its connection file,
    which the server finds as the kernel manager's ``connection_file``."""
    km, kc = await started_kernel(env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        pid = km.provisioner.process.pid
        where = connection_dir(km)
        kernel_id = kernel_id_of(km.connection_file)
        path = os.path.join(where, file_name(pid))
        await _run(kc, "%load_ext jupyter_gpumem")
        loaded = PublishedSettingsReader().read(where, pid, kernel_id)
        assert (loaded.kernel_id, loaded.backend_started, loaded.preallocate) == (
            kernel_id,
            False,
            None,
        )  # not read yet
        await _run(kc, "%gpumem preallocate off")
        off = PublishedSettingsReader().read(where, pid, kernel_id)
        assert (off.preallocate, off.sources["preallocate"], off.allocator, off.backend_started) == (
            False,
            "%gpumem",
            "default",
            False,
        )
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        await _run(kc, "import jax.numpy as jnp; jnp.zeros(2).block_until_ready()")
        started = PublishedSettingsReader().read(where, pid, kernel_id)
        assert (started.backend_started, started.platform) == (True, "cpu")
        assert preallocates(started) is False  # JAX runs on the CPU here
        before = os.stat(path).st_mtime_ns
        await _run(kc, "x = 1")
        assert os.stat(path).st_mtime_ns == before  # nothing changed, nothing written
        await _run(kc, "%unload_ext jupyter_gpumem")
        assert not os.path.exists(path)
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def test_a_kernel_that_exits_removes_its_file():
    km, kc = await started_kernel(env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        path = os.path.join(connection_dir(km), file_name(km.provisioner.process.pid))
        await _run(kc, "%load_ext jupyter_gpumem")
        assert os.path.exists(path)
    finally:
        kc.stop_channels()
        await km.shutdown_kernel()  # a shutdown_request: the kernel exits and runs its atexit hooks
    await until(lambda: not os.path.exists(path), "the exited kernel's file removed", every=0.1)


async def test_a_real_kernel_killed_with_sigkill_leaves_its_file_and_the_server_removes_it():
    """ipykernel 7.4 under jupyter_client 8.10, killed as the OOM killer kills: no exit hook runs,
    so the file stays until the server finds its pid gone (the age check is met by setting the
    file's time back, as a minute's wait would)."""
    import signal

    from jupyter_gpumem.server.kernel_settings import remove_stale_files

    km, kc = await started_kernel(env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        pid = km.provisioner.process.pid
        where = connection_dir(km)
        path = os.path.join(where, file_name(pid))
        await _run(kc, "%load_ext jupyter_gpumem")
        _aged(path)
        # The runtime folder is shared with other servers: only this kernel's file is looked at.
        assert path not in remove_stale_files([where], [])  # alive: kept
        os.kill(pid, signal.SIGKILL)
        km.provisioner.process.wait(WITHIN)  # reaped, as the server's provisioner does
        assert os.path.exists(path)
        assert path in remove_stale_files([where], [])
        assert not os.path.exists(path)
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


# --- the server, a real kernel and the fake world -----------------------------------------------


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}, "GpuMem": {"poll_interval": 0.2}}


async def _run_until_idle(kc, code: str) -> None:
    """Run ``code`` and wait for the kernel's idle status after it on iopub (the shell reply is
    not waited for: the server's own clients share the kernel)."""
    async with waking(kc.parent):
        msg_id = kc.execute(code)
        while True:
            msg = await kc.get_iopub_msg(timeout=WITHIN)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            assert msg["msg_type"] != "error", msg["content"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return


async def _kernel_row(jp_fetch, kernel_id, wanted) -> dict:
    async def row():
        body = json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)
        found = next((p for d in body["devices"] for p in d["processes"] if p["kernel_id"] == kernel_id), None)
        return found if found is not None and wanted(found) else None

    return await until(row, "the kernel's row as wanted", every=0.1)


async def test_the_server_decides_from_a_real_kernel_s_settings_on_a_fake_gpu(jp_fetch, jp_serverapp):
    """A kernel of the server holds 29 of GPU 2's 40 GiB in the fake world: with jupyter_gpumem
    loaded and ``%gpumem preallocate off``, the reading decides until JAX starts, then the
    kernel's settings do (JAX started on the CPU here, so it reserved nothing on a GPU)."""
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus") as world:
        session = await jp_fetch(
            "api",
            "sessions",
            method="POST",
            body=json.dumps({"path": "s.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}}),
        )
        kernel_id = json.loads(session.body)["kernel"]["id"]
        km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
        pid = km.provisioner.process.pid
        kc = own_client(km)  # the server asks the kernel its pid meanwhile (awaiting.py)
        kc.start_channels()
        try:
            async with waking(km):
                await kc.wait_for_ready(timeout=WITHIN)
            await _run_until_idle(kc, "%load_ext jupyter_gpumem")
            await _run_until_idle(kc, "%gpumem preallocate off")
            world.add_process(2, pid, 29 * GiB)
            row = await _kernel_row(
                jp_fetch, kernel_id, lambda r: r["settings"] is not None and r["settings"]["preallocate"] is False
            )
            assert (row["preallocated"], row["preallocated_source"]) == (True, "reading")  # JAX has not started
            await _run_until_idle(kc, "import jax.numpy as jnp; jnp.zeros(2).block_until_ready()")
            row = await _kernel_row(jp_fetch, kernel_id, lambda r: r["settings"]["backend_started"])
            assert (row["preallocated"], row["preallocated_source"], row["reserved_bytes"]) == (
                False,
                "kernel_settings",
                None,
            )
            assert row["settings"]["sources"]["preallocate"] == "%gpumem"
        finally:
            kc.stop_channels()
            world.remove_process(2, pid)


# --- files the server must not trust: FIFOs swapped in, files of killed kernels ------------------


def test_a_fifo_swapped_in_after_the_check_is_refused_without_waiting(tmp_path, monkeypatch):
    """The race the server's reader must survive: lstat() saw a regular file, then a FIFO took
    its name. Opening the FIFO by path would wait for a writer that never comes, blocking the
    server's event loop; the reader opens without blocking and checks what it opened."""
    import threading

    fifo = tmp_path / file_name(11)
    os.mkfifo(fifo)
    regular = publish(tmp_path, on_gpu(pid=12), pid=12)
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: real_lstat(regular if str(p) == str(fifo) else p, *a, **k))
    answers = []
    reader = threading.Thread(
        target=lambda: answers.append(PublishedSettingsReader().read(str(tmp_path), 11, KID)), daemon=True
    )
    reader.start()
    reader.join(5)
    if reader.is_alive():  # release the blocked open so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("the reader waited on a FIFO")
    assert answers == [None]


def _killed_process() -> int:
    """The pid of a real process that was killed with SIGKILL (as the OOM killer does) and reaped."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    return proc.pid


def _aged(path, seconds=3600):
    os.utime(path, (os.stat(path).st_atime - seconds, os.stat(path).st_mtime - seconds))
    return path


def test_the_file_of_a_kernel_killed_with_sigkill_is_removed(tmp_path):
    from jupyter_gpumem.server.kernel_settings import remove_stale_files

    pid = _killed_process()
    path = _aged(publish(tmp_path, on_gpu(pid=pid), pid=pid))
    temporary = tmp_path / f".{file_name(pid)}.0123456789abcdef.part"  # killed mid-write
    temporary.write_text("{")
    _aged(temporary)
    assert sorted(remove_stale_files([str(tmp_path)], [])) == sorted([str(path), str(temporary)])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", ["alive", "server's kernel", "recent", "other name", "link"])
def test_a_file_whose_kernel_may_still_be_there_or_that_is_not_ours_is_kept(tmp_path, case):
    from jupyter_gpumem.server.kernel_settings import remove_stale_files

    dead = _killed_process()
    if case == "alive":
        path = _aged(publish(tmp_path, on_gpu(pid=os.getpid()), pid=os.getpid()))
    elif case == "server's kernel":
        path = _aged(publish(tmp_path, on_gpu(pid=dead), pid=dead))
    elif case == "recent":  # a kernel still starting may not be listed yet
        path = publish(tmp_path, on_gpu(pid=dead), pid=dead)
    elif case == "other name":
        path = tmp_path / f"kernel-{dead}.json"
        path.write_text("{}")
        _aged(path)
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text("{}")
        _aged(target)
        path = tmp_path / file_name(dead)
        os.symlink(target, path)
        os.utime(path, (1, 1), follow_symlinks=False)
    kernel_pids = [dead] if case == "server's kernel" else []
    assert remove_stale_files([str(tmp_path)], kernel_pids) == []
    assert os.path.lexists(path)


async def test_the_kernel_listing_removes_files_of_killed_kernels_from_the_runtime_folder(tmp_path):
    from types import SimpleNamespace

    from jupyter_gpumem.server.kernels import KernelDirectory

    pid = _killed_process()
    path = _aged(publish(tmp_path, on_gpu(pid=pid), pid=pid))
    manager = SimpleNamespace(connection_dir=str(tmp_path), list_kernel_ids=lambda: [])
    assert await KernelDirectory(manager, None).kernels() == []
    assert not path.exists()
