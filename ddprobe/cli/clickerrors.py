"""The click exception types the error boundary catches, by type (typer >= 0.2x vendors click
as `typer._click`; older releases use click itself)."""
from __future__ import annotations

try:
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # typer that depends on click
    from click.exceptions import ClickException, UsageError  # type: ignore[no-redef]

from typer import Abort, Exit

__all__ = ["Abort", "ClickException", "Exit", "UsageError"]
