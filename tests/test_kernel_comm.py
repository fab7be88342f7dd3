"""The kernel side of the jupyter_gpumem comm: registration and the snapshot reply."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from jupyter_client.manager import start_new_async_kernel

from jupyter_gpumem import kernel_comm

from doubles import FakeComm, FakeCommManager, FakeShell


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


def test_unknown_request_is_answered_with_the_valid_requests():
    assert kernel_comm.reply({"request": "explode"}) == {
        "type": "error", "error": "unknown request 'explode'; valid requests: snapshot"}


def test_failure_reading_state_becomes_a_reply_not_an_exception(monkeypatch):
    def broken():
        raise RuntimeError("no state today")

    monkeypatch.setattr(kernel_comm, "snapshot", broken)
    answer = kernel_comm.reply({"request": "snapshot"})
    assert answer["type"] == "snapshot" and "no state today" in answer["reason"]


def run_fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_registering_and_a_snapshot_before_jax_starts_do_not_import_jax():
    out = run_fresh("""
        import sys
        from jupyter_gpumem import kernel_comm
        answer = kernel_comm.reply({"request": "snapshot"})
        print("jax" in sys.modules, answer["backend_started"], answer["devices"])
    """)
    assert out == "False False []"


def test_snapshot_after_jax_started_on_cpu_lists_devices_without_stats():
    out = run_fresh("""
        import jax.numpy as jnp
        jnp.zeros(4).block_until_ready()
        from jupyter_gpumem import kernel_comm
        answer = kernel_comm.reply({"request": "snapshot"})
        dev = answer["devices"][0]
        print(answer["backend_started"], answer["platform"], dev["jax_id"], dev["bytes_in_use"], dev["fragmentation"])
    """)
    assert out == "True cpu 0 None None"


async def test_load_ext_registers_the_comm_a_real_kernel_answers_on():
    km, kc = await start_new_async_kernel(kernel_name="python3")
    try:
        reply = await kc.execute_interactive("%load_ext jupyter_gpumem", timeout=60)
        assert reply["content"]["status"] == "ok"
        msg = kc.session.msg("comm_open", {"comm_id": "c1", "target_name": "jupyter_gpumem",
                                           "data": {"request": "snapshot"}})
        kc.shell_channel.send(msg)
        while True:
            got = await kc.get_iopub_msg(timeout=30)
            if got["msg_type"] == "comm_msg" and got["content"]["comm_id"] == "c1":
                break
        data = got["content"]["data"]
        assert data["type"] == "snapshot" and data["backend_started"] is False
        assert data["reason"]
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def test_snapshot_device_row_carries_the_allocator_stats_and_fragmentation(monkeypatch):
    from jupyter_gpumem import allocator_shim
    from jupyter_gpumem.model import AllocatorStats, JaxDeviceReading

    # synthetic: a BFC pool of 1000 bytes, 400 in use, 450 in the largest free block
    stats = AllocatorStats("bfc", bytes_in_use=400, peak_bytes_in_use=700, bytes_limit=2000, pool_bytes=1000,
                           largest_free_block_bytes=450)
    reading = JaxDeviceReading(jax_id=0, platform="gpu", kind="Synthetic GPU", nvml_index=1, stats=stats)
    monkeypatch.setattr(allocator_shim, "read_jax_devices", lambda: (reading,))
    assert kernel_comm.snapshot()["devices"] == [{
        "jax_id": 0, "nvml_index": 1, "nvml_unmatched": None, "allocator": "bfc", "bytes_in_use": 400, "pool_bytes": 1000,
        "bytes_limit": 2000, "peak_bytes_in_use": 700, "largest_free_block_bytes": 450, "fragmentation": 0.25,
        "unused_pool_bytes": 600,
    }]


def test_snapshot_under_cuda_async_takes_the_pool_from_the_driver(monkeypatch):
    """XLA's cudaMallocAsync allocator reports no pool_bytes (xla/stream_executor/gpu/
    gpu_cudamallocasync_allocator.cc, GetStats); the pool is the device's default CUDA pool, read
    from the driver as the monitor and the OOM report read it (model.pool_bytes)."""
    from jupyter_gpumem import allocator_shim
    from jupyter_gpumem.model import AllocatorStats, CudaPoolReading, JaxDeviceReading

    # synthetic: 3 GiB reserved by the driver's pool, 1 GiB of it handed to JAX's arrays
    gib = 1 << 30
    stats = AllocatorStats("cuda_async", bytes_in_use=gib, peak_bytes_in_use=2 * gib)
    pool = CudaPoolReading(reserved_bytes=3 * gib, reserved_high_bytes=3 * gib, used_bytes=gib, used_high_bytes=2 * gib)
    reading = JaxDeviceReading(jax_id=0, platform="gpu", kind="Synthetic GPU", nvml_index=0, stats=stats, cuda_pool=pool)
    monkeypatch.setattr(allocator_shim, "read_jax_devices", lambda: (reading,))
    row = kernel_comm.snapshot()["devices"][0]
    assert (row["allocator"], row["pool_bytes"], row["unused_pool_bytes"], row["fragmentation"]) == ("cuda_async", 3 * gib, 2 * gib, None)


def test_snapshot_offers_the_allocators_the_installed_jax_accepts_and_names_each_variable():
    """The panel keeps no list of its own: it offers what this kernel's JAX takes (found by asking
    jaxlib's generate_pjrt_gpu_plugin_options, as allocator_shim.accepted_allocators does)."""
    from jupyter_gpumem.allocator_shim import accepted_allocators, fraction_var

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
