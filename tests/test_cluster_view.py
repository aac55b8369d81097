"""The ``%gpucluster`` display: text and HTML forms from plain data."""

from __future__ import annotations

import dataclasses
import time

from IPython.lib.pretty import pretty

from gpu_magics.cluster.info import ClusterFacts, WorkerGpu
from gpu_magics.display.cluster_view import ClusterInfo, ClusterView, DashboardLink, WorkerInfo
from gpu_magics.display.format import WARN

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
    fields.setdefault("facts", facts_of(str(fields["kind"])))
    return ClusterInfo(**fields)  # type: ignore[arg-type]


def facts_of(kind: str) -> ClusterFacts:
    """What the manager of a cluster of ``kind`` says of it (the managers themselves, made without a cluster)."""
    from gpu_magics.cluster.managers.adopted import AdoptedManager
    from gpu_magics.cluster.managers.attached import AttachedManager
    from gpu_magics.cluster.managers.gateway.manager import GatewayManager
    from gpu_magics.cluster.managers.local.cpu import LocalCpuManager
    from gpu_magics.cluster.managers.local.gpu import LocalGpuManager
    from gpu_magics.cluster.options import parse_cluster_line

    managers = {
        "gpu": lambda: LocalGpuManager(parse_cluster_line("")),
        "cpu": lambda: LocalCpuManager(parse_cluster_line("--cpu-workers 2")),
        "attached": lambda: AttachedManager("tcp://10.0.0.5:8786"),
        "adopted": lambda: AdoptedManager(None, "KubeCluster"),
        "gateway": lambda: GatewayManager(parse_cluster_line("--gateway --workers 2")),  # made here
        "gateway-connected": lambda: GatewayManager(parse_cluster_line("--gateway --connect default.5b4e57c3")),
    }
    return managers[kind]().facts("gpu")


def test_text_has_one_row_per_worker() -> None:
    text = ClusterView(gpu_info()).text()
    assert "Cluster 'gpu': 4x NVIDIA H200 (4 workers), started here" in text
    assert "dashboard: http://127.0.0.1:39001/status" in text
    assert "started in 2.26 s (workers ready 1.84 s, warm-up 420 ms)" in text
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


NOW = 1_800_000_000.0


def clock(moment: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(moment))


def test_status_later_shows_when_it_started_and_state_not_the_start_up_again() -> None:
    """The start as a clock time, which a saved output keeps true (a duration like "up 0 s" would freeze)."""
    fresh = ClusterView(gpu_info(started_at=NOW - 3), now=NOW).text()
    assert f"4 workers running · up since {clock(NOW - 3)}" in fresh and "started in 2.26 s" in fresh
    assert " s\n" not in fresh.split("up since", 1)[1].split("\n", 1)[0]
    later = ClusterView(gpu_info(started_at=NOW - 300), now=NOW)
    assert f"4 workers running · up since {clock(NOW - 300)}" in later.text() and "started in" not in later.text()
    assert "started in" not in later.html() and f"up since {clock(NOW - 300)}" in later.html()
    attached = ClusterView(gpu_info(kind="attached", started_at=NOW - 7200), now=NOW).text()
    assert f"attached at {clock(NOW - 7200)}" in attached
    days_ago = ClusterView(gpu_info(started_at=NOW - 3 * 86400), now=NOW).text()
    assert "up since " + time.strftime("%b %d %H:%M", time.localtime(NOW - 3 * 86400)) in days_ago


def test_a_gateway_cluster_connected_to_tells_its_own_age_and_the_connection() -> None:
    """After ``--gateway --connect``: "up since" is when the gateway started it, and the start-up figures are
    the connection's; the headline names it once, by its short name."""
    info = gpu_info(
        name="default.5b4e57c3",
        kind="gateway",
        facts=facts_of("gateway-connected"),
        manager="Dask Gateway",
        started_at=NOW - 2,
        up_since=NOW - 5400,
        ready_s=1.2,
        warm_s=None,
    )
    text = ClusterView(info, now=NOW).text()
    lines = text.splitlines()
    assert lines[0] == "Cluster 'default.5b4e57c3': 4x NVIDIA H200 (4 workers), from Dask Gateway, not made here"
    assert f"4 workers running · up since {clock(NOW - 5400)}" in text and "connected in 1.20 s" in text
    assert "started in" not in text and "workers ready" not in text
    html = ClusterView(info, now=NOW).html()
    assert f"up since {clock(NOW - 5400)}" in html and "connected in 1.20 s" in html


