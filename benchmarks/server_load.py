"""What the side panel costs the server: N websocket clients on the fake GPUs, at a given interval.

Starts ``jupyter server`` (fake GPUs, its own config and runtime dirs), connects N panels that ask for samples
every INTERVAL ms, and reports the messages each received per second, the server's CPU use, and REST latency
(``devices`` and ``processes``) while they are connected. Run: ``python benchmarks/server_load.py --clients 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(tmp: Path, gpus: int, token: str, port: int) -> subprocess.Popen[bytes]:
    config = tmp / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"gpu_magics": True}}})
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "GPU_MAGICS_SOURCE": f"fake:{gpus}",
        "GPU_MAGICS_RUNTIME_DIR": str(tmp / "records"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    args = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}",
            "--GpuMagicsServer.interval=0.1"]  # fmt: skip
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_ready(base: str, token: str) -> None:
    client = AsyncHTTPClient()
    for _ in range(200):
        try:
            await client.fetch(f"{base}api/status", headers={"Authorization": f"token {token}"})
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise RuntimeError("the server did not start")


async def panel(url: str, token: str, interval_ms: int, seconds: float) -> int:
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    await ws.write_message(json.dumps({"type": "configure", "interval": interval_ms}))
    received = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(ws.read_message(), left)
        except TimeoutError:
            break
        if message is None:
            break
        received += json.loads(message)["type"] == "snapshot"
    ws.close()
    return received


async def latency(base: str, token: str, route: str, count: int) -> list[float]:
    client = AsyncHTTPClient()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await client.fetch(f"{base}gpu-magics/api/{route}", headers={"Authorization": f"token {token}"})
        times.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.05)
    return times


async def run(clients: int, interval_ms: int, seconds: float, gpus: int) -> None:
    token, port = os.urandom(12).hex(), _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), gpus, token, port)
        try:
            base = f"http://127.0.0.1:{port}/"
            await wait_ready(base, token)
            process = psutil.Process(server.pid)
            await latency(base, token, "devices", 3)  # start the sampler
            process.cpu_percent()
            idle_wait = 2.0
            await asyncio.sleep(idle_wait)
            idle_cpu = process.cpu_percent()
            url = f"ws://127.0.0.1:{port}/gpu-magics/api/ws"
            counts, devices, processes = await asyncio.gather(
                asyncio.gather(*(panel(url, token, interval_ms, seconds) for _ in range(clients))),
                latency(base, token, "devices", int(seconds * 4)),
                latency(base, token, "processes", int(seconds * 4)),
            )
            busy_cpu = process.cpu_percent()
            rates = [count / seconds for count in counts]
            print(f"{clients} panels x {gpus} fake GPUs, asking every {interval_ms} ms, for {seconds:.0f} s")
            print(f"  messages per panel per s: median {statistics.median(rates):.1f} "
                  f"(min {min(rates):.1f}, expected {1000 / interval_ms:.1f})")  # fmt: skip
            print(f"  server CPU: {idle_cpu:.1f}% sampling alone, {busy_cpu:.1f}% with the panels (one core = 100%)")
            for name, values in (("devices", devices), ("processes", processes)):
                values.sort()
                print(f"  GET {name}: median {statistics.median(values):.1f} ms, "
                      f"p95 {values[int(0.95 * (len(values) - 1))]:.1f} ms")  # fmt: skip
        finally:
            server.terminate()
            server.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--interval", type=int, default=250, help="ms each panel asks for (>= 100)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gpus", type=int, default=8)
    options = parser.parse_args()
    asyncio.run(run(options.clients, options.interval, options.seconds, options.gpus))


if __name__ == "__main__":
    main()
