"""Steps the culling tests share, through the server's REST API: start a kernel for a
notebook, read its pid, wait until it is shut down."""

from __future__ import annotations

import json

from awaiting import until


async def start_kernel(jp_fetch, path):
    body = json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}})
    response = await jp_fetch("api", "sessions", method="POST", body=body)
    return json.loads(response.body)["kernel"]["id"]


async def kernel_pid(jp_fetch, kernel_id):
    """The kernel's pid from /kernels, once its list (shared for half a second) names it."""

    async def listed():
        body = json.loads((await jp_fetch("jupyter-gpumem", "api", "kernels")).body)
        return next((k["pid"] for k in body["kernels"] if k["kernel_id"] == kernel_id), None)

    return await until(listed, "the kernel in /kernels", every=0.2)


async def running_kernels(jp_fetch):
    return {k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)}


async def shut_down(jp_fetch, kernel_id):
    """Returns once the server no longer lists the kernel."""
    await until(lambda: gone(jp_fetch, kernel_id), f"kernel {kernel_id} shut down", every=0.2)


async def gone(jp_fetch, kernel_id):
    return kernel_id not in await running_kernels(jp_fetch)
