"""The `ddprobe` console script: `ddprobe --version` answers before the CLI (typer, rich, the
inventory) is imported; everything else goes to `ddprobe.cli.main` (issue 24.16)."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        from ddprobe import __version__
        sys.stdout.write(f"ddprobe {__version__}\n")
        return 0
    from ddprobe.cli import main as cli_main
    return cli_main(args)
