"""The repository stands on its own: every Markdown document named in the code, its comments,
the tests, the benchmarks, CI and the docs is a file in the repository (issue 26, item 7).

A reference is a name ending in `.md` (with or without a path). It resolves when the path exists
relative to the repository root or to the citing file's folder, or, for a bare name, when a file
of that name is in the repository. Links (http://...) are not references to this repository.
Expected: none unresolved; the checker itself finds a planted `../shared/docs/NOTES.md`.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", "build", "runs", "dist", "__pycache__", ".pytest_cache", ".mypy_cache",
             ".hypothesis", "node_modules", "data"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg"}
REF = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)*[\w][\w./-]*?[\w-]+\.md)\b")
URL = re.compile(r"https?://\S+")


def _sources() -> list[Path]:
    out = [ROOT / ".ci" / "run", ROOT / ".ci" / "gate"]
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT).parts
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel[:-1]):
            continue
        if p.is_file() and p.suffix in SUFFIXES:
            out.append(p)
    me = Path(__file__).resolve()  # its own examples are not references
    return [p for p in out if p.is_file() and p.resolve() != me]


def unresolved(files: list[Path], root: Path = ROOT) -> list[str]:
    names = {p.name for p in root.rglob("*.md") if ".git" not in p.parts}
    bad = []
    for f in files:
        text = URL.sub("", f.read_text(errors="replace"))
        for m in REF.finditer(text):
            ref = m.group(1)
            if "/" not in ref and ref in names:
                continue
            if (root / ref).is_file() or (f.parent / ref).is_file():
                continue
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f.relative_to(root)}:{line}: {ref}")
    return bad


def test_every_markdown_reference_resolves() -> None:
    files = _sources()
    assert len(files) > 100
    assert unresolved(files) == []


def test_the_reference_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("see b.md and ../shared/docs/NOTES.md and "
                                            "https://github.com/x/y/blob/main/Z.md\n")
    (tmp_path / "docs" / "b.md").write_text("back to [a](a.md)\n")
    code = tmp_path / "m.py"
    code.write_text("# see docs/a.md, docs/missing.md\n")
    files = [tmp_path / "docs" / "a.md", tmp_path / "docs" / "b.md", code]
    assert unresolved(files, tmp_path) == ["docs/a.md:1: ../shared/docs/NOTES.md",
                                           "m.py:1: docs/missing.md"]
