"""The documented recipe for GPU workers on Kubernetes (``docs/how-to/kubernetes.md``), as printed: the spec it
builds with dask-kubernetes' ``make_cluster_spec`` (no Kubernetes cluster is run) starts commands that exist on this
distributed (``dask scheduler``; ``dask cuda worker`` where dask-cuda is installed) and gives each worker, and only
the workers, one GPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dask_kubernetes", reason="needs dask-kubernetes (the test extra)")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "kubernetes.md"


def recipe() -> str:
    """The page's code block that builds the spec, up to (not including) the ``KubeCluster`` it starts."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    (block,) = [block for block in blocks if "make_cluster_spec" in block]
    return block.split("cluster = KubeCluster(")[0]


def built_spec() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(recipe(), str(PAGE), "exec"), namespace)
    return dict(namespace["spec"])


def test_the_recipe_gives_each_worker_one_gpu_and_the_scheduler_none() -> None:
    spec = built_spec()["spec"]
    (worker,) = spec["worker"]["spec"]["containers"]
    (scheduler,) = spec["scheduler"]["spec"]["containers"]
    assert spec["worker"]["replicas"] == 4
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert scheduler["resources"] is None
    assert worker["args"][:3] == ["dask", "cuda", "worker"]
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    assert "dask-scheduler" not in scheduler["args"] and "dask-worker" not in worker["args"]


@pytest.mark.slow  # starts python -m dask
def test_the_recipes_scheduler_command_exists_here() -> None:
    scheduler = built_spec()["spec"]["scheduler"]["spec"]["containers"][0]["args"]
    done = subprocess.run([sys.executable, "-m", *scheduler[:2], "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--host" in done.stdout, done.stderr[-2000:]
