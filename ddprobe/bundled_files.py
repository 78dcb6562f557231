"""The playbooks and patches that ship with ddprobe (package data under ddprobe/bundled/).

In a clone `ddprobe/bundled` is a link to the repository's `playbooks/`; a built wheel carries
the files themselves, so an installed ddprobe (pip or pipx, outside any clone) finds
`ddtestbed-custom-mask` and `playbooks/ddtree-graph-buffers.yaml` all the same (issue 15).
"""
from __future__ import annotations

from pathlib import Path

BUNDLED = Path(__file__).resolve().parent / "bundled"


def patch_dirs() -> list[Path]:
    """Where a patch name is looked up: ./playbooks/patches first, then the bundled ones."""
    out: list[Path] = []
    for d in (Path.cwd() / "playbooks" / "patches", BUNDLED / "patches"):
        if d.resolve() not in [x.resolve() for x in out]:
            out.append(d)
    return out


def resolve_playbook(spec: str | Path) -> Path:
    """A playbook path as given when it exists; else a bundled one by name or by its
    `playbooks/NAME.yaml` path (the README's spelling), so it works outside the clone."""
    p = Path(spec).expanduser()
    if p.exists():
        return p
    name = p.name if p.suffix in (".yaml", ".yml") else p.name + ".yaml"
    if p.parent in (Path("."), Path("playbooks")):
        cand = BUNDLED / name
        if cand.is_file():
            return cand
    return p


def bundled_playbooks() -> list[str]:
    return sorted(f.stem for f in BUNDLED.glob("*.yaml")) if BUNDLED.is_dir() else []
