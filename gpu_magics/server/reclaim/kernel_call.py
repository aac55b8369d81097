"""Asking a running kernel for one value, as the side panel's buttons run a line there: an ``execute_request`` on the
kernel's shell channel, silent and kept out of its history, whose ``user_expressions`` carry the answer back."""

from __future__ import annotations

import ast
import asyncio
import queue
import time
from typing import Any

from jupyter_core.utils import ensure_async

REPLY_KEY = "answer"
ACTIVITY_SETTLE_S = 0.5  # after the reply: the kernel's idle status has reached the server's own watch


class KernelCallError(Exception):
    """The kernel did not answer, or its expression failed (the message says which, in one line)."""


async def evaluate(kernel_manager: Any, kernel_id: str, expression: str, timeout: float) -> Any:
    """The value of ``expression`` in kernel ``kernel_id`` (a Python literal: dict, str, number, ``None``). The
    request leaves the kernel's idle clock for the server's culler as it was."""
    kernel = kernel_manager.get_kernel(kernel_id)
    before = getattr(kernel, "last_activity", None), getattr(kernel_manager, "last_kernel_activity", None)
    client = kernel.client()
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
    deadline = time.monotonic() + timeout
    try:
        msg_id = client.execute(
            "",
            silent=True,
            store_history=False,
            user_expressions={REPLY_KEY: expression},
            allow_stdin=False,
            stop_on_error=False,
        )
        reply = await _reply(client, msg_id, deadline, timeout)
    finally:
        client.stop_channels()
    await asyncio.sleep(ACTIVITY_SETTLE_S)
    _keep_idle_clock(kernel_manager, kernel, before)
    content = reply.get("content") or {}
    if content.get("status") != "ok":
        raise KernelCallError(f"the kernel answered {content.get('status')}: {content.get('evalue', '')}")
    found = (content.get("user_expressions") or {}).get(REPLY_KEY) or {}
    if found.get("status") != "ok":
        raise KernelCallError(f"{found.get('ename', 'error')}: {found.get('evalue', 'no answer')}")
    text = (found.get("data") or {}).get("text/plain", "None")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as error:
        raise KernelCallError(f"the kernel's answer is not a literal: {text[:200]!r}") from error


async def _reply(client: Any, msg_id: str, deadline: float, timeout: float) -> dict[str, Any]:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KernelCallError(f"the kernel did not answer within {timeout:.0f} s")
        try:
            reply: dict[str, Any] = await ensure_async(client.get_shell_msg(timeout=left))
        except (queue.Empty, TimeoutError):  # jupyter_client's way of saying nothing came in time
            continue
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return reply


def _keep_idle_clock(kernel_manager: Any, kernel: Any, before: tuple[Any, Any]) -> None:
    """Put back the kernel's last activity (what the culler counts from): the request was the server's, not the
    user's. Only while the kernel is idle, so a cell the user ran meanwhile still counts."""
    if getattr(kernel, "execution_state", None) != "idle":
        return
    if before[0] is not None:
        kernel.last_activity = before[0]
    if before[1] is not None:
        kernel_manager.last_kernel_activity = before[1]
