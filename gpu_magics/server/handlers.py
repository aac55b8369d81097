"""REST endpoints under ``/gpu-magics/api/``: devices, history, clusters, processes; each authenticated and
authorized on the ``gpu_magics`` resource. GETs only read; the one state change (pruning stale cluster records)
is a POST, so it needs the XSRF token as well as a logged-in user."""

from __future__ import annotations

import asyncio
import math
import os
from functools import partial
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpu_magics.cluster.dashboard import links
from gpu_magics.cluster.records.record import ClusterRecord, list_kernel_records, list_records
from gpu_magics.server.config import GpuMagicsServer
from gpu_magics.server.jsonutil import dumps
from gpu_magics.server.ownership.kernels import (
    elsewhere_json,
    kernel_paths,
    kernel_pids,
    not_ours,
    ours,
    running_kernel_ids,
)
from gpu_magics.server.ownership.memory_caps import with_caps
from gpu_magics.server.ownership.owners import map_owners, others_on_gpus, with_self_reports
from gpu_magics.server.ownership.whereabouts import places_of, with_users, with_whereabouts
from gpu_magics.server.service import MonitorService
from gpu_magics.text import hints

AUTH_RESOURCE = "gpu_magics"
SERVICE_KEY = "gpu_magics_service"
MAX_HISTORY_LIMIT = 100_000


def config_json(config: GpuMagicsServer) -> dict[str, Any]:
    """The settings the panel shows, and what its hints need: the command for a CPU cluster here (the same N as
    the kernels' hints) and whether CuPy and dask-cuda are installed (plain ``%gpucluster`` needs them)."""
    return {
        "interval": round(config.interval * 1000),
        "slow_interval": round(config.slow_interval * 1000),
        "history": config.history,
        "source": config.source,
        "cpu_cluster": hints.cpu_cluster_command(),
        "gpu_packages": hints.gpu_packages_installed(),
    }


class GpuMagicsHandler(APIHandler):
    """Base of the REST handlers: the shared service, JSON replies."""

    auth_resource = AUTH_RESOURCE

    @property
    def service(self) -> MonitorService:
        service: MonitorService = self.settings[SERVICE_KEY]
        return service

    def reply(self, data: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(dumps(data))


class DevicesHandler(GpuMagicsHandler):
    """``GET devices``: the server's settings and the newest snapshot (every GPU, the host, the status).

    Never waits long for a GPU read: when the first one has not finished in ``FIRST_READ_WAIT`` (0.3 s), the
    snapshot is a placeholder with no GPU and the status ``starting: ...`` (the websocket brings the real one). The
    first request after the sampler's standby (no one watched for a minute) gets a reading taken then; when that
    takes over ``STANDBY_READ_WAIT`` (10 s), the snapshot before the standby, with the status ``stale: read ...
    ago, ...``."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        snapshot = await self.service.current()
        self.reply({"config": config_json(self.service.config), "snapshot": snapshot.to_json()})


class HistoryHandler(GpuMagicsHandler):
    """``GET history?since=T&limit=N``: buffered snapshots after ``T`` (seconds since the epoch), oldest first."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        since = self._number("since")
        limit = self._number("limit")
        if limit is not None and (limit != int(limit) or not 0 <= limit <= MAX_HISTORY_LIMIT):
            raise web.HTTPError(400, f"limit must be a whole number from 0 to {MAX_HISTORY_LIMIT}")
        snapshots = self.service.history(since, None if limit is None else int(limit))
        self.reply({"config": config_json(self.service.config), "snapshots": [s.to_json() for s in snapshots]})

    def _number(self, name: str) -> float | None:
        text = self.get_argument(name, None)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            raise web.HTTPError(400, f"{name} must be a number") from None
        if not math.isfinite(value):
            raise web.HTTPError(400, f"{name} must be a finite number")
        return value


class ClustersHandler(GpuMagicsHandler):
    """``GET clusters``: the clusters this server's kernels started or attached to (their discovery records), with
    their notebooks; under ``elsewhere``, those of the user's kernels that this server does not run (another
    server's, jupyter_client's), with where they run."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        records = await asyncio.get_running_loop().run_in_executor(None, partial(list_records, clean=False))
        self.reply(await self._describe(records))

    async def _describe(self, records: list[ClusterRecord]) -> dict[str, Any]:
        running = running_kernel_ids(self.kernel_manager)
        others = not_ours(records, running)
        places = await asyncio.get_running_loop().run_in_executor(None, partial(places_of, others))
        return {
            "clusters": await self._ours(ours(records, running), running),
            "elsewhere": [
                {**elsewhere_json(record), "notebook": place.notebook, "server": place.server}
                for record, place in zip(others, places, strict=True)
            ],
        }

    async def _ours(self, records: list[ClusterRecord], running: set[str]) -> list[dict[str, Any]]:
        paths = await kernel_paths(self.session_manager)
        proxy = links.proxy_available()
        described = []
        for record in records:
            link = links.link_for(
                record.dashboard_url,
                base_url=self.base_url,
                proxy=proxy,
                remote_browser=bool(os.environ.get(links.HUB_PREFIX_ENV)),
            )
            described.append(
                {
                    **record.to_json(),
                    "dashboard_link": link.url,
                    "dashboard_note": link.note,
                    "path": paths.get(record.kernel_id or ""),
                    "kernel_running": record.kernel_id in running,
                }
            )
        return described


class PruneClustersHandler(ClustersHandler):
    """``POST clusters/prune``: remove records (of clusters and of kernels) whose process has gone; replies with
    the clusters left."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, partial(list_records, clean=True))
        await loop.run_in_executor(None, partial(list_kernel_records, clean=True))
        self.reply(await self._describe(records))


class ProcessesHandler(GpuMagicsHandler):
    """``GET processes``: GPU memory by process, with the kernel, notebook and cluster that hold it; the processes of
    the user's kernels that this server does not run (another server's, jupyter_client's) come apart, under
    ``elsewhere`` (they are the user's, not others' work, but not this server's notebooks')."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        snapshot = await self.service.newest()  # after a standby, read afresh (processes too)
        pids = kernel_pids(self.kernel_manager)
        paths = await kernel_paths(self.session_manager)
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, partial(list_records, clean=False))
        kernels = await loop.run_in_executor(None, partial(list_kernel_records, clean=False))
        holders = await loop.run_in_executor(
            None, partial(map_owners, snapshot, kernel_pids=pids, records=records, paths=paths)
        )
        holders = with_self_reports(holders, records, paths, snapshot, kernels)
        holders = with_caps(holders, self.service.config.cap(), snapshot, kernels)
        unreadable = [] if snapshot is None else [g.index for g in snapshot.gpus if g.processes is None]
        running = running_kernel_ids(self.kernel_manager)
        ours_or_others = [h for h in holders if h.role == "other" or h.kernel_id in running]
        elsewhere = [h for h in holders if h.role != "other" and h.kernel_id not in running]
        simulated = self.service.config.source == "fake"
        ours_or_others = await loop.run_in_executor(None, partial(with_users, ours_or_others, simulated))
        elsewhere = await loop.run_in_executor(None, partial(with_whereabouts, elsewhere, records, kernels))
        self.reply(
            {
                "time": None if snapshot is None else snapshot.time,
                "status": None if snapshot is None else snapshot.status,
                "processes": [holder.to_json() for holder in ours_or_others],
                "elsewhere": [holder.to_json() for holder in elsewhere],
                "unreadable_gpus": unreadable,
                "others": others_on_gpus(snapshot, holders),
                "reporting_kernels": sorted(k.kernel_id for k in kernels if k.kernel_id in running),
            }
        )
