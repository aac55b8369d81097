"""Attaching to a scheduler this kernel did not start, and learning its workers' GPUs by asking them."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import inspection
from gpu_magics.units import one_line

if TYPE_CHECKING:
    from distributed import Client


def connect(address: str, timeout: float) -> Client:
    """A client of the scheduler at ``address``; a one-line ``UsageError`` when none answers there in
    ``timeout`` seconds, or when what answers is not a Dask scheduler."""
    from distributed import Client

    try:
        client = Client(address, timeout=timeout, set_as_default=True)
    except (OSError, TimeoutError) as error:
        raise UsageError(
            f"{PROG} --address {address}: no scheduler answered within {timeout:g} s ({one_line(error)})"
        ) from None
    except Exception as error:  # something answered, but not in Dask's protocol (a web server, say)
        raise UsageError(
            f"{PROG} --address {address}: what answered there is not a Dask scheduler ({one_line(error)})"
        ) from None
    if not _is_scheduler(client):
        with contextlib.suppress(Exception):
            client.close(timeout=2)
        raise UsageError(f"{PROG} --address {address}: what answered there is not a Dask scheduler")
    return client


def connect_manager(cluster: Any, timeout: float) -> Client:
    """A client of a cluster manager object's scheduler (with its security, as ``Client(cluster)`` takes it);
    a one-line ``UsageError`` when the scheduler does not answer."""
    from distributed import Client

    try:
        return Client(cluster, timeout=timeout, set_as_default=True)
    except Exception as error:
        raise UsageError(
            f"{PROG}: the scheduler of {type(cluster).__name__} did not answer within {timeout:g} s ({one_line(error)})"
        ) from None


def _is_scheduler(client: Client) -> bool:
    try:
        return isinstance(client.scheduler_info(n_workers=0), dict)
    except Exception:
        return False


def learn_gpus(client: Client, devices: dict[str, dict[str, Any]], addresses: set[str]) -> None:
    """Ask each worker at ``addresses`` not in ``devices`` yet (by name) which GPUs it has, from inside its
    process (its own ``CUDA_VISIBLE_DEVICES`` and NVML, or the fake its ``$GPU_MAGICS_SOURCE`` names), and
    add what it says to ``devices``."""
    from gpu_magics.cluster.telemetry.plugin import describe_gpus

    names = {
        address: str(info.get("name", address))
        for address, info in inspection.scheduler_workers(client).items()
        if address in addresses
    }
    unknown = [address for address, name in names.items() if name not in devices]
    if not unknown:
        return
    try:
        seen = client.run(describe_gpus, workers=unknown, on_error="return")
    except Exception:
        return
    for address, found in seen.items():
        if isinstance(found, BaseException) or not isinstance(found, list):
            continue
        first = found[0] if found else {}
        devices[names[address]] = {
            "gpu_name": first.get("name"),
            "gpu_memory_total": first.get("memory_total"),
            "gpus": found,
        }
