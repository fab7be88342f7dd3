"""Proof that a kernel is not running a cell, before the culler shuts it down.

jupyter_server takes a kernel's ``execution_state`` from every status message on iopub, those
that control-channel requests cause included (services/kernels/kernelmanager.py, 2.21.1): one
``list_subshell_request`` or debugger request sent to a kernel in the middle of a long cell makes
it read "idle". The kernel's shell cannot be fooled that way: ipykernel handles the main shell's
requests one at a time, so a ``kernel_info_request`` sent on the shell waits behind a running
cell (ipykernel 7.4.0, kernelbase.py ``shell_main``; seen here: no answer within 3 s during a
30 s ``time.sleep`` cell after a control request was answered, an answer at once after it ended).
An answer within the time limit proves the kernel free; no answer proves nothing, and the kernel
is kept.
"""

from __future__ import annotations

import inspect
import queue
import time
import uuid
from typing import Any

import zmq

# Long enough for an idle kernel on a loaded machine; a kernel kept now is asked again at the
# culler's next check.
SHELL_ANSWER_WITHIN = 10.0

# What asking a kernel can raise: no answer in time, a kernel gone or its sockets closed.
_NO_ANSWER = (queue.Empty, TimeoutError, RuntimeError, OSError, zmq.ZMQError)


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def shell_answers(kernel_manager: Any, within: float = SHELL_ANSWER_WITHIN) -> bool:
    """Whether the kernel's shell answers a ``kernel_info_request`` within ``within`` seconds,
    asked on a connection of its own, closed afterwards.

    Its own session id, too: every ``kernel_manager.client()`` connects under the manager's
    session id, and ipykernel's shell ROUTER sends a reply to whichever socket connected last
    under that identity, so a probe that shared it could take a reply meant for the notebook's
    own connection (jupyter_client 8.10 ``KernelClient``/``Session``; seen in this project's
    server tests, tests/awaiting.py ``own_client``)."""
    session = kernel_manager.session.clone()
    session.session = str(uuid.uuid4())
    client = kernel_manager.client(session=session)
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
    try:
        msg_id = client.kernel_info()
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            reply = await _maybe(client.get_shell_msg(timeout=left))
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return True
        return False
    except _NO_ANSWER:
        return False
    finally:
        client.stop_channels()
