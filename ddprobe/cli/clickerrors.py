"""The click exception types the error boundary catches, by type (typer >= 0.2x vendors click
as `typer._click`; older releases use click itself)."""
from __future__ import annotations

import sys

try:
    # (the ignores cover both installs: with and without click beside typer, old or new typer)
    from typer._click.exceptions import (  # type: ignore[import-not-found,unused-ignore]
        ClickException,
        UsageError,
    )
    from typer._click.utils import PacifyFlushWrapper  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # typer that depends on click
    from click.exceptions import (  # type: ignore[no-redef,assignment,unused-ignore]
        ClickException,
        UsageError,
    )
    from click.utils import PacifyFlushWrapper  # type: ignore[no-redef,assignment,unused-ignore]

from typer import Abort, Exit

__all__ = ["Abort", "ClickException", "Exit", "UsageError", "pipe_closed"]


def pipe_closed() -> bool:
    """After a SystemExit out of the command: True when it was click's answer to a closed
    stdout (EPIPE: it wraps sys.stdout/stderr and exits 1, which reads as "failure found");
    the streams are unwrapped again (the process may run another command)."""
    if not isinstance(sys.stdout, PacifyFlushWrapper):
        return False
    sys.stdout = sys.stdout.wrapped
    if isinstance(sys.stderr, PacifyFlushWrapper):
        sys.stderr = sys.stderr.wrapped
    return True
