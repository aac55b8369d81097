"""Who uses a GPU's time, on a real GPU: two real kernels on the same GPU, one running matrix products and one idle
with an array; NVML's per-process samples, read as the server reads them, give the busy kernel most of the GPU's
time and the idle one almost none, and the side panel's line and ``/metrics`` say so per notebook. Prints
``GPU TIME FIGURES``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpu_magics.monitor.nvml import NvmlSource
from gpu_magics.server.metrics.frame import build
from gpu_magics.server.metrics.gather import Holding, Inputs, busiest
from gpu_magics.server.metrics.idle import IdleHold
from gpu_magics.server.metrics.labels import Place
from gpu_magics.server.ownership.owners import map_owners
from tests.test_kernel_faults import loaded_kernel

HOLD = "import cupy, os\nx = cupy.ones((4096, 4096), dtype=cupy.float32)\ncupy.cuda.Device().synchronize()\nos.getpid()"
BUSY = (
    "import time\nbegan = time.time()\n"
    "while time.time() - began < 15:\n    y = x @ x\n    cupy.cuda.Device().synchronize()\n"
)


def test_the_busy_kernel_has_most_of_the_gpu_s_time_and_the_idle_one_almost_none(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "idle").mkdir()
    with loaded_kernel(tmp_path / "busy", "nvml") as busy, loaded_kernel(tmp_path / "idle", "nvml") as idle:
        pids = {
            int(busy.ok(HOLD, timeout=120).strip().splitlines()[-1]): "busy",
            int(idle.ok(HOLD, timeout=120).strip().splitlines()[-1]): "idle",
        }
        source = NvmlSource()
        source.read(slow=True)  # from here on, the samples since this read
        running = busy.start(BUSY)
        time.sleep(6)
        gpus, _ = source.read(slow=True)
        busy.finish(running, timeout=60)
        shot = next(iter(gpus))
        util = {pids[p.pid]: p.sm_util for p in shot.processes or () if p.pid in pids}
        if not util:
            pytest.skip(f"NVML's pids are not this machine's (it lists {shot.processes})")
        assert set(util) == {"busy", "idle"}, shot.processes
        assert util["busy"] is not None and util["idle"] is not None, util  # a whole GPU: NVML measures
        assert util["busy"] >= 50 and util["idle"] <= 5, util
        from gpu_magics.monitor.models import HostReading, Snapshot

        snapshot = Snapshot(time.time(), tuple(gpus), HostReading(None, None, None, 1), None)
        holders = map_owners(snapshot, kernel_pids=pids, records=[], paths={}, ancestry=lambda pid: [pid])
        data = Inputs(time=snapshot.time, snapshot=snapshot, busiest=busiest([], snapshot), remote=(), records=(),
                      holdings=tuple(Holding(holder, "kernel") for holder in holders), paths={},
                      managed=frozenset(pids.values()))  # fmt: skip
        frame = build(data, Place("here"), IdleHold(), idle_utilization=5.0, notebook_label=False)
        [family] = [f for f in frame.families if f.name == "gpu_magics_kernel_gpu_time_ratio"]
        ratios = {dict(series.labels)["kernel_id"]: series.value for series in family.series}
        assert ratios["busy"] >= 0.5 and ratios.get("idle", 0.0) <= 0.05, ratios
        print("GPU TIME FIGURES " + json.dumps({"sm_util": util, "ratios": ratios, "gpu_util": shot.gpu_util}))
