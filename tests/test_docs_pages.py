"""The README stays a front page (at most 150 lines, its links lead to files that exist, into the site's pages), and
no page speaks of the project's history as a sequence of rounds or sessions: a figure says its date and hardware."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doc_snippets import ROOT, pages

README = ROOT / "README.md"
HISTORY_WORDS = re.compile(
    r"\b(this|that|the|a|an|each|every|earlier|previous|last|next|later) (round|turn)s?\b(?! trips?\b)"
    r"|\b(this|that|earlier|previous|last|next|later) sessions?\b"
    r"|\brounds? (before|ago|earlier)\b|\bround[- ]by[- ]round\b|\bturns? ago\b|\bre-?measured\b|\bissue \d+\b",
    re.IGNORECASE,
)


def written_pages() -> list[Path]:
    return [*pages(), ROOT / "CHANGELOG.md"]


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    first_block = "\n".join(lines).split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first_block[:2]] == [["bash", "scripts/start.sh"], ["bash", "scripts/test.sh"]]


def test_the_readme_s_links_lead_to_files_and_into_the_site() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) > 15
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []
    into_site = [link for link in local if link.startswith("docs/") and link.endswith(".md")]
    assert {link.split("/")[1] for link in into_site} >= {"how-to", "explanation", "reference", "tutorials"}


@pytest.mark.parametrize("page", written_pages(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_page_speaks_of_rounds(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [match.group(0) for match in HISTORY_WORDS.finditer(text)]
    assert found == [], f"{page.relative_to(ROOT)}: say the date and the hardware instead of {found}"


def test_the_history_words_are_recognised() -> None:
    for said in ("this round", "the round before", "a turn ago", "not re-measured", "round-by-round", "issue 26",
                 "In this session"):  # fmt: skip
        assert HISTORY_WORDS.search(said), said
    for fine in ("a round trip", "50 interleaved repetitions", "--start-rounds 1", "a `multi-gpu` session"):
        assert not HISTORY_WORDS.search(fine), fine


def toctree(section: str) -> list[str]:
    """The pages the site's toctree of ``docs/SECTION/index.md`` lists, in its order, as README links."""
    text = (ROOT / "docs" / section / "index.md").read_text(encoding="utf-8")
    body = text.split("```{toctree}", 1)[1].split("```", 1)[0]
    return [f"docs/{section}/{line.strip()}.md" for line in body.splitlines() if line.strip() and line[0] not in ":"]


def readme_pages(section: str) -> list[str]:
    """The pages of ``docs/SECTION/`` the README's lists link to (an item and its continuation lines), in order."""
    items = re.findall(r"^(?:- |  ).*$", README.read_text(encoding="utf-8"), re.MULTILINE)
    found = re.findall(rf"\]\((docs/{section}/[\w-]+\.md)\)", "\n".join(items))
    return [page for page in dict.fromkeys(found) if not page.endswith("/index.md")]


@pytest.mark.parametrize("section", ["how-to", "explanation"])
def test_the_readme_lists_the_pages_of_the_site_s_toctree(section: str) -> None:
    expected = toctree(section)
    if readme_pages(section) != expected:
        titles = [(ROOT / page).read_text(encoding="utf-8").splitlines()[0].lstrip("# ") for page in expected]
        listing = "\n".join(f"- [{title}]({page})" for title, page in zip(titles, expected, strict=True))
        pytest.fail(f"README.md's {section} list differs from docs/{section}/index.md's toctree; list, in order:\n"
                    f"{listing}")  # fmt: skip


MOST_WORDS_A_SENTENCE = 25  # a page's average: what a reader can take in one go
# pages whose text is being rewritten with the code they describe; each leaves this list once it reads shorter
LONG_PAGES: set[str] = set()  # none left


def sentences(markdown: str) -> list[str]:
    """The sentences of a page's prose: code blocks, tables, headings, directives and images left out, inline code
    one word, a list item or a paragraph's end also ending a sentence."""
    text = re.sub(r"^(```+|::::*)[^\n]*\n.*?^\1\s*$", "", markdown, flags=re.M | re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("|", "#", ":", "![", "% "))]
    body = re.sub(r"`[^`]*`", "CODE", "\n".join(lines))
    body = re.sub(r"\]\([^)]*\)", "]", body)
    parts = re.split(r"(?:(?<=[.!?])|(?<=[.!?]\*\*))\s+(?=[A-Za-z`*\[(])|\n\s*\n|\n\s*(?:[-*]|\d+\.) ", body)
    found = (re.sub(r"^(?:[-*]|\d+\.) ", "", " ".join(piece.split())) for piece in parts)
    return [part for part in found if len(part.split()) >= 3]


def words_a_sentence(page: Path) -> float:
    found = sentences(page.read_text(encoding="utf-8"))
    return sum(len(sentence.split()) for sentence in found) / max(1, len(found))


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(path, marks=pytest.mark.xfail(reason="rewritten with the code it describes"))
        if str(path.relative_to(ROOT)) in LONG_PAGES
        else path
        for path in pages()
    ],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_a_page_reads_in_short_sentences(page: Path) -> None:
    average = words_a_sentence(page)
    assert average <= MOST_WORDS_A_SENTENCE, f"{page.relative_to(ROOT)}: {average:.1f} words a sentence"


def test_sentences_are_counted_as_a_reader_meets_them() -> None:
    text = "# Title\n\nOne two three. Four five `six seven` eight.\n\n- an item of words\n\n```python\nx = 1\n```\n"
    assert sentences(text) == ["One two three.", "Four five CODE eight.", "an item of words"]