def test_old_gpu_figures_say_how_old() -> None:
    reported = WorkerGpu(label="GPU 0", name="NVIDIA H200", uuid="GPU-0", memory_used=GIB, process_memory=GIB)
    workers = (dataclasses.replace(gpu_info().workers[0], gpus=(reported,)),)
    fresh = ClusterView(gpu_info(workers=workers, figures_age=0.5), now=NOW).text()
    assert "GPU figures as of" not in fresh
    assert "GPU figures as of" not in ClusterView(gpu_info(figures_age=9.0), now=NOW).text()  # no GPU figures
    stale = ClusterView(gpu_info(workers=workers, figures_age=4.2), now=NOW)
    assert "GPU figures as of 4 s ago (the workers' last reports)" in stale.text()
    assert "GPU figures as of 4 s ago" in stale.html()


def test_mixed_worker_states_are_counted() -> None:
    info = gpu_info()
    workers = (*info.workers[:3], WorkerInfo(address="tcp://x:9", name="3", status="paused", threads=4))
    text = ClusterView(gpu_info(workers=workers)).text()
    assert "4 workers: 3 running, 1 paused" in text


def test_worker_gpus_grouped_by_host_with_utilization_and_memory() -> None:
    from gpu_magics.cluster.info import WorkerGpu

    def gpu(host: str, index: int, **changes: object) -> WorkerGpu:
        fields: dict[str, object] = {
            "label": f"{host} · GPU {index}",
            "name": "NVIDIA H200",
            "uuid": f"GPU-{host}-{index}",
            "memory_used": 10 * GIB,
            "memory_total": 141 * GIB,
            "gpu_util": 72.4,
            "process_memory": 9 * GIB,
        }
        fields.update(changes)
        return WorkerGpu(**fields)  # type: ignore[arg-type]

    workers = (
        WorkerInfo("tcp://10.0.0.2:1", "b-0", "running", 4, host="node-b", gpus=(gpu("node-b", 0),)),
        WorkerInfo("tcp://10.0.0.1:1", "a-0", "running", 4, host="node-a", gpus=(gpu("node-a", 0), gpu("node-a", 1))),
        WorkerInfo(
            "tcp://10.0.0.1:2", "a-1", "running", 4, host="node-a", gpus=(gpu("node-a", 2, error="NVML: GPU is lost"),)
        ),
    )
    view = ClusterView(gpu_info(workers=workers))
    lines = view.text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("host"))
    table = lines[header:]
    assert table[0].split() == ["host", "worker", "GPU", "util", "memory", "worker", "holds", "status", "threads"]
    assert table[1].startswith("node-a  a-0") and "GPU 0 · NVIDIA H200" in table[1] and "72%" in table[1]
    assert "10.0 GiB / 141 GiB" in table[1] and "9.0 GiB" in table[1] and "running" in table[1]
    assert table[2].startswith("      ") and "GPU 1 · NVIDIA H200" in table[2]  # same worker: host, name once
    assert table[3].startswith("        a-1") and "unreadable (NVML: GPU is lost)" in table[3]
    assert table[4].startswith("node-b  b-0")
    end = table[0].index("util") + len("util")
    assert table[1][:end].endswith("72%")  # numbers right-aligned under their header
    markup = view.html()
    assert "<th style='text-align:right;padding:2px 8px;font-weight:600'>util</th>" in markup
    assert "<td style='text-align:right;padding:2px 8px'>72%</td>" in markup
    assert "color:var(--jp-success-color1," in markup and 'title="NVML: GPU is lost">unreadable<' in markup
    assert markup.count(">node-a<") == 1


def test_dashboard_note_under_the_link() -> None:
    note = "the dashboard listens on 127.0.0.1 only: open it through the Jupyter server proxy"
    view = ClusterView(gpu_info(dashboard_note=note))
    text, markup = view.text(), view.html()
    assert text.index("dashboard: http://127.0.0.1:39001/status") < text.index(note)
    assert markup.index("39001/status</a>") < markup.index(note)
    link = DashboardLink("http://127.0.0.1:1/status", note=note)
    assert note in repr(link) and note in link._repr_html_()


