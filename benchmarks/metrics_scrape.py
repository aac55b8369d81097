"""What a Prometheus scrape of ``/metrics`` costs, against GPUs x kernels: the time to answer, and the refresh
(reading the records, off the scrape) that feeds it.

For each GPU count G and kernel count K: a ``jupyter server`` subprocess on G fake GPUs, K stand-in kernels (sleeping
processes, so their records count as live) each with its own record holding memory on every GPU and a cluster record
whose worker holds memory on every GPU too (2 x G x K kernel series). Once ``/metrics`` shows them all, ``--scrapes``
timed scrapes (the whole page, jupyter_server's own series too, over HTTP with the token); then the same records read
and built in this process, as the server's refresh does. Target: a scrape under 50 ms with 8 GPUs and 20 kernels.

    python benchmarks/metrics_scrape.py                      # 1, 8, 16 GPUs x 1, 20, 50 kernels
    python benchmarks/metrics_scrape.py --gpus 8 --kernels 20 --scrapes 500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TARGET_MS = 50.0
GIB = 2**30


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_records(directory: Path, pids: list[int], uuids: list[str]) -> None:
    from gpu_magics.cluster.records import record as records

    os.environ[records.RUNTIME_DIR_ENV] = str(directory)
    now = time.time()
    for number, pid in enumerate(pids):
        kernel_id = f"bench-{number:04d}"
        gpus = tuple({"index": i, "uuid": uuid, "name": "Fake GPU", "process_memory": GIB + number,
                      "array_memory": GIB // 2, "cached_memory": GIB // 2, "context_memory": number}
                     for i, uuid in enumerate(uuids))  # fmt: skip
        records.write_record(records.KernelRecord(gpus=gpus, pid=pid, kernel_id=kernel_id, started_at=now))
        worker = {"name": "0", "address": "tcp://127.0.0.1:1", "host": "127.0.0.1", "host_label": "bench-host",
                  "pid": 4_000_000 + number, "role": "worker", "time": now,
                  "gpus": [dict(gpu, process_memory=2 * GIB) for gpu in gpus]}  # fmt: skip
        cluster = records.ClusterRecord(name="bench", scheduler_address="tcp://127.0.0.1:1", dashboard_url=None,
                                        kind="gpu", workers=1, gpus=tuple(uuids), pid=pid, kernel_id=kernel_id,
                                        started_at=now, members=(worker,), idle_timeout=1800.0,
                                        idle_since=now)  # fmt: skip
        records.write_record(cluster, durable=False)


def fetch(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.read().decode())


def measure(gpus: int, kernels: int, scrapes: int) -> dict[str, Any]:
    from gpu_magics.monitor.fake_spec import fake_uuid

    uuids = [f"GPU-{fake_uuid(str(i))}" for i in range(gpus)]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        spec = tmp / "spec.json"
        spec.write_text(json.dumps({"gpus": [{"name": "Fake GPU", "uuid": u, "memory_total": 80 * GIB,
                                              "memory_used": 10 * GIB, "gpu_util": 0} for u in uuids]}))  # fmt: skip
        sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) for _ in range(kernels)]
        server = None
        try:
            write_records(tmp / "records", [p.pid for p in sleepers], uuids)
            token, port = os.urandom(8).hex(), _free_port()
            (tmp / "config").mkdir()
            (tmp / "config" / "jupyter_server_config.json").write_text(
                json.dumps({"ServerApp": {"jpserver_extensions": {"gpu_magics": True}}})
            )
            env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "rt"),
                   "GPU_MAGICS_SOURCE": f"fake:{spec}", "GPU_MAGICS_RUNTIME_DIR": str(tmp / "records"),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}  # fmt: skip
            server = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
                 f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}",
                 "--GpuMagicsServer.metrics_interval=1"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}/metrics"
            wanted = 2 * gpus * kernels
            deadline = time.monotonic() + 120
            while True:
                try:
                    text = fetch(url, token)
                    if text.count("gpu_magics_kernel_gpu_memory_bytes{") >= wanted:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"/metrics never showed {wanted} kernel series")
                time.sleep(0.5)
            times = []
            for _ in range(scrapes):
                start = time.perf_counter()
                text = fetch(url, token)
                times.append((time.perf_counter() - start) * 1000)
            refresh = time_refresh(uuids)
            times.sort()
            return {"gpus": gpus, "kernels": kernels, "series": text.count("\ngpu_magics_"),
                    "bytes": len(text), "scrape_median_ms": round(statistics.median(times), 2),
                    "scrape_p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
                    "refresh_ms": round(refresh, 2)}  # fmt: skip
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait(10)


def time_refresh(uuids: list[str], repeat: int = 20) -> float:
    """Median milliseconds of one refresh (records read, processes mapped, series built), in this process."""
    from gpu_magics.monitor.models import GpuReading, HostReading, Snapshot
    from gpu_magics.server.metrics.frame import build
    from gpu_magics.server.metrics.gather import gather
    from gpu_magics.server.metrics.idle import IdleHold
    from gpu_magics.server.metrics.labels import Place

    readings = tuple(GpuReading(index=i, nvml_index=i, name="Fake GPU", uuid=u, memory_total=80 * GIB,
                                memory_used=10 * GIB, gpu_util=0.0, memory_util=None, temperature=None, power=None,
                                power_limit=None, sm_clock=None, pcie_rx=None, pcie_tx=None, nvlink_rx=None,
                                nvlink_tx=None, processes=()) for i, u in enumerate(uuids))  # fmt: skip
    snapshot = Snapshot(time.time(), readings, HostReading(None, None, None, 1), None)
    idle, place, times = IdleHold(), Place.here(), []
    for _ in range(repeat):
        start = time.perf_counter()
        build(gather(snapshot, [], {}, {}, frozenset()), place, idle, idle_utilization=5.0, notebook_label=False)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,8,16", help="GPU counts, comma-separated")
    parser.add_argument("--kernels", default="1,20,50", help="kernel counts, comma-separated")
    parser.add_argument("--scrapes", type=int, default=200, help="timed scrapes per setup")
    args = parser.parse_args()
    rows = []
    for gpus in (int(n) for n in args.gpus.split(",")):
        for kernels in (int(n) for n in args.kernels.split(",")):
            row = measure(gpus, kernels, args.scrapes)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        f"{'GPUs':>5} {'kernels':>8} {'series':>7} {'kB':>6} {'scrape ms (median)':>19} {'p95':>7} {'refresh ms':>11}"
    )
    for row in rows:
        mark = " <- target 50 ms" if row["gpus"] == 8 and row["kernels"] == 20 else ""
        print(f"{row['gpus']:>5} {row['kernels']:>8} {row['series']:>7} {row['bytes'] / 1000:>6.1f} "
              f"{row['scrape_median_ms']:>19.2f} {row['scrape_p95_ms']:>7.2f} "
              f"{row['refresh_ms']:>11.2f}{mark}")  # fmt: skip


if __name__ == "__main__":
    main()
