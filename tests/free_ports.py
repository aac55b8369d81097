"""Ports for the servers the tests start, on a port given to them before they start (jupyter-server, Prometheus,
dask-gateway, a Dask dashboard), or for an address nobody listens on. They are drawn as the package draws its SPMD
rendezvous ports (``gpu_magics.spmd.worker.host.free_ports_on``): at random below the host's ephemeral range. A port
probed with ``bind(0)`` is in that range, where the kernel may hand it to another process's ``bind(0)`` or outgoing
connection before the server binds it (``EADDRINUSE`` on a busy machine). Where the server under test can listen on
port 0 itself and say which port it got (``dask scheduler --scheduler-file``), the tests let it: no race at all."""

from __future__ import annotations

from gpu_magics.spmd.worker.host import free_ports_on


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on ``host``, below its ephemeral range."""
    return free_ports_on(host, 1)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now on ``host``, below its ephemeral range."""
    return free_ports_on(host, count)