def test_a_cpu_cluster_shows_no_empty_gpu_or_host_columns() -> None:
    worker = WorkerInfo("tcp://127.0.0.1:1", "0", "running", 2, host_memory_used=2**20, host_memory_limit=GIB)
    view = ClusterView(gpu_info(kind="cpu", workers=(worker,)))
    header = next(line for line in view.text().splitlines() if line.startswith("worker"))
    assert header.split() == ["worker", "memory", "status", "threads"]
    assert ">util<" not in view.html() and ">host<" not in view.html() and ">memory<" in view.html()


def test_the_plain_cells_line_follows_the_dashboard_and_warns_when_gpus_sit_idle() -> None:
    line = "plain cells: NumPy chunks on the workers' CPUs, the GPUs idle; %gpurun multi-gpu puts them on the GPUs"
    view = ClusterView(gpu_info(plain_cells=line, plain_cells_idle_gpus=True))
    lines = view.text().splitlines()
    assert lines[lines.index("dashboard: http://127.0.0.1:39001/status") + 1] == line
    assert f'class="gpu-magics-plain-cells" style="color:{WARN}"' in view.html()
    calm = ClusterView(gpu_info(plain_cells="plain cells: multi-gpu, CuPy chunks on the cluster's GPUs")).html()
    assert 'class="gpu-magics-plain-cells" style=""' in calm
    assert "plain cells" not in ClusterView(gpu_info()).text()


def test_the_idle_line_and_the_clock_say_what_the_manager_does() -> None:
    """A cluster this kernel did not make (a gateway cluster connected to, a --from one) only detaches when idle:
    its manager says so, and the card reads it (never the kind)."""
    for kind, verb in (
        ("gpu", "closes"),
        ("gateway", "closes"),
        ("gateway-connected", "detaches"),
        ("adopted", "detaches"),
        ("attached", "detaches"),
    ):
        text = ClusterView(gpu_info(kind="gpu", facts=facts_of(kind), idle_timeout=1800.0), now=NOW).text()
        assert f"{verb} after 30 min without a task" in text, (kind, text)
    adopted = ClusterView(gpu_info(kind="adopted", started_at=NOW - 60), now=NOW).text()
    assert "adopted KubeCluster, not started here" in adopted and f"adopted at {clock(NOW - 60)}" in adopted
    connected = facts_of("gateway-connected")
    assert (connected.owned, connected.restartable, connected.scalable) == (False, False, True)
    made = facts_of("gateway")
    assert (made.owned, made.ends, made.restartable) == (True, "close", True)
    attached = facts_of("attached")
    assert (attached.scalable, attached.restartable, attached.ends) == (False, False, "detach")


def test_an_adopted_cluster_says_when_it_was_adopted_and_no_start_up() -> None:
    """A ``--from`` cluster was running before: its card says when it was adopted, never "started in"."""
    for kind in ("adopted", "attached"):
        view = ClusterView(gpu_info(kind=kind, started_at=NOW - 2), now=NOW)
        taken = "adopted at" if kind == "adopted" else "attached at"
        assert f"{taken} {clock(NOW - 2)}" in view.text(), view.text()
        assert "started in" not in view.text() and "workers ready" not in view.text()
        assert "started in" not in view.html()


def test_workers_named_by_an_id_are_shown_as_worker_n_with_the_id_on_hover() -> None:
    """Dask Gateway names its workers by 32 hex digits: the table says ``worker 1``, ``worker 2`` (in the order
    of their addresses) and keeps the id and address in the tooltip; readable names stay as they are."""
    ids = ["9f0c2d1e4b3a4c5d8e7f6a5b4c3d2e1f", "0a1b2c3d4e5f60718293a4b5c6d7e8f9"]
    workers = [
        WorkerInfo(address=f"tls://10.0.0.{7 - i}:8786", name=name, status="running", threads=1)
        for i, name in enumerate(ids)
    ]
    workers.append(WorkerInfo(address="tls://10.0.0.9:8786", name="edge-0", status="running", threads=1))
    view = ClusterView(gpu_info(kind="gateway", workers=tuple(workers)), now=NOW)
    text = view.text()
    assert not any(name in text for name in ids), text
    assert "worker 1" in text and "worker 2" in text and "edge-0" in text
    html = view.html()
    assert f'title="{ids[1]} at tls://10.0.0.6:8786">worker 1</span>' in html  # the lower address is worker 1
    assert f'title="{ids[0]} at tls://10.0.0.7:8786">worker 2</span>' in html
    assert 'title="tls://10.0.0.9:8786">edge-0</span>' in html
