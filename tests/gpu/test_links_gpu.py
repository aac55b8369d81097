"""PCIe and NVLink throughput read on a real GPU, as the cards, %gpumonitor and the cell summary show them (on a
single GPU NVLink may be unsupported (None) or read 0)."""

from __future__ import annotations

import time

from gpu_magics.display.monitor_view import links_line
from gpu_magics.gpurun.live.cell_monitor import figures_from
from gpu_magics.monitor.models import HostReading, Snapshot
from gpu_magics.monitor.sources import make_source


def test_pcie_and_nvlink_are_read_and_summarized() -> None:
    source = make_source("nvml")
    try:
        first, status = source.read(slow=True)
        time.sleep(1.1)  # NVLink is a rate of counters: the second read has one
        second, _ = source.read(slow=True)
    finally:
        source.close()
    assert status is None and second
    gpu = second[0]
    assert gpu.pcie_rx is not None and gpu.pcie_rx >= 0 and gpu.pcie_tx is not None and gpu.pcie_tx >= 0
    assert gpu.nvlink_rx is None or gpu.nvlink_rx >= 0
    assert links_line(gpu).startswith("PCIe \u2193")
    host = HostReading(None, None, None, 1)
    figures = figures_from([Snapshot(1.0, first, host, None), Snapshot(2.0, second, host, None)], "gpu", 0.0)
    assert "PCIe peak " in str(figures).splitlines()[0]
