"""What each ``gpu_magics_*`` series of ``/metrics`` is labelled with, declared in one place for the reference
pages (``frame.HELP`` and ``reclaim.reclaimer`` say what each series measures). A test builds frames and checks that
the series carry exactly these labels."""

from __future__ import annotations

from dataclasses import dataclass

GPU = ("UUID", "gpu", "modelName", "Hostname")  # as dcgm-exporter labels its DCGM_FI_* series
POD = ("pod", "namespace")  # in Kubernetes only


@dataclass(frozen=True)
class Labelled:
    """A series family: its type, the labels every series has, and those some have (``when``: which)."""

    name: str
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...]
    sometimes: tuple[str, ...] = POD


SERIES = (
    Labelled("gpu_magics_gpu_utilization_ratio", "gauge", GPU, ("mig_uuid", *POD)),
    Labelled("gpu_magics_gpu_memory_used_bytes", "gauge", GPU, ("mig_uuid", *POD)),
    Labelled("gpu_magics_gpu_memory_total_bytes", "gauge", GPU, ("mig_uuid", *POD)),
    Labelled("gpu_magics_gpu_power_watts", "gauge", GPU, ("mig_uuid", *POD)),
    Labelled(
        "gpu_magics_kernel_gpu_memory_bytes",
        "gauge",
        ("kernel_id", "UUID", "Hostname", "part"),
        ("mig_uuid", "notebook", *POD),
    ),
    Labelled("gpu_magics_kernel_gpu_time_ratio", "gauge", ("kernel_id", "UUID", "Hostname"), ("notebook", *POD)),
    Labelled(
        "gpu_magics_kernel_gpu_memory_cap_bytes",
        "gauge",
        ("kernel_id", "UUID", "Hostname", "by"),
        ("mig_uuid", "notebook", *POD),
    ),
    Labelled("gpu_magics_kernel_idle_hold_seconds", "gauge", ("kernel_id",), ("notebook", *POD)),
    Labelled("gpu_magics_leftover_gpu_memory_bytes", "gauge", ("kernel_id", "UUID", "Hostname"), ("mig_uuid", *POD)),
    Labelled("gpu_magics_leftover_processes", "gauge", ("kernel_id", "UUID", "Hostname"), ("mig_uuid", *POD)),
    Labelled("gpu_magics_cluster_workers", "gauge", ("kernel_id", "cluster")),
    Labelled("gpu_magics_cluster_gpus", "gauge", ("kernel_id", "cluster")),
    Labelled("gpu_magics_cluster_info", "gauge", ("kernel_id", "cluster", "kind", "started_here")),
    Labelled("gpu_magics_cluster_idle_seconds", "gauge", ("kernel_id", "cluster")),
    Labelled("gpu_magics_cluster_parked_workers", "gauge", ("kernel_id", "cluster")),
    Labelled("gpu_magics_cluster_parked_bytes", "gauge", ("kernel_id", "cluster")),
    Labelled("gpu_magics_idle_reclaims_total", "counter", ("action",)),
)

LABELS = {
    "UUID": "the GPU's NVML UUID (a MIG instance's: its GPU's), as dcgm-exporter's",
    "gpu": "the GPU's NVML index on its host, as dcgm-exporter's",
    "modelName": "the GPU's model, as NVML names it",
    "Hostname": "the host: `$NODE_NAME` where set (as dcgm-exporter reads it), else the host's name",
    "mig_uuid": "a MIG instance's own UUID",
    "kernel_id": "the id of a Jupyter kernel this server runs (another server's kernels are on its own /metrics)",
    "part": "which of the kernel's processes hold it: `kernel`, `workers` (its cluster's), `ranks` (its SPMD "
    "ranks) or `children` (other processes it started)",
    "notebook": "the kernel's notebook path, where `GpuMagicsServer.metrics_notebook_label` is on",
    "cluster": "the cluster's name, as `%gpucluster --name` gave it or its kind",
    "kind": "the kind of cluster: `gpu`, `cpu`, `attached`, `slurm`, `adopted` or `gateway`",
    "started_here": "`true` where the kernel started the cluster, `false` where it attached to or adopted one",
    "action": "what the idle reclaim did: `freed_cache`, `stopped_cluster`, `parked_cluster`, `kept_cluster` or "
    "`failed`",
    "by": "who set the cap that binds: `server` (`GpuMagicsServer.memory_cap`) or `notebook` (`%gpumemory --cap`)",
    "pod": "the server's pod, in Kubernetes",
    "namespace": "the server's namespace, in Kubernetes",
}
