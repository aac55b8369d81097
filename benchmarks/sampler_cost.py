"""CPU cost of the GPU sampler: process CPU time over wall time while it samples, in percent of one core.

Uses real NVML when it finds GPUs (the first ``--gpus`` of them), else the fake with ``--gpus`` GPUs. Run from the
repository root (or with the package installed)::

    python -m benchmarks.sampler_cost [--seconds 10] [--hz 4] [--gpus 4] [--source auto|nvml|fake] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import time
from typing import Any

from gpu_magics.monitor import GpuSource, NvmlSource, Sampler
from gpu_magics.monitor.fake import FakeSource


def pick_source(kind: str, gpus: int) -> tuple[GpuSource, str]:
    """The real NVML source limited to ``gpus`` devices if it sees any (and ``kind`` allows), else the fake."""
    if kind in ("auto", "nvml"):
        source = NvmlSource(visible_devices=",".join(str(i) for i in range(gpus)))
        found, status = source.read(slow=False)
        if found:
            return source, f"nvml ({len(found)} x {found[0].name})"
        source.close()
        if kind == "nvml":
            raise SystemExit(f"no GPU through NVML: {status}")
    return FakeSource(gpus=gpus), f"fake ({gpus} GPUs)"


def read_latency(source: GpuSource, *, slow: bool, repeats: int) -> dict[str, float]:
    """Milliseconds per ``read()``: mean and max over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        source.read(slow=slow)
        times.append((time.perf_counter() - start) * 1e3)
    return {"mean_ms": statistics.fmean(times), "max_ms": max(times)}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(source: GpuSource, *, seconds: float, hz: float, slow_interval: float) -> dict[str, Any]:
    sampler = Sampler(source, interval=1.0 / hz, slow_interval=slow_interval, history=100_000)
    sampler.tick()  # NVML start-up is not part of the steady cost
    wall0, cpu0, process0 = time.perf_counter(), cpu_seconds(), time.process_time()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    wall = time.perf_counter() - wall0
    cpu, process = cpu_seconds() - cpu0, time.process_time() - process0
    stamps = [s.time for s in sampler.history()][1:]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "wall_s": wall,
        "cpu_percent_of_one_core": 100.0 * cpu / wall,
        "process_time_percent": 100.0 * process / wall,
        "snapshots": len(stamps),
        "expected_snapshots": int(seconds * hz),
        "max_gap_s": max(gaps) if gaps else None,
        "mean_gap_s": statistics.fmean(gaps) if gaps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hz", type=float, default=4.0, help="fast sampling rate (at most 10)")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--slow-interval", type=float, default=5.0, help="seconds between slow reads (PCIe, processes)")
    parser.add_argument("--source", choices=["auto", "nvml", "fake"], default="auto")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    source, label = pick_source(args.source, args.gpus)
    try:
        result: dict[str, Any] = {"source": label, "hz": args.hz}
        result["fast_read"] = read_latency(source, slow=False, repeats=50)
        result["slow_read"] = read_latency(source, slow=True, repeats=5)
        result.update(measure(source, seconds=args.seconds, hz=args.hz, slow_interval=args.slow_interval))
    finally:
        source.close()
    if args.json:
        print(json.dumps(result))
        return
    print(f"source: {label}, {args.hz:g} Hz for {result['wall_s']:.1f} s")
    print(f"sampler CPU: {result['cpu_percent_of_one_core']:.2f}% of one core")
    fast, slow = result["fast_read"], result["slow_read"]
    print(f"fast read: {fast['mean_ms']:.3f} ms mean, {fast['max_ms']:.3f} ms max")
    print(f"slow read: {slow['mean_ms']:.1f} ms mean, {slow['max_ms']:.1f} ms max")
    print(
        f"snapshots: {result['snapshots']} of {result['expected_snapshots']} expected, "
        f"gap mean {result['mean_gap_s']:.3f} s, max {result['max_gap_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
