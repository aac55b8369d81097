"""How the series are labelled, as dcgm-exporter labels its ``DCGM_FI_*`` series so that PromQL joins work:
``UUID``, ``gpu`` (the host's NVML index), ``modelName``, ``Hostname`` (``$NODE_NAME`` where set, as dcgm-exporter
reads it, else this host's name), and in Kubernetes ``pod`` and ``namespace``. A MIG instance is labelled with its
GPU's ``UUID`` and its own as ``mig_uuid``, as dcgm-exporter adds ``GPU_I_*`` labels to its GPU's."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_magics.monitor.models import GpuReading

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
MAX_LABEL = 200  # characters of a label value kept (record files are read as they are)

Labels = tuple[tuple[str, str], ...]
_UUID = re.compile(r"(GPU|MIG)-[A-Za-z0-9./_-]{1,120}")  # NVML's GPU-/MIG- UUIDs (and MIG-GPU-<uuid>/<gi>/<ci>)


@dataclass(frozen=True)
class Place:
    """Where this server runs: its host's name and, in Kubernetes, its pod."""

    hostname: str
    pod: Labels = ()  # (("pod", name), ("namespace", ns)) in Kubernetes, else empty

    @classmethod
    def here(cls, environ: Mapping[str, str] = os.environ) -> Place:
        """Read once, when the feed starts (``NAMESPACE_FILE`` is a file)."""
        hostname = environ.get("NODE_NAME") or socket.gethostname()
        if not environ.get("KUBERNETES_SERVICE_HOST"):
            return cls(hostname)
        pod = environ.get("POD_NAME") or socket.gethostname()  # a pod's hostname is its name
        namespace = environ.get("POD_NAMESPACE") or _read(NAMESPACE_FILE)
        found = [("pod", pod)] + ([("namespace", namespace)] if namespace else [])
        return cls(hostname, tuple(found))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def clean(value: object) -> str:
    """A label value: text, cut to ``MAX_LABEL`` characters."""
    return str(value)[:MAX_LABEL]


def is_uuid(value: object) -> bool:
    """Whether ``value`` reads as a GPU or MIG UUID (what a record says is checked before it becomes a label)."""
    return isinstance(value, str) and _UUID.fullmatch(value) is not None


def device(uuid: str, local: Mapping[str, GpuReading]) -> Labels:
    """``UUID`` (a MIG instance's GPU's) and ``mig_uuid`` for a MIG instance this server reads."""
    reading = local.get(uuid)
    if reading is not None and reading.mig_parent:
        return (("UUID", clean(reading.mig_parent)), ("mig_uuid", clean(uuid)))
    return (("UUID", clean(uuid)),)


def gpu_index(reading: GpuReading) -> str:
    """As dcgm-exporter's ``gpu``: the host's NVML index where known."""
    return str(reading.nvml_index if reading.nvml_index is not None else reading.index)
