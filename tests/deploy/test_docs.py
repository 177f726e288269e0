"""docs/architecture.md is the repository's design document: code cites its sections, and every
citation points at a section that exists. The design notes outside the repository
(../shared/DESIGN.md) are not cited any more: a newcomer's checkout does not have them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
CITED_FROM = ("raftsched", "web", "scripts", "tests")


def sources() -> list[Path]:
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    for folder in CITED_FROM:
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file()
            and p.suffix in ("", ".py", ".sh", ".md", ".toml", ".cfg")
            and "__pycache__" not in p.parts
        ]
    return files


def sections() -> set[str]:
    return set(re.findall(r"^## (\d+[a-z]?)\. ", DOC.read_text(encoding="utf-8"), re.M))


def test_the_document_has_its_numbered_sections() -> None:
    found = sections()
    assert {"1", "2", "3", "4", "5", "5b", "6", "7", "8", "9", "10"} <= found, found


def test_every_citation_names_an_existing_section() -> None:
    known = sections()
    bad = []
    for path in sources():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number in re.findall(r"docs/architecture\.md §(\d+[a-z]?)", text):
            if number not in known:
                bad.append(f"{path.relative_to(ROOT)}: §{number}")
    assert not bad, bad


def test_nothing_cites_the_old_design_notes() -> None:
    """raftsched/core is left to its owners (it cites none today)."""
    stale = []
    for path in sources():
        if path == Path(__file__) or path.is_relative_to(ROOT / "raftsched" / "core"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if re.search(r"\bDESIGN(\.md)? (§|section)", text):
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, stale
