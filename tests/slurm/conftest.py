"""A real one-node SLURM for the tests marked ``slurm``: ``tests/slurm/setup.sh`` starts it (``scripts/test.sh``
runs it before pytest; the ``slurm`` fixture runs it again, which is quick when SLURM is up). Where it cannot
start (not root, no apt), the tests skip with its reason. Every test leaves the queue as it found it: the
``queue`` fixture cancels any job the test left and fails it for leaving one."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster import lifecycle as cluster
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.waiting import wait_for

SETUP = Path(__file__).with_name("setup.sh")


def queued() -> set[str]:
    """The ids of every job in the queue (pending, running or completing)."""
    done = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30, check=True)
    return set(done.stdout.split())


@pytest.fixture(scope="session")
def slurm() -> None:
    """SLURM answering on this machine, or the tests skip saying why."""
    try:
        done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no SLURM here: {error}")
    said = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0 or not said or not said[-1].startswith("slurm: up"):
        pytest.skip(f"no SLURM here: {said[-1] if said else 'tests/slurm/setup.sh said nothing'}")


@pytest.fixture
def queue(slurm: None) -> Iterator[None]:
    """Fails the test if it leaves a job in the queue (after cancelling it)."""
    before = queued()
    yield
    left = queued() - before
    if left:
        subprocess.run(["scancel", *sorted(left)], check=False, timeout=30)
        wait_for(lambda: not queued() & left, 60, "the left jobs to be cancelled")
        pytest.fail(f"the test left SLURM jobs {sorted(left)} in the queue", pytrace=False)


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("runtime")
    previous = os.environ.get(cluster_records.RUNTIME_DIR_ENV)
    os.environ[cluster_records.RUNTIME_DIR_ENV] = str(directory)
    yield directory
    if previous is None:
        del os.environ[cluster_records.RUNTIME_DIR_ENV]
    else:
        os.environ[cluster_records.RUNTIME_DIR_ENV] = previous


@pytest.fixture
def magics(_session_shell: InteractiveShell, runtime_dir: Path, queue: None) -> Iterator[ClusterMagics]:
    """``%gpucluster`` on the test shell; whatever cluster the test left is stopped."""
    instance = ClusterMagics(shell=_session_shell)
    yield instance
    instance.close()
    assert cluster.active() is None


def gpucluster(magics: ClusterMagics, line: str) -> str:
    """Run ``%gpucluster line``; the plain text it printed or displayed."""
    with capture_output() as captured:
        magics.gpucluster(line)
    return captured.stdout + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)
