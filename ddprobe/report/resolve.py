"""RUN_ID on the command line -> a run directory: an id, a unique prefix, `latest`, or a path."""
from __future__ import annotations

from pathlib import Path

from ddprobe.errors import ConfigError
from ddprobe.store import find_run, runs_root


def _runs(base: Path) -> list[Path]:
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / "journal.jsonl").is_file())


def resolve_run(spec: str, root: Path | None = None) -> Path:
    """The run directory `spec` names: an id, a unique prefix (ids start with their start
    time), `latest` (the run whose journal was written last) or a path; an ambiguous prefix
    lists what it matches."""
    base = root or runs_root()
    p = Path(spec).expanduser()
    if (p / "journal.jsonl").is_file():
        return p
    runs = _runs(base)
    if spec == "latest":
        if not runs:
            raise ConfigError(f"no runs under {base} (a sweep, bisect or smoke writes one)",
                              key="RUN_ID")
        # the run written last: a playbook that ran a bisect ends after the bisect it started
        return max(runs, key=lambda r: ((r / "journal.jsonl").stat().st_mtime_ns, r.name))
    exact = [r for r in runs if r.name == spec]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.name.startswith(spec)]
    if len(matches) > 1:
        shown = ", ".join(r.name for r in matches[:5]) + (" ..." if len(matches) > 5 else "")
        raise ConfigError(f"run id prefix '{spec}' matches {len(matches)} runs under {base}: "
                          f"{shown}", key="RUN_ID")
    if matches:
        return matches[0]
    return find_run(spec, base)  # its error names the runs directory
