"""Attaching to a scheduler this kernel did not start, and learning its workers' GPUs by asking them."""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING, Any

from gpu_magics.cluster.options import PROG
from gpu_magics.cluster.reading import inspection
from gpu_magics.text.errors import ServiceError
from gpu_magics.text.units import dropped, one_line

if TYPE_CHECKING:
    from distributed import Client


HANDSHAKE_GRACE_S = 2.0  # beyond --timeout, for what answered there to say it is a Dask scheduler


def connect(address: str, timeout: float) -> Client:
    """A client of the scheduler at ``address``; a one-line ``ServiceError`` when none answers there in
    ``timeout`` seconds, or when what answers is not a Dask scheduler (a web server, say: distributed would wait
    for its handshake forever)."""
    from distributed import Client

    not_dask = check_answers(address, timeout)
    try:
        client = Client(address, timeout=timeout, set_as_default=True)
    except (OSError, TimeoutError):
        raise ServiceError(f"{PROG} --address {address}: no scheduler answered within {timeout:g} s") from None
    except Exception as error:  # something answered, but not in Dask's protocol
        dropped("attaching to a scheduler", error)
        raise ServiceError(f"{not_dask} ({one_line(error)})") from None
    if not _is_scheduler(client):
        try:
            client.close(timeout=2)
        except Exception as error:  # a close that fails any way: the line says what answered
            dropped("closing the client of what is not a scheduler", error)
        raise ServiceError(not_dask)
    return client


def check_answers(address: str, timeout: float) -> str:
    """A one-line ``ServiceError`` unless something answers at ``address`` within ``timeout`` seconds with a Dask
    handshake (where the scheme can be probed); returns the line for what answers but is not a scheduler."""
    not_dask = f"{PROG} --address {address}: what answered there is not a Dask scheduler"
    refused = probe(address, timeout)
    if refused == NOT_DASK:
        raise ServiceError(not_dask)
    if refused is not None:
        raise ServiceError(f"{PROG} --address {address}: no scheduler answered within {timeout:g} s{refused}")
    return not_dask


NOT_DASK = "not dask"
_PROBED = ("tcp", "tls", "ws", "wss")  # the schemes this probes; others (ucx) go straight to the client


def probe(address: str, timeout: float) -> str | None:
    """Open one connection to ``address`` and read its handshake, bounded: ``None`` when a Dask peer answered,
    ``NOT_DASK`` when something answered but sent no handshake, else why nothing answered (``" (nothing listens
    there)"``, ``" (cannot resolve HOST)"`` or ``""``), to end a line with."""
    import asyncio
    import threading

    from distributed.comm import connect as open_comm
    from distributed.comm.addressing import parse_address
    from distributed.security import Security

    scheme, location = parse_address(address)
    if scheme not in _PROBED:
        return None
    arguments = Security().get_connection_args("client")

    async def attempt() -> str | None:
        task = asyncio.ensure_future(open_comm(address, timeout=timeout, **arguments))
        done, _ = await asyncio.wait({task}, timeout=timeout + HANDSHAKE_GRACE_S)
        if not done:  # connected, but no handshake came back
            task.cancel()
            return NOT_DASK
        try:
            comm = task.result()
        except Exception as error:  # a peer that is not Dask may answer anything: the line says what can be said
            dropped("probing a scheduler's address", error)
            return _why(error, location)
        with contextlib.suppress(OSError):  # a comm already closed
            await comm.close()
        return None

    outcome: list[str | None] = []

    def run() -> None:  # its own loop: the kernel's thread may be running one
        try:
            outcome.append(asyncio.run(attempt()))
        except Exception as error:  # the probe itself failed any way: the client says what it finds
            dropped("probing a scheduler's address", error)
            outcome.append(None)  # the probe itself failed: let the client say what it finds

    thread = threading.Thread(target=run, name="gpu-magics-probe", daemon=True)
    thread.start()
    thread.join(timeout + 2 * HANDSHAKE_GRACE_S)
    return outcome[0] if outcome else NOT_DASK


def _why(error: BaseException, location: str) -> str:
    """The end of the line for a failed connection: the first cause a user can act on, or nothing (a timeout is
    said by the line itself)."""
    from distributed.comm.addressing import parse_host_port

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return " (nothing listens there)"
        if isinstance(seen, socket.gaierror):
            host = location
            with contextlib.suppress(ValueError):  # not HOST:PORT
                host = str(parse_host_port(location)[0])
            return f" (cannot resolve {host})"
        seen = seen.__cause__ or seen.__context__
    with contextlib.suppress(ValueError, OSError):  # not HOST:PORT; refused is said, anything else is not
        host, port = parse_host_port(location)
        try:
            socket.create_connection((host, port), timeout=1).close()
        except ConnectionRefusedError:
            return " (nothing listens there)"
    return ""


def connect_manager(cluster: Any, timeout: float) -> Client:
    """A client of a cluster manager object's scheduler (with its security, as ``Client(cluster)`` takes it);
    a one-line ``ServiceError`` when the scheduler does not answer."""
    from distributed import Client

    try:
        return Client(cluster, timeout=timeout, set_as_default=True)
    except (OSError, ValueError) as error:  # no answer in time, a refused address; else the start's one line
        dropped("connecting to a cluster manager's scheduler", error)
        raise ServiceError(
            f"{PROG}: the scheduler of {type(cluster).__name__} did not answer within {timeout:g} s ({one_line(error)})"
        ) from None


def _is_scheduler(client: Client) -> bool:
    try:
        return isinstance(client.scheduler_info(n_workers=0), dict)
    except Exception as error:  # a peer that is not a scheduler may answer anything
        dropped("asking what answered for the scheduler's identity", error)
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
    except (OSError, RuntimeError):  # comm failed, timed out; loop gone (workers' errors return as values)
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
