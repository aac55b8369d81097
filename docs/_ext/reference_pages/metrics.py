"""Every ``gpu_magics_*`` series the server adds to ``/metrics``: its type, help and labels."""

from __future__ import annotations

from reference_pages.markdown import HEADER, code, table


def helps() -> dict[str, str]:
    """Series name -> the help text ``/metrics`` gives it (the frame's gauges, the idle reclaim's counter)."""
    from gpu_magics.server.metrics.frame import HELP
    from gpu_magics.server.reclaim import reclaimer

    return {**HELP, f"{reclaimer.COUNTER}_total": reclaimer.HELP}


def page() -> str:
    from gpu_magics.server.metrics.series import LABELS, SERIES

    found = helps()
    declared = {series.name for series in SERIES}
    if declared != set(found):
        raise ValueError(
            "gpu_magics/server/metrics/series.py declares the labels of "
            f"{sorted(declared)}, /metrics has {sorted(found)}: declare the labels of each series there"
        )
    sections = []
    for series in SERIES:
        labels = ", ".join(code(label) for label in series.labels)
        sometimes = ", ".join(code(label) for label in series.sometimes)
        sections.append(
            f"(metric-{series.name})=\n### {code(series.name)}\n\n"
            f"A {series.kind}. {found[series.name]}\n\n"
            f"- Labels: {labels}\n" + (f"- Some series also: {sometimes}\n" if sometimes else "")
        )
    label_rows = [(code(name), words) for name, words in LABELS.items()]
    return (
        HEADER + "# `/metrics` series\n\n"
        "With `c.GpuMagicsServer.metrics = True` (the default), the Jupyter server's own Prometheus endpoint "
        "`/metrics` also serves these series, refreshed every `GpuMagicsServer.metrics_interval` seconds. A figure "
        "that cannot be measured has no series (rather than 0); a kernel's series leave once the server no longer "
        "runs it. Scraping needs the server's token, as every `/metrics` request does.\n\n"
        + "\n".join(f"- {{ref}}`{series.name} <metric-{series.name}>`" for series in SERIES)
        + "\n\n## Series\n\n"
        + "\n".join(sections)
        + "\n## Labels\n\n"
        + table(("label", "what it holds"), label_rows)
        + "\n"
    )
