"""The seed on 1, 2, 4... GPUs against the best one-GPU path, in one process on one machine, with where each
multi-GPU cell's time goes.

For each GPU count a ``%gpucluster`` of that many GPUs starts and ``%%gpurun multi-gpu`` cells of the seed (drawn
from ``RandomState(42)``) run ``--repeat`` warm times; the median, the tasks per cell and the magic's own split of
the workers' time are printed, with the speed-up over ``%%gpurun gpu`` (one GPU, dask's threads, measured first
in the same process) and whether the mean agrees with ``gpu``'s to 1e-6 relative (the same generator and seeds:
it must). A lever under test goes in as ``--config KEY=VALUE`` (dask config, a Python literal), measured
alternately with the default in the same cells. Plain ``LocalCUDACluster`` rows come from
``seed_workload.py --multi-gpu`` (fresh processes).

    python benchmarks/four_gpus.py [--counts 1,2,4] [--n 100000] [--chunk 10000] [--repeat 7] [--json FILE]
        [--config distributed.scheduler.worker-saturation=1.1] [--timeline]

``--timeline`` prints, for one warm cell at each count, when the graph reached the scheduler and was made into
tasks there and each worker's tasks (start and end, ms from the cell's start, in one clock: one host).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from IPython.utils.capture import capture_output

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTS = ("compute", "transfers", "scheduling", "client", "result")

CELL = (
    "x = da.random.RandomState(42).normal(10, 1, size=({n}, {n}), chunks={chunk})\n"
    "t_mean = float((x + 1)[::2, ::2].mean().compute())\n"
)


def run(ip: Any, line: str, cell: str) -> tuple[float, Any]:
    """The cell's wall time through the magic and its result, once the cluster's scheduler holds nothing of the
    cell before (the client lets go of it asynchronously; a cell with the same keys would reuse what is held)."""
    from gpu_magics.cluster.control import queries

    current = queries.in_use()
    scheduler = None if current is None else queries.local_scheduler(current.client)
    for _ in range(500):
        if scheduler is None or not scheduler.tasks:
            break
        time.sleep(0.01)
    with capture_output():
        began = time.perf_counter()
        ip.run_cell_magic("gpurun", f"{line} -q --no-monitor -o t_result", cell)
        took = time.perf_counter() - began
    return took, ip.user_ns["t_result"]


class GraphArrival:
    """A scheduler plugin that notes when each graph has been made into tasks there (``update_graph`` runs after
    the scheduler materialized and optimized it)."""

    name = "four-gpus-graph-arrival"

    def __init__(self) -> None:
        self.times: list[float] = []

    def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
        self.times.append(time.time())


ARRIVALS = "four-gpus-arrivals"


def arrivals_plugin() -> Any:
    """A worker plugin that notes when each task of the cell reached the worker and when it became ready."""
    from distributed import WorkerPlugin

    class Arrivals(WorkerPlugin):
        name = ARRIVALS

        def setup(self, worker: Any) -> None:
            self.seen: list[tuple[float, str, str]] = []

        def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
            if finish in ("waiting", "ready") and start in ("released", "waiting"):
                self.seen.append((time.time(), str(key), finish))

    return Arrivals()


def _arrivals(dask_worker: Any) -> list[tuple[float, str, str]]:
    plugin = dask_worker.plugins[ARRIVALS]
    seen, plugin.seen = plugin.seen, []
    return seen


def _traced_writes() -> tuple[list[tuple[float, float, int, str]], Any]:
    """Note every message this process (the kernel, and the scheduler it runs) writes: when, for how long, bytes,
    to whom; returns the notes and a function that stops noting."""
    import distributed.comm.tcp as tcp

    notes: list[tuple[float, float, int, str]] = []
    original = tcp.TCP.write

    async def write(self: Any, msg: Any, serializers: Any = None, on_error: str = "message") -> int:
        began = time.time()
        sent = await original(self, msg, serializers, on_error)
        ops = [part.get("op") for part in msg] if isinstance(msg, list) else [getattr(msg, "get", lambda _: None)("op")]
        notes.append((began, time.time() - began, sent, f"{','.join(map(str, ops))[:24]}->{self.peer_address[-5:]}"))
        return sent

    tcp.TCP.write = write  # type: ignore[method-assign]

    def stop() -> None:
        tcp.TCP.write = original  # type: ignore[method-assign]

    return notes, stop


def timeline(ip: Any, cell: str) -> str:
    """One warm cell's timeline: graph on the scheduler, each worker's tasks, the result (ms from the start)."""
    from dask.utils import key_split
    from distributed import get_task_stream

    from gpu_magics.cluster.control import queries

    client = queries.active_client()
    assert client is not None
    cluster: Any = getattr(client, "cluster", None)
    scheduler = None if cluster is None else cluster.scheduler
    arrival = GraphArrival()
    if scheduler is not None:
        scheduler.add_plugin(arrival, name=arrival.name)
    client.register_plugin(arrivals_plugin(), name=ARRIVALS)
    client.run(_arrivals)
    writes, stop_tracing = _traced_writes()
    began = time.time()
    try:
        with get_task_stream(client) as stream:
            took, _ = run(ip, "multi-gpu", cell)
    finally:
        stop_tracing()
    graph_metrics = ""
    if scheduler is not None:
        scheduler.remove_plugin(name=arrival.name)
        updates = [msg for _, msg in scheduler.get_events("scheduler") if msg.get("action") == "update-graph"]
        if updates and "metrics" in updates[-1]:
            said = updates[-1]["metrics"]
            graph_metrics = (
                f" (update_graph began at {(said['start_timestamp_seconds'] - began) * 1e3:.1f}: materialized in "
                f"{said['materialization_duration_seconds'] * 1e3:.1f} ms, tasks made by "
                f"{said['duration_seconds'] * 1e3:.1f} ms)"
            )
    arrived = client.run(_arrivals)
    client.unregister_worker_plugin(ARRIVALS)
    per_worker: dict[str, list[tuple[float, float, str]]] = {}
    for task in stream.data:
        for span in task.get("startstops", ()):
            if span.get("action") == "compute":
                per_worker.setdefault(task["worker"], []).append(
                    ((span["start"] - began) * 1e3, (span["stop"] - began) * 1e3, key_split(task["key"]))
                )
    lines = [
        f"wall {took * 1e3:.1f} ms; graph on the scheduler at "
        + ", ".join(f"{(t - began) * 1e3:.1f}" for t in arrival.times)
        + graph_metrics
    ]
    for worker, spans in sorted(per_worker.items()):
        spans.sort()
        busy = sum(stop - start for start, stop, _ in spans)
        shown = " ".join(f"{name}[{start:.0f}-{stop:.0f}]" for start, stop, name in spans)
        lines.append(f"  {worker}: {len(spans)} tasks, busy {busy:.0f} ms: {shown}")
        came = " ".join(
            f"{key_split(key)}:{finish}@{(at - began) * 1e3:.1f}" for at, key, finish in arrived.get(worker, [])
        )
        lines.append(f"    arrived: {came[:600]}")
    shown_writes = " ".join(
        f"{what}@{(at - began) * 1e3:.1f}+{spent * 1e3:.1f}ms/{size}B" for at, spent, size, what in writes
    )
    lines.append(f"  written here: {shown_writes[:1500]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--config", action="append", default=[], help="a lever: dask config KEY=VALUE, A/B")
    parser.add_argument("--timeline", action="store_true", help="one warm cell's timeline at each count")
    args = parser.parse_args()
    import dask
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gpu_magics")
    ip.run_cell("import dask, dask.array as da", store_history=False)
    cell = CELL.format(n=args.n, chunk=args.chunk)
    run(ip, "gpu", cell)  # cold
    gpu_times = [run(ip, "gpu", cell)[0] for _ in range(args.repeat)]
    gpu_s = statistics.median(gpu_times)
    reference = float(ip.user_ns["t_mean"])
    print(f"seed {args.n}^2 float64 in {args.chunk}^2 chunks; %%gpurun gpu (1 GPU): {gpu_s:.3f} s", flush=True)
    rows = []
    lever = {key: ast.literal_eval(value) for key, _, value in (item.partition("=") for item in args.config)}
    modes = ("default", "lever") if lever else ("default",)

    def use(mode: str) -> Any:
        return dask.config.set(lever) if mode == "lever" else contextlib.nullcontext()

    for count in [int(c) for c in args.counts.split(",") if c]:
        gpus = ",".join(str(i) for i in range(count))
        with capture_output():
            ip.run_line_magic("config", "ClusterMagics.wait_for_workers = True")
            ip.run_line_magic("gpucluster", f"--gpus {gpus} --replace --name bench{count}")
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        tasks: dict[str, int] = {}
        split: dict[str, dict[str, float]] = {}
        worker_compute: dict[str, list[float]] = {}
        runs: dict[str, list[tuple[float, Any]]] = {mode: [] for mode in modes}  # (seconds, split) of each run
        agrees = True
        for mode in modes:  # cold runs
            with use(mode):
                run(ip, "multi-gpu", cell)
        for _ in range(args.repeat):
            for mode in modes:
                with use(mode):
                    took, result = run(ip, "multi-gpu", cell)
                times[mode].append(took)
                tasks[mode] = int(result.tasks or 0)
                runs[mode].append((took, result.split))
                agrees &= abs(float(ip.user_ns["t_mean"]) - reference) <= 1e-6 * abs(reference)
        for mode in modes:
            median = statistics.median(times[mode])
            _, middle = min(runs[mode], key=lambda run: abs(run[0] - median))  # the split of the median run
            if middle is not None:
                split[mode] = {part: round(middle.share(part), 3) for part in PARTS}
                worker_compute[mode] = [round(s * 1e3, 1) for s in sorted(middle.worker_compute.values())]
            row = {
                "gpus": count,
                "setup": mode,
                "seconds": round(median, 4),
                "speedup_over_gpu": round(gpu_s / median, 2),
                "tasks": tasks.get(mode),
                "split": split.get(mode),
                "agrees_with_gpu": agrees,
            }
            rows.append(row)
            print(
                f"{count} GPU(s), {mode}: {median:.3f} s, {row['speedup_over_gpu']}x over gpu, {row['tasks']} tasks, "
                f"split {row['split']}; mean agrees with gpu: {agrees}; compute per worker "
                f"{worker_compute.get(mode)}",
                flush=True,
            )
        if args.timeline:
            for mode in modes:
                with use(mode):
                    print(f"{count} GPU(s), {mode}: " + timeline(ip, cell), flush=True)
        with capture_output():
            ip.run_line_magic("gpucluster", "stop")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu_s": gpu_s, "lever": args.config, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
