"""How ``%gpucluster`` prepares worker processes: the forkserver's environment and preload, the warm-up plugin,
the scheduler defaults for GPU clusters, and the prestart at ``%load_ext``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import dask
import pytest

from gpu_magics.cluster.managers.local import factories
from gpu_magics.cluster.workers import forkserver
from gpu_magics.cluster.workers import warmup as worker_warmup

PRE_SPAWN_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")


def run_python(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter without the variables distributed may have set here (an existing
    variable wins over dask's config, as in distributed); returns the JSON it printed last."""
    environment = {key: value for key, value in os.environ.items() if key not in PRE_SPAWN_KEYS}
    output = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    )
    result: dict[str, Any] = json.loads(output.stdout.strip().splitlines()[-1])
    return result


def test_pre_spawn_environment_follows_distributed_and_the_users_config() -> None:
    report = run_python(
        """
        import json, sys
        import dask
        from gpu_magics.cluster.workers import forkserver
        default = forkserver._pre_spawn_environment()
        with dask.config.set({"distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS": 3}):
            chosen = forkserver._pre_spawn_environment()
        print(json.dumps({"default": default, "chosen": chosen, "distributed": "distributed" in sys.modules}))
        """
    )
    assert report["default"]["OMP_NUM_THREADS"] == "1" and report["default"]["MALLOC_TRIM_THRESHOLD_"] == "65536"
    assert report["default"]["PYTHONHASHSEED"] == "6640"
    assert report["chosen"]["OMP_NUM_THREADS"] == "3"
    assert report["distributed"] is False  # read without importing distributed (it takes a while)


@pytest.mark.parametrize(("setting", "started"), [("True", True), ("False", False)])
def test_load_ext_prestarts_the_worker_server_unless_configured_off(setting: str, started: bool) -> None:
    report = run_python(
        f"""
        import json, os, sys
        import multiprocessing.forkserver as forkserver
        from traitlets.config import Config
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        config = Config()
        config.ClusterMagics.prestart_workers = {setting}
        shell.config = config
        shell.run_line_magic("load_ext", "gpu_magics")
        pid = forkserver._forkserver._forkserver_pid
        alive = pid is not None and os.waitpid(pid, os.WNOHANG) == (0, 0)
        print(json.dumps({{"alive": alive, "cupy": "cupy" in sys.modules}}))
        """
    )
    assert report["alive"] is started
    assert report["cupy"] is False  # the server imports what workers need; this process does not


def test_scheduler_defaults_queue_nothing_for_gpu_workers_unless_the_user_chose() -> None:
    key = "distributed.scheduler.worker-saturation"
    import distributed  # noqa: F401  (its defaults)

    assert factories.scheduler_defaults("gpu") == {key: math.inf}
    assert factories.scheduler_defaults("cpu") == {}
    with dask.config.set({key: 2.0}):
        assert factories.scheduler_defaults("gpu") == {}


def test_warm_up_errors_and_timeouts_reach_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(gpu: bool) -> dict[str, Any]:
        raise RuntimeError("no device")

    monkeypatch.setattr(worker_warmup, "warm_here", broken)
    plugin = worker_warmup.WarmUp(gpu=True)
    plugin.setup(worker=None)
    with pytest.raises(RuntimeError, match="no device"):
        plugin.wait(timeout=10)

    def slow(gpu: bool) -> dict[str, Any]:
        time.sleep(1.0)
        return {"pid": 1}

    monkeypatch.setattr(worker_warmup, "warm_here", slow)
    plugin = worker_warmup.WarmUp(gpu=False)
    plugin.setup(worker=None)
    with pytest.raises(TimeoutError, match=r"warm-up took more than 0\.1 s"):
        plugin.wait(timeout=0.1)
    assert plugin.wait(timeout=10)["pid"] == 1


def test_the_plugin_travels_without_its_thread() -> None:
    import pickle

    plugin = worker_warmup.WarmUp(gpu=False)
    plugin.setup(worker=None)
    copy = pickle.loads(pickle.dumps(plugin))
    assert copy.gpu is False and copy._thread is None
    assert plugin.wait(timeout=60)["warm_s"] > 0


def test_worker_start_config_forks_workers() -> None:
    import distributed  # noqa: F401

    with factories.worker_start_config("gpu"):
        assert dask.config.get(forkserver.METHOD_KEY) == "forkserver"
        assert dask.config.get("distributed.scheduler.worker-saturation") == math.inf
    assert dask.config.get(forkserver.METHOD_KEY) == "spawn"
