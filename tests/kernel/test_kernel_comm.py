"""The kernel side of the jupyter_gpumem comm: registration, the snapshot reply, and the pushes
that tell the panel when the kernel's state may have changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from child_env import ipython_dir

from jupyter_gpumem.kernel import comm as kernel_comm
from jupyter_gpumem.sampling.cell_hooks import CellHooks
from jupyter_gpumem.testing import DROPIN_DIR

from awaiting import WITHIN, started_kernel, waking
from doubles import FakeComm, FakeCommManager, FakeShell


@pytest.fixture(autouse=True)
def fresh_comms(monkeypatch):
    """Each test starts with no open comms and no hooks; comms the kernel opens are FakeComms."""
    opened: list[FakeComm] = []

    def create_comm(**kwargs):
        opened.append(FakeComm(**kwargs))
        return opened[-1]

    monkeypatch.setattr(kernel_comm, "_comms", [])
    monkeypatch.setattr(kernel_comm, "_hooks", CellHooks())
    monkeypatch.setattr(kernel_comm, "_create_comm", create_comm)
    return opened


def panel_opens_comm(manager: FakeCommManager, data=None) -> FakeComm:
    comm = FakeComm()
    manager.targets["jupyter_gpumem"](comm, {"content": {"data": data or {}}})
    return comm


def loaded_kernel_with_panel() -> tuple[FakeShell, FakeCommManager, FakeComm]:
    """A kernel shell after %load_ext, and the comm a panel then opened to it."""
    manager = FakeCommManager()
    shell = FakeShell(manager)
    kernel_comm.register(shell)
    return shell, manager, panel_opens_comm(manager)


def test_register_adds_the_jupyter_gpumem_target():
    manager = FakeCommManager()
    assert kernel_comm.register(FakeShell(manager)) is True
    assert list(manager.targets) == ["jupyter_gpumem"]


def test_snapshot_in_the_open_message_is_answered():
    manager = FakeCommManager()
    kernel_comm.register(FakeShell(manager))
    comm = FakeComm()
    manager.targets["jupyter_gpumem"](comm, {"content": {"data": {"request": "snapshot"}}})
    (sent,) = comm.sent
    assert sent["type"] == "snapshot"
    assert {s["name"] for s in sent["settings"]} >= {"preallocate", "fraction", "allocator"}


def test_unregistering_twice_is_quiet():
    from comm.base_comm import CommManager

    manager = CommManager()
    shell = FakeShell(manager)
    kernel_comm.register(shell)
    kernel_comm.unregister(shell)
    kernel_comm.unregister(shell)
    assert manager.targets == {}


@pytest.fixture
def jax_not_started(monkeypatch):
    """JAX's backend has not started nor registered its plugins, whatever earlier tests in this
    process did: every module that took ``backend_started`` by name answers False."""
    from jupyter_gpumem.sources import jax_backend, jax_plugins

    monkeypatch.setattr(jax_plugins, "cuda_registration", lambda: None)

    real = jax_backend.backend_started
    for module in [m for name, m in sys.modules.items() if name.startswith("jupyter_gpumem")]:
        if getattr(module, "backend_started", None) is real:
            monkeypatch.setattr(module, "backend_started", lambda: False)


def test_loading_opens_a_comm_that_tells_the_front_end_it_is_loaded(fresh_comms, jax_not_started):
    kernel_comm.register(FakeShell(FakeCommManager()))
    (announce,) = fresh_comms
    assert announce.open_kwargs["target_name"] == "jupyter_gpumem"
    data = announce.open_kwargs["data"]
    assert (data["type"], data["event"], data["backend_started"]) == ("event", "loaded", False)


def test_the_comm_opened_at_load_answers_snapshot_requests(fresh_comms):
    """The panel keeps the comm the kernel opened at load (labextension/src/kernelComm.ts) and
    asks on it."""
    kernel_comm.register(FakeShell(FakeCommManager()))
    (announce,) = fresh_comms
    announce.handler({"content": {"data": {"request": "snapshot"}}})
    (answer,) = announce.sent
    assert answer["type"] == "snapshot"


def test_each_cell_end_is_pushed_to_every_open_comm(fresh_comms, jax_not_started):
    shell, _, panel = loaded_kernel_with_panel()
    shell.run_cell(1, lambda: None)
    for comm in (fresh_comms[0], panel):
        (push,) = comm.sent
        assert (push["type"], push["event"], push["backend_started"]) == ("event", "cell_end", False)


def test_a_cell_that_starts_jax_is_pushed_as_jax_started(monkeypatch):
    shell, _, panel = loaded_kernel_with_panel()
    started = [False]
    monkeypatch.setattr(kernel_comm, "backend_started", lambda: started[0])
    shell.run_cell(1, lambda: started.__setitem__(0, True))
    shell.run_cell(2, lambda: None)
    assert [(p["event"], p["backend_started"]) for p in panel.sent] == [("jax_started", True), ("cell_end", True)]


def test_a_push_reads_no_snapshot(monkeypatch):
    """The after-cell push must cost next to nothing and never wait on JAX: it reads only the
    backend-started probe, never the snapshot (memory_stats, status)."""
    shell, _, panel = loaded_kernel_with_panel()

    def no_snapshot():
        raise AssertionError("a push read the snapshot")

    monkeypatch.setattr(kernel_comm, "snapshot", no_snapshot)
    shell.run_cell(1, lambda: None)
    assert [p["event"] for p in panel.sent] == ["cell_end"]


def test_a_comm_the_front_end_closed_gets_no_more_pushes(fresh_comms):
    manager = FakeCommManager()
    shell = FakeShell(manager)
    kernel_comm.register(shell)
    fresh_comms[0].closed_by_front_end()  # a front end without the panel closes it at once
    panel = panel_opens_comm(manager)
    panel.closed_by_front_end()
    shell.run_cell(1, lambda: None)
    assert fresh_comms[0].sent == [] and panel.sent == []


def test_a_push_that_fails_is_dropped_and_the_cell_goes_on():
    shell, manager, broken = loaded_kernel_with_panel()

    def send(data):
        raise OSError("the iopub socket is gone")

    broken.send = send
    healthy = panel_opens_comm(manager)
    shell.run_cell(1, lambda: None)  # raises nothing into the cell
    shell.run_cell(2, lambda: None)
    assert [p["event"] for p in healthy.sent] == ["cell_end", "cell_end"]
    assert broken not in kernel_comm._comms


def test_a_probe_that_fails_pushes_nothing_and_the_cell_goes_on(monkeypatch):
    shell, _, panel = loaded_kernel_with_panel()

    def broken_probe():
        raise RuntimeError("jax is half imported")

    monkeypatch.setattr(kernel_comm, "backend_started", broken_probe)
    shell.run_cell(1, lambda: None)  # raises nothing into the cell
    assert panel.sent == []


def test_unloading_removes_the_after_cell_push():
    from comm.base_comm import CommManager

    manager = CommManager()
    shell = FakeShell(manager)
    kernel_comm.register(shell)
    panel = panel_opens_comm(manager)
    kernel_comm.unregister(shell)
    assert shell.hooks == {"pre_run_cell": [], "post_run_cell": []}
    assert panel.sent == []


def test_a_reloaded_page_leaves_at_most_eight_comms_to_push_to():
    manager = FakeCommManager()
    kernel_comm.register(FakeShell(manager))
    comms = [panel_opens_comm(manager) for _ in range(12)]
    assert kernel_comm._comms == comms[-8:]


def _real_comm_manager(monkeypatch):
    """comm 0.2.3's own CommManager, as ipykernel 7.4 installs it (ipykernel/ipkernel.py sets
    ``comm.get_comm_manager``): comm_open makes the comm, registers it and calls our target;
    comm_close drops it; BaseComm.close unregisters it from ``comm.get_comm_manager()``."""
    import comm
    from comm.base_comm import CommManager

    manager = CommManager()
    monkeypatch.setattr(comm, "get_comm_manager", lambda: manager)
    kernel_comm.register(FakeShell(manager))
    return manager


def _front_end(manager, msg_type: str, comm_id: str) -> None:
    content = {"comm_id": comm_id, "target_name": "jupyter_gpumem", "data": {}}
    getattr(manager, msg_type)(None, None, {"content": content})


def test_five_thousand_pages_that_never_close_their_comm_leave_eight_in_the_comm_manager(monkeypatch):
    manager = _real_comm_manager(monkeypatch)
    for i in range(5000):
        _front_end(manager, "comm_open", f"page-{i}")
    assert len(manager.comms) == 8
    assert sorted(manager.comms) == sorted(f"page-{i}" for i in range(4992, 5000))
    assert [c.comm_id for c in kernel_comm._comms] == [f"page-{i}" for i in range(4992, 5000)]


def test_five_thousand_comms_opened_and_closed_leave_none_behind(monkeypatch, fresh_comms):
    manager = _real_comm_manager(monkeypatch)
    for i in range(5000):
        _front_end(manager, "comm_open", f"page-{i}")
        _front_end(manager, "comm_close", f"page-{i}")
    assert manager.comms == {} and kernel_comm._comms == fresh_comms  # the one opened at load


def test_settings_the_panel_applies_at_kernel_start_are_named_notebook_settings(monkeypatch, jax_not_started):
    """The panel's start hook calls configure_from_notebook (labextension/src/configureCode.ts):
    status names the source "notebook settings", not %gpumem, which the user never typed."""
    from jupyter_gpumem import allocator_shim
    from jupyter_gpumem.core.env_table import PREALLOCATE_VAR

    monkeypatch.delenv(PREALLOCATE_VAR, raising=False)
    allocator_shim.configure_from_notebook(preallocate=False)
    try:
        rows = {s["name"]: s for s in kernel_comm.snapshot()["settings"]}
        assert (rows["preallocate"]["shown"], rows["preallocate"]["source"]) == ("off", "notebook settings")
        allocator_shim.configure(preallocate=True)
        rows = {s["name"]: s for s in kernel_comm.snapshot()["settings"]}
        assert (rows["preallocate"]["shown"], rows["preallocate"]["source"]) == ("on", "%gpumem")
    finally:
        allocator_shim.reset()


def test_snapshot_settings_are_shown_as_status_shows_them():
    from jupyter_gpumem.settings.status import status

    shown = {s.name: s.shown for s in status().settings}
    rows = {s["name"]: s for s in kernel_comm.snapshot()["settings"]}
    assert {name: row["shown"] for name, row in rows.items()} == shown
    assert rows["async_prealloc"]["shown"] == "not set"


def test_unknown_request_is_answered_with_the_valid_requests():
    assert kernel_comm.reply({"request": "explode"}) == {
        "type": "error",
        "error": "unknown request 'explode'; valid requests: snapshot",
    }


def test_an_eight_megabyte_unknown_request_is_named_in_under_two_hundred_characters():
    request = "x" * (8 * 2**20)
    error = kernel_comm.reply({"request": request})["error"]
    assert len(error) < 200
    assert error.startswith("unknown request 'xxxx") and "..." in error
    assert error.endswith("xxxx'; valid requests: snapshot")


def test_a_deeply_nested_unknown_request_is_named_shortened():
    error = kernel_comm.reply({"request": {"a": [list(range(10**6))] * 10, "b": {"c": {"d": "e"}}}})["error"]
    assert len(error) < 200 and "..." in error


def test_failure_reading_state_becomes_a_reply_not_an_exception(monkeypatch):
    def broken():
        raise RuntimeError("no state today")

    monkeypatch.setattr(kernel_comm, "snapshot", broken)
    answer = kernel_comm.reply({"request": "snapshot"})
    assert answer["type"] == "snapshot" and "no state today" in answer["reason"]


def run_fresh(code: str, env: dict | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", **ipython_dir()},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_registering_and_a_snapshot_before_jax_starts_do_not_import_jax():
    out = run_fresh("""
        import sys
        from jupyter_gpumem.kernel import comm as kernel_comm
        answer = kernel_comm.reply({"request": "snapshot"})
        print("jax" in sys.modules, answer["backend_started"], answer["devices"])
    """)
    assert out == "False False []"


def test_snapshot_after_jax_started_on_cpu_lists_devices_without_stats():
    out = run_fresh("""
        import jax.numpy as jnp
        jnp.zeros(4).block_until_ready()
        from jupyter_gpumem.kernel import comm as kernel_comm
        answer = kernel_comm.reply({"request": "snapshot"})
        dev = answer["devices"][0]
        print(answer["backend_started"], answer["platform"], dev["jax_id"], dev["bytes_in_use"], dev["fragmentation"])
    """)
    assert out == "True cpu 0 None None"


def test_snapshot_says_jax_runs_on_the_cpu_while_the_fake_world_shows_three_gpus():
    """The status bar's warning: no CUDA plugin here, so JAX starts on the CPU, while the drop-in
    pynvml (the fake three-GPU world, synthetic) lists three GPUs."""
    out = run_fresh(
        """
        import json
        import jax.numpy as jnp
        jnp.zeros(4).block_until_ready()
        from jupyter_gpumem.kernel import comm as kernel_comm
        answer = kernel_comm.reply({"request": "snapshot"})
        print(json.dumps([answer["platform"], answer["cpu_fallback"]["gpus"], answer["cpu_fallback"]["headline"],
                          answer["warnings"][0] == answer["cpu_fallback"]["sentence"]]))
    """,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": DROPIN_DIR,
            "JUPYTER_GPUMEM_FAKE_NVML": "three_gpus",
            **ipython_dir(),
        },
    )
    assert out.splitlines()[-1] == '["cpu", 3, "NVML sees 3 GPUs, but JAX runs on the CPU", true]'


def test_snapshot_has_no_cpu_fallback_when_the_user_asked_for_the_cpu():
    out = run_fresh(
        """
        import jax.numpy as jnp
        jnp.zeros(4).block_until_ready()
        from jupyter_gpumem.kernel import comm as kernel_comm
        print(kernel_comm.reply({"request": "snapshot"})["cpu_fallback"])
    """,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": DROPIN_DIR,
            "JUPYTER_GPUMEM_FAKE_NVML": "three_gpus",
            "JAX_PLATFORMS": "cpu",
        },
    )
    assert out.splitlines()[-1] == "None"


async def _comm_messages(kc, code: str, **kwargs) -> list[dict]:
    """The comm_open and comm_msg messages ``code`` sends on iopub (execute_interactive passes
    each iopub message of the request to its output_hook)."""
    got: list[dict] = []
    async with waking(kc.parent):
        reply = await kc.execute_interactive(
            code,
            timeout=WITHIN,
            output_hook=lambda m: got.append(m) if m["msg_type"].startswith("comm_") else None,
            **kwargs,
        )
    assert reply["content"]["status"] == "ok"
    return got


async def test_a_real_kernel_announces_the_load_and_pushes_after_each_cell():
    """ipykernel 7.4 with comm 0.2: the comm_open of the load and the pushes arrive on iopub,
    as JupyterLab's KernelConnection receives them; a silent execution pushes nothing."""
    km, kc = await started_kernel(env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        # The load cell's own end is pushed too: IPython runs a post_run_cell hook added during the cell.
        opened, load_cell_end = await _comm_messages(kc, "%load_ext jupyter_gpumem")
        assert opened["msg_type"] == "comm_open" and opened["content"]["target_name"] == "jupyter_gpumem"
        assert opened["content"]["data"]["event"] == "loaded"
        comm_id = opened["content"]["comm_id"]
        assert (load_cell_end["content"]["comm_id"], load_cell_end["content"]["data"]["event"]) == (comm_id, "cell_end")
        assert await _comm_messages(kc, "x = 1", silent=True) == []
        (push,) = await _comm_messages(kc, "y = 2")
        assert push["content"]["comm_id"] == comm_id
        assert (push["content"]["data"]["event"], push["content"]["data"]["backend_started"]) == ("cell_end", False)
        (push,) = await _comm_messages(kc, "import jax.numpy as jnp; jnp.zeros(2).block_until_ready()")
        assert (push["content"]["data"]["event"], push["content"]["data"]["backend_started"]) == ("jax_started", True)
        # The panel keeps the comm the kernel opened and asks on it.
        async with waking(km):
            kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"request": "snapshot"}}))
            while True:
                got = await kc.get_iopub_msg(timeout=WITHIN)
                if got["msg_type"] == "comm_msg" and got["content"]["data"].get("type") == "snapshot":
                    break
        assert got["content"]["comm_id"] == comm_id and got["content"]["data"]["platform"] == "cpu"
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def test_load_ext_registers_the_comm_a_real_kernel_answers_on():
    km, kc = await started_kernel()
    try:
        async with waking(km):
            reply = await kc.execute_interactive("%load_ext jupyter_gpumem", timeout=WITHIN)
            assert reply["content"]["status"] == "ok"
            msg = kc.session.msg(
                "comm_open", {"comm_id": "c1", "target_name": "jupyter_gpumem", "data": {"request": "snapshot"}}
            )
            kc.shell_channel.send(msg)
            while True:
                got = await kc.get_iopub_msg(timeout=WITHIN)
                if got["msg_type"] == "comm_msg" and got["content"]["comm_id"] == "c1":
                    break
        data = got["content"]["data"]
        assert data["type"] == "snapshot" and data["backend_started"] is False
        assert data["reason"]
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def test_snapshot_device_row_carries_the_allocator_stats_and_fragmentation(monkeypatch):
    from jupyter_gpumem.core.readings import AllocatorStats, JaxDeviceReading
    from jupyter_gpumem.settings import apply as allocator_shim

    # synthetic: a BFC pool of 1000 bytes, 400 in use, 450 in the largest free block
    stats = AllocatorStats(
        "bfc", bytes_in_use=400, peak_bytes_in_use=700, bytes_limit=2000, pool_bytes=1000, largest_free_block_bytes=450
    )
    reading = JaxDeviceReading(jax_id=0, platform="gpu", kind="Synthetic GPU", nvml_index=1, stats=stats)
    monkeypatch.setattr(allocator_shim, "read_jax_devices", lambda: (reading,))
    assert kernel_comm.snapshot()["devices"] == [
        {
            "jax_id": 0,
            "nvml_index": 1,
            "nvml_unmatched": None,
            "allocator": "bfc",
            "bytes_in_use": 400,
            "pool_bytes": 1000,
            "bytes_limit": 2000,
            "peak_bytes_in_use": 700,
            "largest_free_block_bytes": 450,
            "fragmentation": 0.25,
            "unused_pool_bytes": 600,
        }
    ]


