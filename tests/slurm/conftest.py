"""A real one-node SLURM for the tests marked ``slurm``: ``tests/slurm/setup.sh`` starts it (``scripts/test.sh``
runs it before pytest; the ``slurm`` fixture runs it again, which is quick when SLURM is up). Where it cannot
start (not root, no apt), the tests skip with its reason. Every test leaves the queue as it found it: the
``queue`` fixture cancels any job the test left and fails it for leaving one."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpu_magics.cluster.control import queries
from gpu_magics.cluster.records import record as cluster_records
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.waiting import wait_for

SETUP = Path(__file__).with_name("setup.sh")
SQUEUE = shutil.which("squeue") or "squeue"  # found now: a test may take SLURM off PATH
SCANCEL = shutil.which("scancel") or "scancel"
LOCK = Path(tempfile.gettempdir()) / "gpu-magics-slurm-tests.lock"


def queued() -> set[str]:
    """The ids of every job in the queue (pending, running or completing)."""
    done = subprocess.run([SQUEUE, "-h", "-o", "%i"], capture_output=True, text=True, timeout=30, check=True)
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
    """The queue to this test alone, and the test fails if it leaves a job there (after cancelling it).

    One SLURM test at a time, whichever pytest-xdist worker runs it: a lock file held for the test (the
    ``slurm`` xdist group asks for that too, but pytest 9.2 ignores the group that pytest-xdist 3.8 writes
    into the test's id), so that tests do not fight for the node's CPUs or cancel each other's jobs."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = queued()
        yield
        left = queued() - before
        if left:
            subprocess.run([SCANCEL, *sorted(left)], check=False, timeout=30)
            wait_for(lambda: not queued() & left, 60, "the left jobs to be cancelled")
            pytest.fail(f"the test left SLURM jobs {sorted(left)} in the queue", pytrace=False)


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the test's records go (function scope: a module-scoped fixture would put the module in its own
    xdist group, and the SLURM tests must share one, ``slurm``, not to fight for the node's CPUs)."""
    monkeypatch.setenv(cluster_records.RUNTIME_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def magics(queue: None, _session_shell: InteractiveShell, runtime_dir: Path) -> Iterator[ClusterMagics]:
    """``%gpucluster`` on the test shell; whatever cluster the test left is stopped."""
    instance = ClusterMagics(shell=_session_shell)
    yield instance
    instance.close()
    assert queries.active() is None


def gpucluster(magics: ClusterMagics, line: str) -> str:
    """Run ``%gpucluster line``; the plain text it printed or displayed."""
    with capture_output() as captured:
        magics.gpucluster(line)
    return captured.stdout + "\n".join(output.data.get("text/plain", "") for output in captured.outputs)
