"""Stopping the worker server never hangs on a process it forked that is still running."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, time
    from gpu_magics.cluster.workers import forkserver

    context = multiprocessing.get_context("forkserver")
    left = context.Process(target=time.sleep, args=(600,), daemon=False)  # a worker nobody closed
    left.start()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    forkserver.stop_server(timeout=2.0)
    try:
        os.kill(server, 0)
        print("server still running")
    except ProcessLookupError:
        print("server gone")
    left.kill()
    left.join()
    """
)


def test_a_server_whose_forked_process_still_runs_is_ended_by_its_stop() -> None:
    # multiprocessing's own stop waits for the server, which waits for every process it forked: before, this hung
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "server gone"
