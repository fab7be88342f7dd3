"""Every issue the docs and notebooks cite is listed, with what it says, in docs/sources.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"

# Short names we write before '#': jax#4310, xla#123, ipython#11204.
SHORT = {"jax": "jax-ml/jax", "xla": "openxla/xla", "ipython": "ipython/ipython"}
_QUALIFIED = re.compile(
    r"github\.com/(?P<url_repo>[\w.-]+/[\w.-]+)/(?:issues|pull)/(?P<url_n>\d+)"
    r"|(?<![\w/.-])(?P<repo>[\w-]+/[\w.-]+|jax|xla|ipython)#(?P<n>\d+)\b"
    r"|(?<![\w&/#-])#(?P<bare>\d{3,6})\b"
)


def cited_issues(text: str) -> set[str]:
    """The issues a text cites, as 'owner/repo#N'.

    A bare '#N' belongs to the repository cited just before it on the same line
    ("jax#19213, #19267"); with none before it, to JAX.
    """
    found: set[str] = set()
    for line in text.splitlines():
        last = SHORT["jax"]
        for m in _QUALIFIED.finditer(line):
            if m["url_repo"]:
                last = m["url_repo"]
                found.add(f"{last}#{m['url_n']}")
            elif m["repo"]:
                last = SHORT.get(m["repo"], m["repo"])
                found.add(f"{last}#{m['n']}")
            else:
                found.add(f"{last}#{m['bare']}")
    return found


def listed_issues() -> set[str]:
    """The issues docs/sources.md lists: the first cell of each table row."""
    rows = [ln for ln in SOURCES.read_text().splitlines() if ln.startswith("| [")]
    return set().union(*(cited_issues(row.split("|")[1]) for row in rows))


def notebook_text(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells)


def citing_files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").glob("*.md") if p != SOURCES]
    return sorted([*ROOT.glob("notebooks/*.ipynb"), *docs, ROOT / "README.md"])


def test_the_extractor_reads_every_form_we_write():
    sample = (
        "set after start (jax#19213, #19267, #5555), see ipython#11204 and\n"
        "NVIDIA/nvidia-docker#1483; the fix [PR](https://github.com/jax-ml/jax/pull/39596).\n"
        "a bare #37391 is JAX's. Not issues: colour #ff7f0e, &#123;, [link](#section-1), v0.4#x\n"
    )
    assert cited_issues(sample) == {
        "jax-ml/jax#19213",
        "jax-ml/jax#19267",
        "jax-ml/jax#5555",
        "ipython/ipython#11204",
        "NVIDIA/nvidia-docker#1483",
        "jax-ml/jax#39596",
        "jax-ml/jax#37391",
    }


def test_a_citation_missing_from_the_table_is_caught():
    unlisted = cited_issues("as reported in jax#99999999") - listed_issues()
    assert unlisted == {"jax-ml/jax#99999999"}


@pytest.mark.parametrize("path", citing_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_issue_is_in_docs_sources(path):
    text = notebook_text(path) if path.suffix == ".ipynb" else path.read_text()
    missing = cited_issues(text) - listed_issues()
    assert not missing, f"{path.name} cites {sorted(missing)}: read them and add a row to docs/sources.md"


# Links that follow a moving branch: what they show changes after the sentence citing them.
_MOVING = re.compile(
    r"github\.com/(?:openxla/xla|jax-ml/jax|google/jax)/blob/(?:main|master)/"
    r"|pytorch\.org/docs/(?:stable|main)/"
)


def test_a_link_to_a_moving_branch_is_caught():
    assert _MOVING.search("(https://github.com/openxla/xla/blob/main/xla/tsl/framework/bfc_allocator.cc)")
    assert _MOVING.search("https://docs.pytorch.org/docs/stable/generated/torch.cuda.memory.empty_cache.html")
    assert not _MOVING.search("https://github.com/openxla/xla/blob/80c095fc2f5ba8b1e8c8b7df79c0be532416dd69/xla/x.cc")
    assert not _MOVING.search("https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/xla_bridge.py")


@pytest.mark.parametrize("path", [*citing_files(), SOURCES], ids=lambda p: str(p.relative_to(ROOT)))
def test_sources_are_cited_at_a_version_not_a_moving_branch(path):
    """A sentence about JAX, XLA or PyTorch links the file at the tag or commit that was read."""
    text = notebook_text(path) if path.suffix == ".ipynb" else path.read_text()
    assert [m.group(0) for m in _MOVING.finditer(text)] == []
