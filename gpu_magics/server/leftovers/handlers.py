"""``GET api/leftovers``: what kernels that have ended left on the server's GPUs; ``POST api/leftovers/end``: end
some of it (``{"processes": [{"pid": 123, "started": 1700000000.5}]}``, pid and start time as listed)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from functools import partial
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from gpu_magics.server.handlers import GpuMagicsHandler
from gpu_magics.server.leftovers.registry import Leftover, summary
from gpu_magics.server.leftovers.watch import LeftoverWatch

WATCH_KEY = "gpu_magics_leftovers"
MAX_ASKED = 1000


def leftovers_json(found: list[Leftover]) -> dict[str, Any]:
    return {"time": time.time(), "leftovers": [leftover.to_json() for leftover in found], "summary": summary(found)}


class LeftoversHandler(GpuMagicsHandler):
    """``GET leftovers``: processes on the GPUs whose kernel has ended, the bytes each holds, one line per GPU."""

    @property
    def watch(self) -> LeftoverWatch:
        watch: LeftoverWatch = self.settings[WATCH_KEY]
        return watch

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.reply(leftovers_json(await self.watch.current()))


class EndLeftoversHandler(LeftoversHandler):
    """``POST leftovers/end``: end the processes named, each only where it is still a leftover, its pid still names
    the process its kernel started (start time) and it is this user's; replies with what was done and what is left."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        asked = parse_asked(self.request.body)
        current = await self.watch.current()
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(None, partial(self.watch.registry.end, asked, current))
        self.reply({"results": [result.to_json() for result in results], **leftovers_json(await self.watch.current())})


def parse_asked(body: bytes) -> list[tuple[int, float]]:
    """The ``(pid, start time)`` pairs of a request body; 400 with one line saying what is wrong."""
    usage = 'send {"processes": [{"pid": PID, "started": START}]}, as api/leftovers lists them'
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise web.HTTPError(400, f"not JSON: {usage}") from None
    processes = data.get("processes") if isinstance(data, dict) else None
    if not isinstance(processes, list) or not 0 < len(processes) <= MAX_ASKED:
        raise web.HTTPError(400, f"no processes named (at most {MAX_ASKED}): {usage}")
    asked = []
    for item in processes:
        pid = item.get("pid") if isinstance(item, dict) else None
        started = item.get("started") if isinstance(item, dict) else None
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise web.HTTPError(400, f"a pid must be a positive whole number: {usage}")
        if isinstance(started, bool) or not isinstance(started, int | float) or not math.isfinite(started):
            raise web.HTTPError(400, f"pid {pid} needs its start time: {usage}")
        asked.append((pid, float(started)))
    return asked
