"""Moving data between workers over each protocol: an all-to-all rechunk of a persisted array, timed, with the
bytes moved counted twice, by the workers themselves (``Worker.transfer_incoming_log``) and by the magic's time
split (the scheduler's record of what each task fetched), and the rate against the link's limit.

    python benchmarks/transfers.py --protocols tcp,ucx          # every visible GPU, a 40000^2 float64 (12.8 GB) array
    python benchmarks/transfers.py --cpu-workers 2 --n 4000 --protocols tcp     # tiny, on a machine without a GPU

Each protocol gets its own ``%gpucluster --protocol P``; the array is made and persisted in row chunks, then
rechunked to column chunks by tasks (every worker sends to every other), ``--repeat`` times. ``--limit-gbs`` is
the link's limit per direction (NVLink 4 on H100/H200: about 450 GB/s per GPU) for the last column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

MAKE = "t_x = da.random.random(({n}, {n}), chunks=({rows}, {n})).persist()\nwait(t_x)\n"
MOVE = "t_y = t_x.rechunk(({n}, {rows}), method='tasks').persist()\nwait(t_y)\ndel t_y\n"


def incoming_bytes(dask_worker: Any) -> int:
    """Run on a worker: bytes it has received from other workers so far."""
    return int(sum(entry.get("total", 0) for entry in dask_worker.transfer_incoming_log))


def measure(ip: InteractiveShell, protocol: str, args: argparse.Namespace) -> dict[str, Any]:
    from gpu_magics.cluster.control import queries

    start = f"--cpu-workers {args.cpu_workers}" if args.cpu_workers else ""
    with capture_output():
        ip.run_line_magic("gpucluster", f"{start} --protocol {protocol} --no-dashboard --replace")
    client = queries.require_client()
    workers = len(client.scheduler_info(n_workers=-1)["workers"])
    rows = -(-args.n // workers)
    with capture_output():
        ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor", MAKE.format(n=args.n, rows=rows))
    times, counted, split_bytes = [], [], []
    for _ in range(args.repeat):
        before = sum(client.run(incoming_bytes).values())
        began = time.perf_counter()
        with capture_output():
            ip.run_cell_magic("gpurun", "multi-gpu -q --no-monitor -o t_move", MOVE.format(n=args.n, rows=rows))
        times.append(time.perf_counter() - began)
        counted.append(sum(client.run(incoming_bytes).values()) - before)
        result = ip.user_ns["t_move"]
        split_bytes.append(result.split.transfer_bytes if result.split is not None else 0)
    median = statistics.median(times)
    moved = statistics.median(counted)
    row = {
        "protocol": protocol,
        "workers": workers,
        "median_s": median,
        "bytes_workers_counted": moved,
        "bytes_split_counted": statistics.median(split_bytes),
        "gb_per_s_received": moved / median / 1e9,
    }
    if args.limit_gbs:
        row["share_of_limit"] = row["gb_per_s_received"] / (args.limit_gbs * workers)
    with capture_output():
        ip.run_line_magic("gpucluster", "stop")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40_000)
    parser.add_argument("--protocols", default="tcp,ucx")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu-workers", type=int, default=0)
    parser.add_argument("--limit-gbs", type=float, default=450.0, help="the link's GB/s per worker and direction")
    parser.add_argument("--json")
    args = parser.parse_args()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gpu_magics")
    ip.run_cell("import dask.array as da\nfrom distributed import wait", store_history=False)
    rows = []
    for protocol in [p for p in args.protocols.split(",") if p]:
        try:
            rows.append(measure(ip, protocol, args))
        except Exception as error:  # a protocol this machine lacks (no distributed-ucxx): say so, go on
            print(f"{protocol}: not measured ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
    print(f"all-to-all rechunk of {args.n}^2 float64 ({args.n**2 * 8 / 1e9:.1f} GB), median of {args.repeat}")
    print(
        f"{'protocol':8} {'workers':>7} {'seconds':>8} {'GB moved':>9} {'split GB':>9} {'GB/s in':>8} {'of limit':>8}"
    )
    for row in rows:
        print(
            f"{row['protocol']:8} {row['workers']:>9} {row['median_s']:9.3f} {row['bytes_workers_counted'] / 1e9:9.2f} "
            f"{row['bytes_split_counted'] / 1e9:9.2f} {row['gb_per_s_received']:9.2f} "
            f"{row.get('share_of_limit', 0) * 100:8.1f}%"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
