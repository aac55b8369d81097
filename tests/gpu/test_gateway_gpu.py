"""A kernel process that sees no GPU (``CUDA_VISIBLE_DEVICES=""``) gets its workers from a real Dask Gateway
(``dask-gateway-server`` on loopback, local-process backend) whose workers are ``dask cuda worker`` processes with
one GPU each: ``%gpucluster --gateway`` makes the cluster, the 80 GB seed runs with CuPy chunks on the workers'
GPUs, the value comes back as NumPy, and ``stop`` leaves nothing running on the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway_server import GatewayServer, gateway_server
from tests.gpu.test_gpuless_gpu import check, cuda_worker_env, run_kernel

pytest.importorskip("dask_gateway_server", reason="needs dask-gateway-server")


@pytest.fixture(scope="module")
def gpu_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with gateway_server(
        tmp_path_factory.mktemp("gateway"),
        backend="local",
        worker_cmd=("dask", "cuda", "worker"),
        environment=cuda_worker_env(),
        worker_start_timeout=120,
    ) as server:
        yield server


def test_a_gpuless_kernel_runs_the_80_gb_seed_on_gateway_gpu_workers(gpu_gateway: GatewayServer) -> None:
    line = "--gateway --workers 1 --gateway-option worker_cores=4 --gateway-option worker_memory=32 --name gw"
    report = run_kernel(line, 100_000, 10_000, gpu_gateway.env())
    check(report)
    print(report["summary"])
    print(f"gateway cluster up in {report['start_s']:.2f} s; the 80 GB seed took {report['best_s']:.3f} s")
    assert gpu_gateway.clusters() == []  # the kernel's stop shut the gateway cluster down
