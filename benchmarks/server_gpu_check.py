"""End-to-end check of the server extension on a GPU machine (real NVML), printing the endpoint responses.

Starts a jupyter-server with the gpu_magics extension, opens a notebook session whose kernel starts a GPU cluster
with ``%gpucluster`` and computes on it, then fetches every REST endpoint with the token (and once without).

    python benchmarks/server_gpu_check.py [--cpu-workers N]   # --cpu-workers: a CPU cluster, for machines without GPUs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch(url: str, token: str | None, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"token {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()[:200]


async def execute(base: str, token: str, kernel_id: str, code: str, timeout: float = 300) -> list[str]:
    """Run ``code`` in the kernel over its websocket; returns the text it printed or displayed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = base.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels"
    connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    message_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": message_id,
            "msg_type": "execute_request",
            "session": uuid.uuid4().hex,
            "username": "check",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
        "channel": "shell",
        "buffers": [],
    }
    await connection.write_message(json.dumps(request))
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = await asyncio.wait_for(connection.read_message(), timeout=deadline - time.monotonic())
        if raw is None:
            break
        message = json.loads(raw)
        if message.get("parent_header", {}).get("msg_id") != message_id:
            continue
        kind, content = message["header"]["msg_type"], message["content"]
        if kind == "stream":
            seen.append(content["text"])
        elif kind in ("display_data", "execute_result"):
            seen.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            seen.append("\n".join(content["traceback"]))
        elif kind == "execute_reply":
            break
    connection.close()
    return seen


def show(label: str, status: int, body: Any, limit: int = 3000) -> None:
    text = json.dumps(body, indent=1) if not isinstance(body, str) else body
    print(f"--- {label}: HTTP {status}\n{text[:limit]}{' ...' if len(text) > limit else ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu-workers", type=int, default=0)
    parser.add_argument("--n", type=int, default=40_000, help="side of the array the cluster holds")
    parser.add_argument(
        "--attach",
        action="store_true",
        help="attach to a cluster started with Dask's CLI (dask scheduler + dask cuda worker on the last GPU)",
    )
    args = parser.parse_args()
    if args.attach:
        from tests.cli_cluster import cli_cluster

        gpu = str(int(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")) - 1)
        workers = {"cli-worker": ("127.0.0.1", {"CUDA_VISIBLE_DEVICES": gpu, "GPU_MAGICS_SOURCE": "nvml"})}
        logs = tempfile.mkdtemp(prefix="gpu-magics-cli-")
        with cli_cluster(workers, Path(logs), worker_command=("dask", "cuda", "worker"), worker_args=()) as cli:
            check(args, f"--address {cli.address}", attached=True)
    else:
        start = f"--cpu-workers {args.cpu_workers}" if args.cpu_workers else "--no-dashboard"
        check(args, start, attached=False)


def check(args: argparse.Namespace, start: str, *, attached: bool) -> None:
    """Serve, start or attach the cluster from a notebook's kernel, compute, and fetch every endpoint."""
    token = secrets.token_hex(16)
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    workdir = tempfile.mkdtemp(prefix="gpu-magics-check-")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=os.path.join(workdir, "runtime"), GPU_MAGICS_SOURCE="nvml")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
            f"--port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={workdir}",
            "--ServerApp.jpserver_extensions={'gpu_magics': True}", "--GpuMagicsServer.interval=0.5",
        ],
        env=env,
    )  # fmt: skip
    failures = []
    try:
        for _ in range(120):
            try:
                if fetch(base + "api/status", token)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        status, session = fetch(
            base + "api/sessions",
            token,
            "POST",
            {"path": "gpu-check.ipynb", "type": "notebook", "name": "gpu-check.ipynb", "kernel": {"name": "python3"}},
        )
        kernel_id = session["kernel"]["id"]
        print(f"notebook gpu-check.ipynb, kernel {kernel_id}")
        code = f"%load_ext gpu_magics\n%gpucluster {start} --name check\n"
        print("".join(asyncio.run(execute(base, token, kernel_id, code))))
        cell = (
            "%%gpurun multi-gpu\nimport dask.array as da\n"
            f"y = da.random.normal(10, 1, size=({args.n}, {args.n}), chunks={args.n // 4})\n"
            "z = (y + 1).persist()\nz[::2, ::2].mean().compute()\n"
        )
        print("".join(asyncio.run(execute(base, token, kernel_id, cell))))
        time.sleep(8 if attached else 3)  # a slow-field read (processes), then the record takes it in
        for route in ("devices", "clusters", "processes", "history?limit=2"):
            status, body = fetch(base + f"gpu-magics/api/{route}", token)
            show(route, status, body)
            if status != 200:
                failures.append(route)
            if attached and route == "processes" and status == 200:
                joined = [row for row in body["processes"] if row["source"] != "nvml" and row["worker"]]
                print(f"    rows from the workers' own reports: {len(joined)}")
                if not joined:
                    failures.append("no self-reported worker row in processes")
            anonymous, _ = fetch(base + f"gpu-magics/api/{route}", None)
            print(f"    without a token: HTTP {anonymous}")
            if anonymous != 403:
                failures.append(f"{route} without a token gave {anonymous}")
        print("".join(asyncio.run(execute(base, token, kernel_id, "%gpucluster stop"))))
        fetch(base + f"api/sessions/{session['id']}", token, "DELETE")
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("failures:", failures or "none")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
