"""``%gpucluster --slurm``: workers from SLURM jobs through dask-jobqueue's ``SLURMCluster``. The job script,
its submission and cancelling are dask-jobqueue's; here the line's options become its arguments (the site's
``jobqueue.slurm.*`` config gives the rest), SLURM checks the job before anything is queued (``open``, before a
running cluster stops), the jobs are submitted by ``start`` (in the background in a notebook), and the queue's
view of each job (state, node, why it waits, a start that failed) is read with ``squeue``."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpu_magics.cluster.info import JobInfo
from gpu_magics.cluster.managers import needs
from gpu_magics.cluster.managers.base import ClusterManager
from gpu_magics.cluster.managers.slurm import squeue
from gpu_magics.cluster.managers.slurm.squeue import job_workers
from gpu_magics.cluster.options import PROG, ClusterOptions, SlurmOptions
from gpu_magics.text.errors import LineError, ServiceError, StartFailed
from gpu_magics.text.units import dropped

if TYPE_CHECKING:
    from distributed import Client

    from gpu_magics.cluster.background.starting import Starting

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
    job = options.slurm or SlurmOptions()
    gpu = job.gpus_per_job is not None
    per_job = job.gpus_per_job or options.cpu_workers or 1
    cores = config.get("cores")
    if cores is None or "threads_per_worker" in options.given:
        cores = per_job * options.worker_threads(gpu)
    per_worker_gb = GPU_JOB_MEMORY_GB if gpu else CPU_JOB_MEMORY_GB
    memory = job.memory or config.get("memory") or f"{per_job * per_worker_gb}GB"
    directives = list(config.get("job-extra-directives") or ())
    if gpu:
        form = "--gpus" if job.gpu_directive == "gpus" else "--gres=gpu"
        directives.append(f"{form}={job.gpus_per_job}" if form == "--gpus" else f"{form}:{job.gpus_per_job}")
    directives += job.job_options
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
        ("queue", job.partition),
        ("account", job.account),
        ("walltime", job.walltime),
        ("interface", job.interface),
    ):
        if value is not None:
            arguments[key] = value
    return arguments


class SlurmManager(ClusterManager):
    """A ``SLURMCluster`` made here: ``open`` has SLURM check the job before anything is queued, ``start`` makes
    the cluster (its scheduler starts here) and submits the jobs; they are cancelled when it closes (stop, idle,
    kernel exit, a failed start), and those SLURM still lists afterwards are cancelled again by id."""

    owned = True
    background = True  # the jobs wait in the queue, then start their workers: seconds to hours; cells go on

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__(None, "SLURM jobs")
        self.options = options
        self.submitted: set[str] = set()  # every job id sbatch gave, in order of submission
        self.failures: list[str] = []  # what sbatch said when a submission failed

    @property
    def declared_workers(self) -> Literal["gpu", "cpu"] | None:
        """CPU workers where the line asked for them (``--cpu-workers K`` per job: they stay CPU workers on a node
        with GPUs); else what the workers say (``--gpus-per-job``: dask-cuda's, where CuPy is there)."""
        return "cpu" if self.options.cpu_workers is not None else None

    @property
    def source(self) -> str:
        return "from SLURM jobs"

    @property
    def taken(self) -> str:
        return "up since"

    @property
    def title(self) -> str:
        return "SLURM"

    def open(self, reuse: bool = False) -> None:
        """dask-jobqueue and the protocol; for a start also ``sbatch`` on PATH and the job script, which SLURM
        checks without queueing it (``sbatch --test-only``). One-line errors; nothing is queued."""
        needs.comm_protocol(self.options.protocol, PROG)
        if not needs.has("dask_jobqueue"):
            raise LineError(f"{WHAT}: dask-jobqueue is not installed ({INSTALL})")
        if reuse:
            return
        if squeue.sbatch_path() is None:
            raise ServiceError(
                f"{WHAT}: no sbatch on PATH: run this where SLURM's commands work (a login node), or attach to a "
                f"scheduler with {PROG} --address"
            )
        refused = squeue.test_submit(job_script(_arguments(self.options)))
        if refused is not None:
            raise ServiceError(f"{WHAT}: SLURM refused the job: {refused}")

    def start(self, options: ClusterOptions, starting: Starting) -> Client:
        """Make the ``SLURMCluster`` (its scheduler starts here), submit ``--jobs`` jobs and connect."""
        from gpu_magics.cluster.managers import attach

        self.cluster = make_cluster(_arguments(options), self.submitted, self.failures)
        self.cluster.scale(jobs=(options.slurm or SlurmOptions()).jobs or 1)
        self._submit(options.start_timeout)
        return attach.connect_manager(self.cluster, options.start_timeout)

    def _submit(self, timeout: float) -> None:
        """Wait until every job of the plan is submitted (``sbatch`` ran on the cluster's event loop): the jobs
        are in the queue once the start has the cluster in use."""
        cluster = self.cluster

        async def correct() -> None:
            await cluster._correct_state()

        try:
            asyncio.run_coroutine_threadsafe(correct(), cluster.loop.asyncio_loop).result(timeout)
        except RuntimeError:  # a refused submission: SLURM's own words, as dask-jobqueue's job kept them
            if self.failures:
                raise ServiceError(f"{WHAT}: SLURM refused a job: {self.failures[0]}") from None
            raise

    def expected_workers(self) -> int:
        if self.cluster is not None:
            return super().expected_workers()
        job = self.options.slurm or SlurmOptions()
        return (job.jobs or 1) * (job.gpus_per_job or self.options.cpu_workers or 1)

    def jobs(self, workers: dict[str, dict[str, Any]]) -> tuple[JobInfo, ...]:
        return slurm_jobs(self.cluster, workers) if self.cluster is not None else ()

    def _check_started(self, seen: set[str]) -> None:
        if self.failures:
            raise ServiceError(f"{WHAT}: SLURM refused a job: {self.failures[0]}")
        waiting = [job_id for job_id, names in job_workers(self.cluster).items() if not names & seen]
        for queued in squeue.states(waiting).values():  # one squeue for all of them
            if queued.state in squeue.ENDED:
                log = log_path(self.cluster, queued.job_id)
                said = _last_line(log)
                raise StartFailed(
                    f"{WHAT}: job {queued.job_id} ended ({queued.state}) before its workers started"
                    + (f": {said}" if said else "")
                    + (f"; its log: {log}" if log else "")
                )

    def finish(self, name: str, keep: bool | None = None) -> str:
        """Close the cluster (dask-jobqueue cancels each job), cancel by id any job SLURM still lists, and wait
        (bounded) until SLURM lists none of them (``keep`` does not apply: the jobs' scheduler runs here)."""
        count = len(self.submitted)
        if self.cluster is not None:
            try:
                self.cluster.close(timeout=30)
            finally:
                left = self._alive()
                squeue.cancel(left)
                deadline = time.monotonic() + GONE_TIMEOUT_S
                while left and time.monotonic() < deadline:
                    time.sleep(0.2)
                    left = self._alive()
        return f"{PROG}: stopped cluster {name!r}; cancelled its {count} SLURM job{'s' if count != 1 else ''}"

    def _alive(self) -> list[str]:
        return [job.job_id for job in squeue.states(self.submitted).values() if job.state in squeue.ALIVE]


def _arguments(options: ClusterOptions) -> dict[str, Any]:
    import dask

    return job_arguments(options, dict(dask.config.get("jobqueue.slurm", default={}) or {}))


def _jobqueue_slurm() -> None:
    """Import ``dask_jobqueue.slurm`` keeping this process's interrupt handler: its ``runner`` module sets one at
    import that exits the process (``sys.exit``), so the notebook's stop button would end that cell with a
    ``SystemExit`` rather than a ``KeyboardInterrupt``."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # (only the main thread's handler counts)
        import dask_jobqueue.slurm

        return
    handler = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue.slurm  # noqa: F401
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


def job_script(arguments: dict[str, Any]) -> str:
    """The batch script ``SLURMCluster(**arguments)`` would submit, made without a cluster (no scheduler starts):
    dask-jobqueue's own job with its placeholder scheduler address, as its ``job_script()`` gives before the
    scheduler runs. One-line ``LineError`` for arguments it refuses."""
    import dask

    _jobqueue_slurm()  # first imported keeping the interrupt handler; then as usual
    from dask_jobqueue.slurm import SLURMJob

    job = {key: value for key, value in arguments.items() if key not in ("name", "scheduler_options", "silence_logs")}
    job.setdefault("interface", dask.config.get("jobqueue.slurm.interface", default=None))
    job.setdefault("protocol", None)
    try:
        made = SLURMJob("tcp://<insert-scheduler-address-here>:8786", name="dummy-name", config_name="slurm", **job)
        return str(made.job_script())
    except (ValueError, TypeError, OSError) as error:  # what dask-jobqueue says of an argument it refuses
        raise LineError(f"{WHAT}: {_one_line(error)}") from None


def make_cluster(arguments: dict[str, Any], submitted: set[str], failures: list[str]) -> Any:
    """dask-jobqueue's ``SLURMCluster`` (its scheduler starts here, no job yet), whose jobs add their ids to
    ``submitted`` and what SLURM said of a refused submission to ``failures``."""
    needs.require("dask_jobqueue.slurm", WHAT, f"dask-jobqueue is not installed ({INSTALL})")
    _jobqueue_slurm()  # first imported keeping the interrupt handler; then as usual
    from dask_jobqueue import SLURMCluster
    from dask_jobqueue.slurm import SLURMJob

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

    try:
        return SLURMCluster(job_cls=RecordedJob, **arguments)  # type: ignore[arg-type]
    except (ValueError, TypeError, OSError) as error:
        raise LineError(f"{WHAT}: {_one_line(error)}") from None


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
    except (ValueError, TypeError, OSError) as error:  # as job_script(); its scheduler closed (ValueError): no path
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
