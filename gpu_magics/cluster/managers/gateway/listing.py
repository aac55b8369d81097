"""``%gpucluster --gateway --list``: the user's clusters on the gateway and the cluster options it offers."""

from __future__ import annotations

from gpu_magics.cluster.managers.gateway.cluster_options import describe_options
from gpu_magics.cluster.managers.gateway.service import ask, close_gateway, command, make_gateway
from gpu_magics.cluster.options import PROG


def list_clusters(address: str | None, current: str | None) -> str:
    """``%gpucluster --gateway --list``: the user's running and pending clusters on the gateway, one a line, then
    the cluster options it offers (for ``--gateway-option``); each hint a line to copy."""
    gateway = make_gateway(address)
    try:
        reports = ask(gateway, gateway._clusters(), "list your clusters")
        offered = ask(gateway, gateway._cluster_options(), "list its cluster options")
    finally:
        close_gateway(gateway)
    options_line = f"cluster options ({command(address, '--gateway-option KEY=VALUE')}): {describe_options(offered)}"
    if not reports:
        empty = f"{PROG}: no clusters of yours on the gateway at {gateway.address} ({command(address, '')} makes one)"
        return f"{empty}\n{options_line}"
    lines = [f"{PROG}: your clusters on the gateway at {gateway.address}:"]
    for report in sorted(reports, key=lambda r: r.start_time):
        options = ", ".join(f"{key}={value}" for key, value in sorted((report.options or {}).items()))
        mark = " (in use here)" if report.name == current else ""
        lines.append(
            f"  {report.name}  {report.status.name.lower()}  since {report.start_time:%Y-%m-%d %H:%M}"
            + (f"  {options}" if options else "")
            + mark
        )
    others = [r.name for r in sorted(reports, key=lambda r: r.start_time) if r.name != current]
    if others:
        lines.append(f"{command(address, f'--connect {others[-1]}')} connects to the newest (any NAME above works)")
    lines.append(options_line)
    return "\n".join(lines)
