"""Every ``%gpucluster`` line the README, the documentation pages and ``%gpucluster?`` show parses as printed (a
line that does not parse is a documented example that cannot work); placeholders (``N``, ``MIN MAX``, ``<...>``) are
filled in first."""

from __future__ import annotations

import re

import pytest

from gpu_magics.cluster.options import parse_cluster_line
from gpu_magics.magics.gpucluster import ClusterMagics
from tests.doc_snippets import pages

PLACEHOLDERS = {
    "<scheduler address>": "tcp://127.0.0.1:8786",
    "tcp://host:port": "tcp://127.0.0.1:8786",
    "MIN MAX": "0 2",
    "NAME": "cluster",
    "HH:MM:SS": "01:00:00",
}


def documented_lines() -> list[str]:
    texts = [page.read_text(encoding="utf-8") for page in pages()] + [ClusterMagics.gpucluster.__doc__ or ""]
    found = set()
    for text in texts:
        for line in re.findall(r"%gpucluster(?: [^`\n|]*)?", text):
            line = line.split("   ")[0].strip().rstrip(".,;:)")  # a help line's comment column, a sentence's end
            for placeholder, value in PLACEHOLDERS.items():
                line = line.replace(placeholder, value)
            line = re.sub(r"(scale|--jobs|--gpus-per-job|--cpu-workers|--timeout|--wait) [NGK]\b", r"\1 2", line)
            if "..." in line or "[" in line or "|" in line or "<" in line or re.search(r":\s", line):
                continue  # a usage summary or an output line, not an example
            found.add(line)
        # an option shown on its own (``--job-option "--constraint=a100"``), as part of the line it belongs to
        for option in re.findall(r'`?(--job-option "[^"]+")`?', text):
            found.add(f"%gpucluster --slurm --jobs 1 --cpu-workers 1 {option}")
    return sorted(found)


def test_the_documentation_shows_lines_worth_checking() -> None:
    lines = documented_lines()
    assert len(lines) > 15 and any("--job-option" in line for line in lines)


@pytest.mark.parametrize("line", documented_lines())
def test_a_documented_line_parses_as_printed(line: str) -> None:
    parse_cluster_line(line.removeprefix("%gpucluster").strip())


def test_a_job_option_given_as_its_own_word_is_one_directive() -> None:
    options = parse_cluster_line('--slurm --jobs 1 --cpu-workers 1 --job-option "--constraint=a100" --job-option=-x')
    assert options.slurm is not None and options.slurm.job_options == ("--constraint=a100", "-x")
