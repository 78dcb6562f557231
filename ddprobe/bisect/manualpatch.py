"""The manual bisect's oversize step on the user's host: `ddprobe bisect oversize [--revert]`.

The manual mode never restarts a server, but its oversize experiment needs the exact temporary
patch the automatic mode would apply: the suspect buffers of the cell `next` names, enlarged by
that cell's factor (x4, then the escalated one), built from the host's own sources (grep-buffers)
so that its hunks and sha256 match the install. It is one of ddprobe's temporary patches
(`ddprobe-oversize-...` in the host's ledger): `--revert` takes it off again.
"""
from __future__ import annotations

from dataclasses import dataclass

from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.manual import State
from ddprobe.errors import UsageError
from ddprobe.inventory import Host
from ddprobe.remote import Remote
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import apply_patch, revert_temporary


@dataclass(frozen=True)
class Applied:
    cell: PlannedCell
    patch_id: str
    factor: int
    files: tuple[str, ...]
    noop: bool  # it was applied already


def factor_of(st: State, cell: PlannedCell) -> int:
    return cell.factor or st.session.spec.options.oversize_factor


def oversize_cell(st: State) -> PlannedCell:
    """The cell `next` names, when it is an oversize experiment (else one clear message)."""
    c = st.next
    if c is None:
        raise UsageError("the bisect is complete: there is no oversize step to apply")
    if not c.buffers:
        raise UsageError(f"the next cell, {c.key}, is not an oversize experiment: it needs no "
                         "patch (run it as `ddprobe bisect next` says)")
    return c


def apply_oversize(r: Remote, host: Host, st: State) -> Applied:
    """Apply the next cell's oversize patch on `host` (ddprobe's other temporary patches are
    reverted first, so the install carries exactly this one)."""
    cell = oversize_cell(st)
    spec = st.session.spec
    rep = grep_buffers(r, host, backend=spec.base.backend or "all",
                       params=SizingParams(max_bs=spec.base.max_bs, budgets=spec.budgets))
    factor = factor_of(st, cell)
    patch = make_oversize_patch(rep, cell.buffers, factor)
    revert_temporary(r, host, keep=[patch.id])
    res = apply_patch(r, patch, host=host)
    return Applied(cell, res.patch_id, factor, tuple(f.path for f in patch.files),
                   noop=res.status == "noop")


def revert_oversize(r: Remote, host: Host) -> list[str]:
    """Revert every temporary oversize patch on `host`; the ids reverted."""
    from ddprobe.sources.oversize import OVERSIZE_PREFIX
    from ddprobe.sources.patches import applied_ids, patch_status
    before = [i for i in applied_ids(patch_status(r, host=host)) if i.startswith(OVERSIZE_PREFIX)]
    revert_temporary(r, host)
    return before
