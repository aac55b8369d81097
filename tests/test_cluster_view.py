"""The ``%gpucluster`` display: text and HTML forms from plain data."""

from __future__ import annotations

from IPython.lib.pretty import pretty

from gpu_magics.display.cluster_view import ClusterInfo, ClusterView, DashboardLink, WorkerInfo

GIB = 2**30


def gpu_info(**changes: object) -> ClusterInfo:
    workers = tuple(
        WorkerInfo(
            address=f"tcp://127.0.0.1:{4000 + i}",
            name=str(i),
            status="running",
            threads=4,
            gpu_name="NVIDIA H200",
            gpu_device=str(i),
            gpu_memory_used=GIB,
            gpu_memory_total=141 * GIB,
        )
        for i in range(4)
    )
    fields: dict[str, object] = {
        "name": "gpu",
        "kind": "gpu",
        "scheduler_address": "tcp://127.0.0.1:39000",
        "dashboard_url": "http://127.0.0.1:39001/status",
        "hardware": "4x NVIDIA H200 (4 workers)",
        "workers": workers,
        "ready_s": 1.84,
        "warm_s": 0.42,
    }
    fields.update(changes)
    return ClusterInfo(**fields)  # type: ignore[arg-type]


def test_text_has_one_row_per_worker() -> None:
    text = ClusterView(gpu_info()).text()
    assert "Cluster 'gpu': 4x NVIDIA H200 (4 workers), started here" in text
    assert "dashboard: http://127.0.0.1:39001/status" in text
    assert "up in 2.26 s (workers ready 1.84 s, warm-up 420 ms)" in text
    rows = [line for line in text.splitlines() if "NVIDIA H200 (GPU" in line]
    assert len(rows) == 4
    assert "1.0 GiB / 141 GiB GPU" in rows[0] and "running" in rows[0] and rows[0].rstrip().endswith("4")


def test_html_links_dashboard_and_escapes() -> None:
    hostile = "<script>alert(1)</script>"
    info = gpu_info(
        name=hostile,
        notice=f"note {hostile}",
        workers=(WorkerInfo(address="tcp://x:1", name=hostile, status=hostile, threads=1, gpu_name=hostile),),
    )
    view = ClusterView(info)
    markup = view._repr_html_()
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    assert '<a href="http://127.0.0.1:39001/status" target="_blank" rel="noopener">' in markup
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"] == repr(view) == pretty(view)


def test_cpu_workers_and_no_dashboard() -> None:
    worker = WorkerInfo(
        address="tcp://127.0.0.1:1",
        name="0",
        status="running",
        threads=1,
        host_memory_used=100 * 2**20,
        host_memory_limit=4 * GIB,
    )
    info = gpu_info(
        kind="cpu",
        hardware="1 CPU worker x 1 thread",
        dashboard_url=None,
        workers=(worker,),
        ready_s=None,
        warm_s=None,
    )
    text = ClusterView(info).text()
    assert "dashboard: off" in text and "100 MiB / 4.0 GiB host" in text and "ready" not in text
    assert "dashboard off" in ClusterView(info).html()
    empty = ClusterView(gpu_info(workers=()))
    assert "no workers" in empty.text() and "no workers" in empty.html()


def test_attached_says_so_and_non_http_links_are_not_links() -> None:
    info = gpu_info(kind="attached", dashboard_url="javascript:alert(1)")
    assert "attached, not started here" in ClusterView(info).text()
    assert "<a " not in ClusterView(info).html()


def test_dashboard_link() -> None:
    link = DashboardLink("http://127.0.0.1:1/status")
    assert repr(link) == "Dask dashboard: http://127.0.0.1:1/status"
    assert 'href="http://127.0.0.1:1/status"' in link._repr_mimebundle_()["text/html"]
