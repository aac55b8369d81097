"""Starting and stopping clusters leaves nothing behind: after ``%gpucluster stop`` nothing of the stopped scheduler
stays referenced in the kernel (distributed's own module caches would keep every scheduler, its dashboard's bokeh
applications and tornado routes: plain ``LocalCluster`` start/close keeps them all), and a stop prints only its line.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.control.verbs import stop

pytestmark = pytest.mark.slow


def test_a_stopped_scheduler_is_not_kept_alive(ip: InteractiveShell) -> None:
    stop.stop()
    stopped: list[weakref.ref[object]] = []
    for cycle in range(3):
        with capture_output():
            ip.run_line_magic("gpucluster", f"--cpu-workers 1 --name leak{cycle}")
            ip.run_cell("import dask.array as da\nt_sum = float(da.ones(100, chunks=10).sum().compute())")
        current = queries.active()
        assert current is not None and current.cluster is not None and ip.user_ns["t_sum"] == 100.0
        stopped.append(weakref.ref(current.cluster.scheduler))
        del current
        with capture_output() as said:
            ip.run_line_magic("gpucluster", "stop")
        assert said.stdout.strip() == f"%gpucluster: stopped cluster 'leak{cycle}'" and said.stderr == ""
    gc.collect()
    assert [ref() for ref in stopped] == [None, None, None]
