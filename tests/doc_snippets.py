"""The code blocks of the README and the documentation pages, read as the tests that run them need them.

Conventions of the pages (Markdown, MyST):

- A ```python or ```ipython block is a notebook cell. The cells of one page run in order in one fresh kernel, as a
  reader who copies them into a new notebook would run them.
- A ```bash block is shell commands; each one is marked ``run`` (a test runs it in the repository root) or ``skip``
  with the reason it is not run.
- Any other block (```text, a bare fence, ```yaml, ```promql) is output, a configuration file or a query; PromQL is
  run by ``tests/server/test_metrics_prometheus.py``.
- Markers on the lines before a block, ``<!-- snippet: TAG ... -->`` (one a line), say more; on a page's own line
  before its first block, ``<!-- snippets: TAG ... -->`` applies to every block of the page. Tags: ``skip REASON``
  (not run: why), ``gpu`` (needs a GPU, ``gpu 2`` two: ``tests/gpu/test_doc_snippets_gpu.py`` runs the page's
  cells with its GPU cells in one kernel), ``cpu`` (the CPU-only alternative to a GPU cell, left out where the GPU
  cells run), ``slurm`` and ``gateway`` (run by ``tests/slurm/test_doc_snippets_slurm.py`` and against a real
  gateway), ``needs MODULE ...`` (left out where a module is not installed), ``config`` (a Jupyter configuration
  file, run against a traitlets ``Config``), ``run`` (a shell command that is run).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CELL_LANGUAGES = ("python", "ipython")
FENCE = re.compile(r"^(?P<marker>(?:<!-- snippets?: [^\n]*-->\n)*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$",
                   re.M | re.S)  # fmt: skip
PAGE_MARKER = re.compile(r"^<!-- snippets: (.*?) -->$", re.M)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int
    lang: str
    body: str
    tags: tuple[str, ...]  # the marker's words, the page's first

    @property
    def kind(self) -> str:
        """``cell``, ``bash`` or ``other``."""
        return "cell" if self.lang in CELL_LANGUAGES else "bash" if self.lang in ("bash", "sh", "shell") else "other"

    def tag(self, name: str) -> list[str] | None:
        """The words after tag ``name`` in the marker that begins with it; None where no marker does."""
        for marker in self.tags:
            words = marker.split()
            if words and words[0] == name:
                return words[1:]
        return None

    @property
    def skipped(self) -> str | None:
        words = self.tag("skip")
        return None if words is None else " ".join(words)

    @property
    def missing(self) -> list[str]:
        """The modules ``needs`` names that are not installed here."""
        return [name for name in self.tag("needs") or [] if importlib.util.find_spec(name) is None]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The READMEs and every hand-written page of the site (the generated reference and build output left out)."""
    found = [ROOT / "README.md", ROOT / "examples" / "README.md"]
    for path in sorted(DOCS.rglob("*.md")):
        parts = path.relative_to(DOCS).parts
        if parts[0] in ("_build", "reference", "notebooks", "grafana") or any(
            part.startswith((".", "_")) for part in parts
        ):
            continue
        found.append(path)
    return found


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    page_tags = tuple(PAGE_MARKER.findall(text))
    found = []
    for match in FENCE.finditer(text):
        own = tuple(re.findall(r"^<!-- snippet: (.*?) -->$", match["marker"], re.M))
        line = text.count("\n", 0, match.start("lang")) + 1
        body = match["body"]
        found.append(Block(str(path.relative_to(ROOT)), line, match["lang"], body, own + page_tags))
    return found


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks(path)]
