"""Where the prose lives, for the tests that read it: README.md and the docs site's pages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"


def prose_files() -> list[Path]:
    """README.md, then every Markdown page of the docs site, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def label(path: Path) -> str:
    """``path`` as the repository names it: ``README.md``, ``docs/library.md``."""
    return path.relative_to(ROOT).as_posix()