def test_snapshot_under_cuda_async_takes_the_pool_from_the_driver(monkeypatch):
    """XLA's cudaMallocAsync allocator reports no pool_bytes (xla/stream_executor/gpu/
    gpu_cudamallocasync_allocator.cc, GetStats); the pool is the device's default CUDA pool, read
    from the driver as the monitor and the OOM report read it (model.pool_bytes)."""
    from jupyter_gpumem.core.readings import AllocatorStats, CudaPoolReading, JaxDeviceReading
    from jupyter_gpumem.settings import apply as allocator_shim

    # synthetic: 3 GiB reserved by the driver's pool, 1 GiB of it handed to JAX's arrays
    gib = 1 << 30
    stats = AllocatorStats("cuda_async", bytes_in_use=gib, peak_bytes_in_use=2 * gib)
    pool = CudaPoolReading(reserved_bytes=3 * gib, reserved_high_bytes=3 * gib, used_bytes=gib, used_high_bytes=2 * gib)
    reading = JaxDeviceReading(
        jax_id=0, platform="gpu", kind="Synthetic GPU", nvml_index=0, stats=stats, cuda_pool=pool
    )
    monkeypatch.setattr(allocator_shim, "read_jax_devices", lambda: (reading,))
    row = kernel_comm.snapshot()["devices"][0]
    assert (row["allocator"], row["pool_bytes"], row["unused_pool_bytes"], row["fragmentation"]) == (
        "cuda_async",
        3 * gib,
        2 * gib,
        None,
    )


def test_snapshot_offers_the_allocators_the_installed_jax_accepts_and_names_each_variable():
    """The panel keeps no list of its own: it offers what this kernel's JAX takes (found by asking
    jaxlib's generate_pjrt_gpu_plugin_options, as allocator_shim.accepted_allocators does)."""
    from jupyter_gpumem.settings.apply import accepted_allocators, fraction_var

    answer = kernel_comm.snapshot()
    assert answer["allocator_choices"] == list(accepted_allocators())
    assert {"default", "platform", "bfc", "cuda_async"} <= set(answer["allocator_choices"])
    table = {row["name"]: row["env_var"] for row in answer["settings_table"]}
    assert table == {
        "preallocate": "XLA_PYTHON_CLIENT_PREALLOCATE",
        "fraction": fraction_var(),
        "allocator": "XLA_PYTHON_CLIENT_ALLOCATOR",
        "async_prealloc": "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC",
        "remat": "jax.config.jax_compiler_enable_remat_pass",
    }
