"""The documentation's links lead somewhere: files exist, anchors name a heading; the
architecture page names every module of the package, and no module that is gone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "operator" / "lockgate"
ARCHITECTURE = REPO / "docs" / "architecture.md"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
REQUIRED = {
    "architecture.md",
    "install.md",
    "job-api.md",
    "migrating-from-runpod.md",
    "endpoint-reference.md",
    "scaling.md",
    "security.md",
    "operations.md",
    "troubleshooting.md",
}


def anchors(page: Path) -> set[str]:
    """GitHub's heading slugs: lowercase, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_docs_cover_every_topic_and_the_readme_links_them() -> None:
    assert {p.name for p in PAGES} >= REQUIRED
    readme = (REPO / "README.md").read_text()
    assert all(f"docs/{name}" in readme for name in REQUIRED)


def resolves(file: Path, anchor: str) -> bool:
    if not file.exists():
        return False
    return not anchor or file.suffix != ".md" or anchor in anchors(file)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not resolves(file, anchor):
            broken.append(target)
    assert broken == []


def test_the_openai_guide_is_linked_from_the_index_and_the_job_api() -> None:
    for page in ("README.md", "job-api.md"):
        assert "](openai.md)" in (REPO / "docs" / page).read_text(), page


def test_the_architecture_page_is_linked_from_both_indexes() -> None:
    assert "](architecture.md)" in (REPO / "docs" / "README.md").read_text()
    readme = (REPO / "README.md").read_text()
    fits = readme.split("## How it fits together", 1)[1].split("\n## ", 1)[0]
    assert "](docs/architecture.md)" in fits


def test_the_architecture_page_names_every_module() -> None:
    page = ARCHITECTURE.read_text()
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))
    assert [m for m in modules if f"`{m}`" not in page] == []


def test_the_architecture_page_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"`([\w/]+\.py)`", ARCHITECTURE.read_text()))
    ours = {n for n in named if not n.startswith("tests/") and not n.startswith("test_")}
    assert sorted(n for n in ours if not (PACKAGE / n).is_file()) == []


def test_the_architecture_page_names_every_lua_script() -> None:
    page = ARCHITECTURE.read_text()
    scripts = sorted(p.stem for p in (PACKAGE / "store" / "lua").glob("*.lua"))
    assert [s for s in scripts if f"`{s}`" not in page and f"`{s}.lua`" not in page] == []
