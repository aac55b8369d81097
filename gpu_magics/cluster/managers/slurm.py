"""``%gpucluster --slurm``: workers from SLURM jobs through dask-jobqueue's ``SLURMCluster``. The job script,
its submission and cancelling are dask-jobqueue's; here the line's options become its arguments (the site's
``jobqueue.slurm.*`` config gives the rest), SLURM checks the job before anything is queued, and the queue's
view of each job (state, node, why it waits, a start that failed) is read with ``squeue``."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from gpu_magics.cluster.info import JobInfo
from gpu_magics.cluster.managers import needs, squeue
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.squeue import job_workers
from gpu_magics.cluster.options import PROG, ClusterOptions
from gpu_magics.units import dropped

WHAT = f"{PROG} --slurm"
INSTALL = "pip install 'gpu-magics[hpc]' (dask-jobqueue)"
GPU_WORKER_COMMAND = "dask cuda worker"  # dask-cuda's worker: one per GPU the job got
CPU_JOB_MEMORY_GB = 2  # host memory per worker when neither --memory nor the config says
GPU_JOB_MEMORY_GB = 16  # dask-cuda spills device memory to host memory
LOG_DIRECTORY = Path.home() / ".cache" / "gpu-magics" / "slurm-logs"  # home: seen by the compute nodes too
GONE_TIMEOUT_S = 30.0  # how long stop waits for cancelled jobs to leave the queue (completing: ends its processes)
_ERROR_LOG = re.compile(r"^#SBATCH -e (\S+)$", re.MULTILINE)


def job_arguments(options: ClusterOptions, config: dict[str, Any]) -> dict[str, Any]:
    """``SLURMCluster``'s arguments for ``options``; ``config`` is the site's ``jobqueue.slurm`` section, which
    gives what the line leaves out (pure: no I/O)."""
    gpu = options.gpus_per_job is not None
    per_job = options.gpus_per_job or options.cpu_workers or 1
    cores = config.get("cores")
    if cores is None or "threads_per_worker" in options.given:
        cores = per_job * options.threads
    per_worker_gb = GPU_JOB_MEMORY_GB if gpu else CPU_JOB_MEMORY_GB
    memory = options.memory or config.get("memory") or f"{per_job * per_worker_gb}GB"
    directives = list(config.get("job-extra-directives") or ())
    if gpu:
        form = "--gpus" if options.gpu_directive == "gpus" else "--gres=gpu"
        directives.append(f"{form}={options.gpus_per_job}" if form == "--gpus" else f"{form}:{options.gpus_per_job}")
    directives += options.job_options
    scheduler = dict(config.get("scheduler-options") or {})
    if options.dashboard:
        scheduler.setdefault("dashboard_address", ":0")
    else:
        scheduler["dashboard"] = False
    if "host" in options.given:
        scheduler["host"] = options.host
    arguments: dict[str, Any] = {
        "name": options.cluster_name,
        "cores": int(cores),
        "processes": per_job,
        "memory": memory,
        "job_extra_directives": directives,
        "scheduler_options": scheduler,
        "log_directory": config.get("log-directory") or str(LOG_DIRECTORY),
        "silence_logs": "error",
    }
    if gpu:
        arguments["worker_command"] = GPU_WORKER_COMMAND
    if "protocol" in options.given:
        arguments["protocol"] = needs.comm_protocol(options.protocol, PROG)
    for key, value in (
        ("queue", options.partition),
        ("account", options.account),
        ("walltime", options.walltime),
        ("interface", options.interface),
    ):
        if value is not None:
            arguments[key] = value
    return arguments


class SlurmManager(ClusterManager):
    """A ``SLURMCluster`` made here: its jobs are cancelled when it closes (stop, idle, kernel exit, a failed
    start), and those SLURM still lists afterwards are cancelled again by id."""

    owned = True

    def __init__(self, cluster: Any, submitted: set[str], failures: list[str]) -> None:
        super().__init__(cluster, "SLURM jobs")
        self.submitted = submitted  # every job id sbatch gave, in order of submission
        self.failures = failures  # what sbatch said when a submission failed

    @property
    def source(self) -> str:
        return "from SLURM jobs"

    @property
    def taken(self) -> str:
        return "up since"

    @property
    def title(self) -> str:
        return "SLURM"

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        return slurm_jobs(self.cluster, workers)

    def check_started(self, seen: set[str]) -> None:
        if self.failures:
            raise UsageError(f"{WHAT}: SLURM refused a job: {self.failures[0]}")
        waiting = [job_id for job_id, names in job_workers(self.cluster).items() if not names & seen]
        for queued in squeue.states(waiting).values():  # one squeue for all of them
            if queued.state in squeue.ENDED:
                log = log_path(self.cluster, queued.job_id)
                said = _last_line(log)
                raise UsageError(
                    f"{WHAT}: job {queued.job_id} ended ({queued.state}) before its workers started"
                    + (f": {said}" if said else "")
                    + (f"; its log: {log}" if log else "")
                )

    def close(self) -> None:
        """Close the cluster (dask-jobqueue cancels each job), cancel by id any job SLURM still lists, and wait
        (bounded) until SLURM lists none of them."""
        try:
            self.cluster.close(timeout=30)
        finally:
            left = self._alive()
            squeue.cancel(left)
            deadline = time.monotonic() + GONE_TIMEOUT_S
            while left and time.monotonic() < deadline:
                time.sleep(0.2)
                left = self._alive()

    def _alive(self) -> list[str]:
        return [job.job_id for job in squeue.states(self.submitted).values() if job.state in squeue.ALIVE]

    def finish(self, name: str, close: bool, keep: bool = False) -> str:
        count = len(self.submitted)
        self.close()
        return f"{PROG}: stopped cluster {name!r}; cancelled its {count} SLURM job{'s' if count != 1 else ''}"


def start(options: ClusterOptions) -> SlurmManager:
    """Make the ``SLURMCluster`` (its scheduler starts here) and submit ``--jobs`` jobs, after SLURM has said
    it takes them; one-line ``UsageError``s for what stops it, with nothing left queued."""
    if squeue.sbatch_path() is None:
        raise UsageError(
            f"{WHAT}: no sbatch on PATH: run this where SLURM's commands work (a login node), or attach to a "
            f"scheduler with {PROG} --address"
        )
    import dask

    needs.require("dask_jobqueue.slurm", WHAT, f"dask-jobqueue is not installed ({INSTALL})")
    from dask_jobqueue import SLURMCluster
    from dask_jobqueue.slurm import SLURMJob

    submitted: set[str] = set()
    failures: list[str] = []

    class RecordedJob(SLURMJob):
        """dask-jobqueue's job, remembering its id (and a refused submission) for the queue's view."""

        def _job_id_from_submit_output(self, out: str) -> str:
            job_id = str(super()._job_id_from_submit_output(out))
            submitted.add(job_id)
            return job_id

        async def start(self) -> None:
            try:
                await super().start()
            except RuntimeError as error:
                failures.append(_sbatch_message(str(error)))
                raise

    arguments = job_arguments(options, dict(dask.config.get("jobqueue.slurm", default={}) or {}))
    try:
        cluster = SLURMCluster(job_cls=RecordedJob, **arguments)  # type: ignore[arg-type]
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(f"{WHAT}: {_one_line(error)}") from None
    manager = SlurmManager(cluster, submitted, failures)
    try:
        refused = squeue.test_submit(cluster.job_script())
        if refused is not None:
            raise UsageError(f"{WHAT}: SLURM refused the job: {refused}")
        cluster.scale(jobs=options.jobs or 1)
    except BaseException:  # re-raised: only the jobs made so far are cancelled
        manager.abandon()
        raise
    return manager


def slurm_jobs(cluster: Any, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
    """Each job of a dask-jobqueue SLURM cluster as the queue sees it, with its workers that are up."""
    names = {str(info.get("name", address)) for address, info in workers.items()}
    by_job = job_workers(cluster)
    queued = squeue.states(by_job)
    jobs = []
    for job_id, own in sorted(by_job.items(), key=lambda item: (len(item[0]), item[0])):
        seen = queued.get(job_id)
        jobs.append(
            JobInfo(
                job_id=job_id,
                state=seen.state if seen is not None else "unknown",
                node=seen.node if seen is not None else None,
                reason=seen.reason if seen is not None else None,
                workers=tuple(sorted(own & names)),
                log=log_path(cluster, job_id),
            )
        )
    return tuple(jobs)


def log_path(cluster: Any, job_id: str) -> str | None:
    """Where the job writes its workers' output (stderr), from its script's ``#SBATCH -e``."""
    try:
        match = _ERROR_LOG.search(cluster.job_script())
        if match:
            return match.group(1).replace("%J", job_id).replace("%j", job_id)
    except Exception as error:  # a script dask-jobqueue cannot write any way: no log path
        dropped("reading the job script", error)
    return None


def _last_line(path: str | None) -> str | None:
    if path is None:
        return None
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1][:300] if lines else None
    return None


def _sbatch_message(error: str) -> str:
    """SLURM's own words from dask-jobqueue's error for a failed ``sbatch``."""
    _, _, stderr = error.partition("stderr:")
    lines = [line.strip().removeprefix("sbatch: error: ") for line in stderr.splitlines() if line.strip()]
    return "; ".join(lines) or error.strip().splitlines()[0]


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
