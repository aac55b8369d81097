"""What each option of the magics' parsers does, and what applies where a line leaves it out: set on the parsers'
actions by the parser's ``prog`` (``MagicArgumentParser.described``), read by the reference pages. A ``{NAME}`` in
the words is the constant of that name in the parser's module, so a default written in code is said as it is."""

from __future__ import annotations

# option: (what it does, what applies where the line leaves it out)
CLUSTER: dict[str, tuple[str, str]] = {
    "--gpus": ("The GPUs to use, one worker each; `free` takes the GPUs that are free now, `free:N` the N freest "
               "(`%config ClusterMagics.free_memory` and `free_utilization` say what is free).", "every visible GPU"),
    "--cpu-workers": ("Start this many CPU worker processes instead of GPU workers; with `--slurm`, per job.",
                      "GPU workers"),
    "--address": ("Attach to the running scheduler at this address; `stop` only disconnects.",
                  "start a cluster here"),
    "--threads-per-worker": ("Threads per worker.",
                             "{GPU_WORKER_THREADS} for GPU workers, {CPU_WORKER_THREADS} for CPU workers"),
    "--device-memory-limit": ("Spill from GPU to host memory above this size or share of each GPU's memory.",
                              "dask-cuda's"),
    "--rmm-pool-size": ("An RMM memory pool of this size on each GPU (needs rmm).", "no pool"),
    "--protocol": ("The workers' communication protocol; `ucx` (also spelt `ucxx`) needs distributed-ucxx.", "`tcp`"),
    "--dashboard": ("The Dask dashboard, on a free port.", "on"),
    "--name": ("The cluster's name, shown in the JupyterLab panel.",
               "the adopted variable's name, the gateway cluster's, else the kind of cluster"),
    "--host": ("The address the scheduler, workers and dashboard bind to; with `--slurm`, where the scheduler "
               "listens for the jobs' workers.", "`127.0.0.1`; with `--slurm`, the config's, else every interface"),
    "--client": ("Also put the `Client` in the notebook's namespace under this name (any action).", "none"),
    "--replace": ("Stop the running cluster and start this one, once its needs are checked.",
                  "reuse the running cluster; a line naming another cluster fails"),
    "--timeout": ("How long to wait for a scheduler to answer (attaching) or for the workers (starting); once up, "
                  "how long the client tries to reach a scheduler that went away before a cell fails.",
                  "{DEFAULT_ATTACH_TIMEOUT:g} s attaching, {DEFAULT_START_TIMEOUT:g} s starting"),
    "--idle-timeout": ("Close the cluster after this long without a task (an attached one: detach).",
                       "`%config ClusterMagics.idle_timeout` (`off`)"),
    "--slurm": ("Workers from SLURM jobs, through dask-jobqueue (needs `gpu-magics[hpc]`).", "off"),
    "--jobs": ("How many SLURM jobs to submit.", "1"),
    "--gpus-per-job": ("GPUs per SLURM job, one dask-cuda worker each.", "the site's jobqueue config"),
    "--gpu-directive": ("How a job asks for its GPUs: `--gres=gpu:G` or `--gpus=G`.", "`gres`"),
    "--partition": ("The SLURM partition.", "the site's jobqueue config"),
    "--account": ("The SLURM account.", "the site's jobqueue config"),
    "--walltime": ("The jobs' time limit.", "the site's jobqueue config"),
    "--job-option": ("Any other sbatch directive, like `--constraint=a100`.", "none"),
    "--memory": ("Host memory per SLURM job.", "the site's jobqueue config"),
    "--interface": ("The network interface the scheduler and the jobs' workers use, like `ib0`.",
                    "the site's jobqueue config"),
    "--wait": ("Return when the workers are up or after this many seconds, saying which jobs or workers still "
               "wait; the cluster keeps growing (`--slurm`, `--from`, `--gateway`).", "{DEFAULT_WAIT:g} s"),
    "--from": ("Adopt the cluster manager held in this variable (a dask-jobqueue cluster, `KubeCluster`, "
               "`GatewayCluster`, any `SpecCluster`); `stop` detaches, `stop --close` closes it.", "none"),
    "--close": ("With `stop`: close an adopted or connected cluster rather than detach from it.", "off"),
    "--keep": ("With `stop`: leave a gateway cluster made here running, for `--connect` later.", "off"),
    "--gateway": ("A cluster from a Dask Gateway (needs `gpu-magics[gateway]`), at this address if given.",
                  "off; the address from dask-gateway's config"),
    "--gateway-option": ("One of the gateway's cluster options, `KEY=VALUE`; a key it lacks lists those it offers.",
                         "the gateway's defaults"),
    "--workers": ("How many workers to ask the gateway for; `adapt MIN MAX` after the start.", "1"),
    "--list": ("List your running gateway clusters (they outlive kernels).", "off"),
    "--connect": ("Use one of your running gateway clusters; `stop` detaches, `stop --close` shuts it down.",
                  "make a new cluster"),
}  # fmt: skip

RUN: dict[str, tuple[str, str]] = {
    "--device": ("The GPU a `gpu` cell runs on; `free`: the freest GPU, said in one line.", "GPU 0"),
    "--workers": ("Threads of a `cpu-threads` or `gpu` cell.",
                  "`%config GpuMagics.cpu_threads` (0: every core), `gpu_threads` (8)"),
    "--repeat": ("Run the cell this many times; report the best and the median wall time.", "1"),
    "--compare": ("Run the cell once per backend, two or more, the first the reference (`all`: every backend this "
                  "machine can run): a table of wall times, speed-ups and whether the values agree.", "one backend"),
    "-o": ("Keep the result object (times, tasks, monitor figures; SPMD: every rank's value, error, time and peak "
           "GPU memory) in this variable.", "not kept"),
    "--output": ("SPMD: the ranks whose lines show live; the others' fold into a block a click opens.", "every rank"),
    "--quiet": ("No summary line.", "off"),
    "--no-monitor": ("No live GPU panel while the cell runs.", "the panel shows"),
    "--rtol": ("With `--compare`: the relative tolerance within which the backends' values agree.", "`0.001`"),
    "--ranks": ("SPMD: run the cell on these ranks only.", "every rank"),
    "--init": ("SPMD: make the `torch.distributed` group (NCCL on GPU ranks, gloo on CPU ranks) or call "
               "`jax.distributed.initialize` before the cell; kept until `--reset`.", "no group"),
    "--timeout": ("SPMD: the collectives' timeout.", "{DEFAULT_SPMD_TIMEOUT_MIN:g} min"),
    "--reset": ("SPMD: end the rank processes; the next SPMD cell starts new ones.", "off"),
}  # fmt: skip

MONITOR: dict[str, tuple[str, str]] = {
    "--interval": ("Seconds between two samples of the GPUs.", "0.5 s"),
    "--stop": ("Stop the panels (each keeps its last view) and the sampler thread.", "off"),
}

MEMORY: dict[str, tuple[str, str]] = {
    "--top": ("The names listed per GPU, biggest first (the others are counted in one line).", "{DEFAULT_TOP}"),
    "--drop-traceback": ("Let go of the last error's frames, and of the arrays only they hold.", "off"),
    "--cap": (
        "Cap this notebook's memory on each GPU (a size like 8GiB, a share like 25%, or off): at most the "
        "server's cap; the kernel, its cluster's worker and its SPMD rank there share it equally.",
        "the server's cap",
    ),
}

BY_PROG = {"%gpucluster": CLUSTER, "%%gpurun": RUN, "%gpumonitor": MONITOR, "%gpumemory": MEMORY}
