"""Closing a cluster says nothing it should not: with real ``LocalCluster`` processes, a cluster stopped while a
``%%gpurun multi-gpu`` cell runs is one line, a dashboard closes without a logged traceback (with bokeh 3.10's
refusal to stop synchronously on a running loop reproduced), and ``--protocol ucx`` without ``distributed-ucxx``
is one line with no warning. Every wait is bounded."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpu_magics.cluster.control import answers, queries
from gpu_magics.cluster.control.verbs import stop
from gpu_magics.cluster.records import record as cluster_records

pytestmark = pytest.mark.slow


class Collected(logging.Handler):
    """Every record at WARNING or above, from any logger (distributed's do not all propagate to the root)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.fixture
def shell(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The test shell, with cluster records in a private runtime dir and no cluster left behind."""
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    try:
        yield ip
    finally:
        stop.stop()


@pytest.fixture
def logged() -> Iterator[Collected]:
    handler = Collected()
    names = ["", "distributed", "distributed.scheduler", "distributed.core", "bokeh", "tornado"]
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def wait_for_processing(timeout: float) -> bool:
    """Wait until the cluster's workers run a task."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client = queries.active_client()
        if client is not None and any(client.processing().values()):
            return True
        time.sleep(0.05)
    return False


def test_cluster_stopped_while_a_cell_runs_is_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("gpucluster", "--cpu-workers 1 --no-dashboard --name closing")
    stopped: list[bool] = []

    def stop_when_running() -> None:  # as the side panel's Stop does, from outside the cell
        stopped.append(wait_for_processing(120))
        stop.stop()

    stopper = threading.Thread(target=stop_when_running, daemon=True)
    stopper.start()
    began = time.monotonic()
    outcome = shell.run_cell("%%gpurun multi-gpu\nimport time, dask\ndask.delayed(time.sleep)(300).compute()\n")
    stopper.join(150)
    text = "".join(capsys.readouterr())
    assert stopped == [True]
    assert time.monotonic() - began < 150  # ended by the stop, not by the task's 300 s: a bound far from both
    assert not outcome.success
    lines = [line for line in text.splitlines() if "stopped while this cell ran" in line]
    assert len(lines) == 1 and "%gpucluster" in lines[0]
    assert "cancelled for reason" not in text and "Traceback" not in text and "gpu_magics" not in text
    assert queries.active() is None


SCHEDULER_SCRIPT = """
import time
from distributed import LocalCluster
if __name__ == "__main__":
    cluster = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, host="127.0.0.1", protocol="tcp"
    )
    print(cluster.scheduler_address, flush=True)
    time.sleep(300)
"""


def test_scheduler_gone_while_a_cell_runs_is_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "scheduler.py"
    script.write_text(SCHEDULER_SCRIPT)
    scheduler = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert scheduler.stdout is not None
        address = scheduler.stdout.readline().strip()  # bounded: the test's timeout
        assert address.startswith("tcp://127.0.0.1:")
        shell.run_line_magic("gpucluster", f"--address {address} --name remote")
        killed: list[bool] = []

        def kill_when_running() -> None:
            killed.append(wait_for_processing(120))
            scheduler.kill()

        killer = threading.Thread(target=kill_when_running, daemon=True)
        killer.start()
        began = time.monotonic()
        outcome = shell.run_cell("%%gpurun multi-gpu\nimport time, dask\ndask.delayed(time.sleep)(300).compute()\n")
        killer.join(150)
        text = "".join(capsys.readouterr())
        assert killed == [True]
        assert time.monotonic() - began < 150  # ended by the stop, not by the task's 300 s: a bound far from both
        assert not outcome.success
        lines = [line for line in text.splitlines() if "scheduler went away while this cell ran" in line]
        assert len(lines) == 1 and "%gpucluster" in lines[0]
        assert "cancelled for reason" not in text and "Traceback" not in text and "gpu_magics" not in text
    finally:
        scheduler.kill()
        scheduler.wait(timeout=30)


def test_a_cancellation_while_the_cluster_runs_is_the_users_own(shell: InteractiveShell) -> None:
    from distributed.client import FutureCancelledError

    from gpu_magics.gpurun.live import cluster_loss

    shell.run_line_magic("gpucluster", "--cpu-workers 1 --no-dashboard --name cancelling")
    client = queries.require_client()
    error = FutureCancelledError("t-key", None)
    assert cluster_loss.lost_cluster_message(error, client, client) is None  # the user cancelled it
    assert cluster_loss.lost_cluster_message(error, client, None) == cluster_loss.stopped_message()
    lost = FutureCancelledError("t-key", cluster_loss.LOST_CONNECTION, "Client lost the connection")
    assert cluster_loss.lost_cluster_message(lost, client, client) == cluster_loss.went_away_message()
    assert cluster_loss.lost_cluster_message(ValueError("x"), client, None) is None
    assert cluster_loss.lost_cluster_message(error, None, None) is None  # not a cluster cell


def test_lost_scheduler_reasons_in_groups() -> None:
    from distributed.client import CancelledFuturesGroup, FutureCancelledError, FuturesCancelledError

    from gpu_magics.gpurun.live import cluster_loss

    lost = cluster_loss.LOST_CONNECTION
    group = CancelledFuturesGroup([FutureCancelledError("k", lost)], lost)
    error = FuturesCancelledError([group])
    assert cluster_loss.cancel_reasons(error) == {cluster_loss.LOST_CONNECTION}

    class Closed:
        status = "closed"

    assert cluster_loss.lost_cluster_message(error, Closed(), None) == cluster_loss.went_away_message()  # type: ignore[arg-type]


@pytest.fixture
def bokeh_that_refuses_sync_stop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Give the installed bokeh server bokeh 3.10's stop: ``stop()`` raises on a running event loop, and
    ``stop_async()`` does the work. Returns the calls made."""
    from bokeh.server.tornado import BokehTornado

    calls: list[str] = []
    original_stop = BokehTornado.stop

    def stop(self: Any, wait: bool = True) -> None:
        calls.append("stop")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            original_stop(self, wait)
            return
        raise RuntimeError("Cannot synchronously wait on a running event loop; use 'await stop_async()'")

    async def stop_async(self: Any) -> None:
        calls.append("stop_async")
        original_stop(self)

    monkeypatch.setattr(BokehTornado, "stop", stop)
    monkeypatch.setattr(BokehTornado, "stop_async", stop_async, raising=False)
    return calls


@pytest.fixture(params=["sync-stop", "async-stop"])
def distributed_stop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Close the scheduler's web applications as distributed up to 2026.7 does (a synchronous ``stop()`` on the
    running loop) or as later releases do (``await stop_async()`` where there is one)."""
    from distributed.node import ServerNode

    if request.param == "sync-stop":

        async def old_stop_services(self: Any) -> None:
            for application in getattr(getattr(self, "http_application", None), "applications", ()):
                if callable(getattr(application, "stop", None)):
                    application.stop()
            for service in self.services.values():
                service.stop()

        monkeypatch.setattr(ServerNode, "_stop_services", old_stop_services)
    return str(request.param)


def test_a_dashboard_closes_without_a_traceback(
    shell: InteractiveShell,
    capfd: pytest.CaptureFixture[str],
    logged: Collected,
    bokeh_that_refuses_sync_stop: list[str],
    distributed_stop: str,
) -> None:
    shell.run_line_magic("gpucluster", "--cpu-workers 1 --name dashboard")
    current = queries.active()
    assert current is not None and current.cluster is not None
    assert answers.dashboard_url() is not None
    scheduler = current.cluster.scheduler
    shell.run_line_magic("gpucluster", "stop")
    text = "".join(capfd.readouterr())
    assert logged.errors() == []
    assert "Traceback" not in text and "Cannot synchronously wait" not in text
    assert "stop_async" in bokeh_that_refuses_sync_stop  # the dashboard was stopped the way bokeh asks
    assert scheduler.status.name == "closed"  # and the scheduler's close ran to its end


def test_ucx_without_distributed_ucxx_is_one_line_and_no_warning(
    shell: InteractiveShell, capfd: pytest.CaptureFixture[str]
) -> None:
    from gpu_magics.cluster.managers import needs

    if needs.ucxx_schemes() or needs.legacy_ucx_py():
        pytest.skip("UCX is installed here")
    for spelling in ("ucx", "ucxx"):
        with warnings.catch_warnings(record=True) as caught, pytest.raises(UsageError) as raised:
            warnings.simplefilter("always")
            shell.run_line_magic("gpucluster", f"--cpu-workers 1 --protocol {spelling}")
        message = str(raised.value)
        assert "\n" not in message and "distributed-ucxx" in message and f"--protocol {spelling}" in message
        assert [str(w.message) for w in caught] == []
        assert queries.active() is None
    text = "".join(capfd.readouterr())
    assert "FutureWarning" not in text and "failed to start" not in text


def test_a_cluster_stopped_mid_cell_leaves_dask_on_its_local_scheduler(shell: InteractiveShell) -> None:
    """The stopped cluster's client took its scheduler setting back; the cell's own config must not restore it."""
    shell.run_line_magic("gpucluster", "--cpu-workers 1 --no-dashboard --name leaving")
    stopper = threading.Thread(target=lambda: (wait_for_processing(120), stop.stop()), daemon=True)
    stopper.start()
    shell.run_cell("%%gpurun multi-gpu -q\nimport time, dask\ndask.delayed(time.sleep)(300).compute()\n")
    stopper.join(150)
    import dask

    assert dask.config.get("scheduler", default=None) is None
    assert dask.delayed(sum)([1, 2]).compute() == 3


EXITING = """
import asyncio
from bokeh.server.tornado import BokehTornado
from distributed.node import ServerNode

original_stop = BokehTornado.stop


def stop(self, wait=True):  # bokeh 3.10's: it refuses to wait on a running event loop
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return original_stop(self, wait)
    raise RuntimeError("Cannot synchronously wait on a running event loop; use 'await stop_async()'")


async def stop_async(self):  # work in the loop's executor, which takes none once the interpreter is exiting
    await asyncio.get_running_loop().run_in_executor(None, original_stop, self)


BokehTornado.stop, BokehTornado.stop_async = stop, stop_async
if SYNC_STOP:  # distributed up to 2026.7: a synchronous stop() of each web application, on the running loop

    async def old_stop_services(self):
        for application in self.http_application.applications:
            application.stop()
        for service in self.services.values():
            service.stop()

    ServerNode._stop_services = old_stop_services

if __name__ == "__main__":
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "gpu_magics")
    shell.run_line_magic("gpucluster", "--cpu-workers 1 --name exiting")
    from gpu_magics.cluster.control import answers, queries
    from gpu_magics.cluster.control.verbs import stop

    print("dashboard:", answers.dashboard_url(), flush=True)
"""


@pytest.mark.parametrize("sync_stop", [True, False], ids=["sync-stop", "async-stop"])
def test_a_dashboard_left_running_at_interpreter_exit_ends_quietly(tmp_path: Path, sync_stop: bool) -> None:
    """A process that exits with its cluster and dashboard running: the cluster closes at exit, where the dashboard's
    ``stop_async()`` cannot finish; neither distributed's stop nor bokeh's refusal is logged."""
    script = tmp_path / "exiting.py"
    script.write_text(f"SYNC_STOP = {sync_stop}\n" + EXITING, encoding="utf-8")
    env = {**os.environ, "GPU_MAGICS_SOURCE": "fake:0", cluster_records.RUNTIME_DIR_ENV: str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    assert "dashboard: http" in done.stdout, done.stdout  # the cluster ran with its dashboard
    assert "Cannot synchronously wait" not in done.stderr and "Exception while handling op" not in done.stderr, (
        done.stderr
    )
