"""``%gpucluster``: start, inspect, scale and stop the kernel's Dask cluster (parse -> cluster -> display)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display
from traitlets import Bool, Float

from gpu_magics.cluster import lifecycle as cluster
from gpu_magics.cluster import shutdown
from gpu_magics.cluster.options import PROG, parse_cluster_line
from gpu_magics.display.cluster_view import ClusterView, DashboardLink


@magics_class
class ClusterMagics(Magics):
    """The ``%gpucluster`` line magic."""

    prestart_workers = Bool(
        True,
        help=(
            "At %load_ext, launch the process that %gpucluster's workers fork from, so that its imports "
            "(dask, distributed, dask-cuda, CuPy) are done before the first %gpucluster. It is idle, holds no "
            "GPU memory and exits with the kernel."
        ),
    ).tag(config=True)

    telemetry_interval = Float(
        1.0,
        help=(
            "Seconds between the GPU reports each worker sends to this kernel (utilization, memory, what its "
            "process holds), which feed the panels, %gpucluster status and the side panel. 0 turns them off."
        ),
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._client_names: set[str] = set()
        shutdown.install(shell)
        if self.prestart_workers:
            cluster.prestart_worker_server()

    @line_magic
    def gpucluster(self, line: str = "") -> None:
        """Start, inspect, scale or stop this kernel's Dask cluster.

        Usage::

          %gpucluster [start] [options]     one worker per GPU (dask-cuda LocalCUDACluster), warmed up
          %gpucluster --cpu-workers N       N CPU worker processes instead (machines without a GPU)
          %gpucluster --address tcp://host:port    attach to a running scheduler (stop only disconnects)
          %gpucluster status | stop | restart | scale N | dashboard

        Start options:
          --gpus all|0,2,3          GPUs to use, one worker each (default: all visible)
          --threads-per-worker N    threads per worker (default 4 for GPU workers, 1 for CPU workers)
          --device-memory-limit S   spill from GPU to host memory above S (10GB, or a fraction like 0.8)
          --rmm-pool-size S         RMM memory pool per GPU (needs rmm)
          --protocol tcp|ucx        communication protocol (default tcp; ucx, also spelt ucxx, needs
                                    distributed-ucxx)
          --dashboard/--no-dashboard   the Dask dashboard, on a free port (default on)
          --host HOST               address to bind scheduler, workers and dashboard (default 127.0.0.1)
          --name NAME               the cluster's name (shown in the JupyterLab panel)
          --timeout SECONDS         wait this long for a scheduler (attach, default 5) or workers (start, 120)
          --replace                 stop the running cluster and start a new one (default: reuse it)
          --client NAME             also put the Client in the namespace as NAME (any action)

        Workers fork from a process that ``%load_ext`` launched with their imports done
        (``%config ClusterMagics.prestart_workers = False`` turns it off) and warm their GPU while they register.
        The client is also ``gpu_magics.client()``; ``%%gpurun multi-gpu`` uses it. The cluster closes on
        ``%gpucluster stop``, ``%unload_ext gpu_magics`` and when the kernel exits; a cluster attached to with
        ``--address`` is never stopped from here.
        """
        options = parse_cluster_line(line)
        action = options.action
        if action == "stop":
            self._forget_client_names()
            print(cluster.stop())
            return
        if action == "start":
            info = cluster.start(options, telemetry_interval=max(0.0, self.telemetry_interval))
        elif action == "status":
            if cluster.active() is None:
                print(f"{PROG}: no cluster is running; start one with {PROG} or {PROG} --cpu-workers N")
                return
            info = cluster.status()
        elif action == "restart":
            info = cluster.restart()
        elif action == "scale":
            assert options.scale_to is not None
            info = cluster.scale(options.scale_to)
        else:  # dashboard
            url = cluster.dashboard_url()
            if url is None:
                print(f"{PROG}: the cluster has no dashboard (started with --no-dashboard, or bokeh missing)")
            else:
                display(DashboardLink(url))
            self._bind_client(options.client_name)
            return
        self._bind_client(options.client_name)
        display(ClusterView(info))

    def _bind_client(self, name: str | None) -> None:
        if name is None or self.shell is None:
            return
        self.shell.user_ns[name] = cluster.require_client()
        self._client_names.add(name)

    def _forget_client_names(self) -> None:
        client = cluster.active_client()
        if self.shell is not None and client is not None:
            for name in self._client_names:
                if self.shell.user_ns.get(name) is client:
                    del self.shell.user_ns[name]
        self._client_names.clear()

    def close(self) -> None:
        """Called on ``%unload_ext``: stop the cluster started here (or disconnect from an attached one)."""
        self._forget_client_names()
        shutdown.uninstall(self.shell)
        cluster.stop()
