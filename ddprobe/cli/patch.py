"""`ddprobe patch apply|revert|status|diff|list|recover`: reversible edits of a host's install."""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ddprobe import remote
from ddprobe.cli import common, options
from ddprobe.errors import PatchError, UsageError
from ddprobe.exitcodes import ExitCode
from ddprobe.hostside.patchtext import Patch
from ddprobe.report.patches import render_backups, render_diff
from ddprobe.sources.patches import (
    apply_patch,
    list_patches,
    load_patch,
    patch_diff,
    patch_status,
    recover_patches,
    revert_patch,
)


def _patch_or_id(spec: str) -> Patch | str:
    try:
        return load_patch(spec)
    except PatchError:
        if "/" in spec or spec.endswith(".patch"):
            raise
        return spec  # an id as recorded in the host's ledger


def _locked(r: remote.Remote, h: Any, command: str, break_lock: bool,
            dry_run: bool = False) -> Any:
    """The host lock, as a run takes it: a patch never lands under a running bisect (issue
    15). A dry run changes nothing and takes no lock."""
    if dry_run:
        return contextlib.nullcontext()
    from ddprobe.server.lock import HostLock
    return HostLock(r, h, command=command, break_lock=break_lock, caches=common.env().caches)


def register(app: typer.Typer) -> None:
    papp = typer.Typer(help="Apply, revert and inspect patches of a host's install.",
                       no_args_is_help=True)
    app.add_typer(papp, name="patch")

    @papp.command("apply")
    def apply_cmd(
        patch: str = typer.Argument(..., help="A .patch file or a name in playbooks/patches."),
        *,
        host: options.Hosts,
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the diff, change nothing."),
        force: bool = typer.Option(False, "--force", help="Apply even if the file was edited "
                                   "or the version differs."),
        break_lock: options.BreakLock = False,
        as_json: options.Json = False,
    ) -> None:
        """Apply a patch atomically (all files or none), recording it in the host's ledger."""
        h = common.one_host(host)
        p = load_patch(patch)
        with common.env().connect(h) as r, _locked(r, h, f"ddprobe patch apply {p.id}",
                                              break_lock, dry_run):
            res = apply_patch(r, p, host=h, dry_run=dry_run, force=force)
        if as_json:
            common.emit_json(res.to_dict())
            return
        if res.diff and (dry_run or res.status in ("applied", "finished")):
            render_diff(res.diff, common.env().out)
        msg = {"dry-run": "dry run: nothing changed",
               "applied": f"applied {len(res.changed)} file(s)",
               "finished": f"finished an interrupted apply ({len(res.changed)} file(s))",
               "recorded": "the files were already patched: recorded in the ledger",
               "noop": "already applied: nothing to do"}.get(res.status, res.status)
        common.env().err.print(Text(f"{h.name}: patch {res.patch_id}: {msg}"
                                    + (f" (ledger {res.ledger})" if res.ledger else "")))

    @papp.command("revert")
    def revert_cmd(
        patch: Optional[str] = typer.Argument(None, help="Patch id, file or name."),
        *,
        host: options.Hosts,
        all_: bool = typer.Option(False, "--all", help="Revert every applied patch."),
        force: bool = typer.Option(False, "--force", help="Restore even if the patched file "
                                   "changed since (the changed copy is kept beside the backup)."),
        break_lock: options.BreakLock = False,
        as_json: options.Json = False,
    ) -> None:
        """Restore the originals byte for byte (sha256 checked) and drop the ledger entry."""
        if (patch is None) == (not all_):
            raise UsageError("give a patch to revert, or --all (not both)")
        h = common.one_host(host)
        target = _patch_or_id(patch) if patch else None
        with common.env().connect(h) as r, _locked(r, h, "ddprobe patch revert", break_lock):
            res = revert_patch(r, target, host=h, all_patches=all_, force=force)
        if as_json:
            common.emit_json(res.to_dict())
            return
        if not res.reverted:
            common.env().err.print(Text(f"{h.name}: {res.message or 'nothing to revert'}"))
        for pid, files in res.reverted:
            common.env().err.print(Text(f"{h.name}: reverted {pid}: restored {len(files)} file(s)"
                                        + (f" ({res.message})" if res.message else "")))

    @papp.command("status")
    def status_cmd(host: options.Hosts, as_json: options.Json = False) -> None:
        """Applied patches and drift; an interrupted apply says how to finish or roll back."""
        h = common.one_host(host)
        with common.env().connect(h) as r:
            st = patch_status(r, host=h)
        if as_json:
            common.emit_json(st.to_dict())
        else:
            common.env().out.print(Text(f"{h.name}: {st.install.package} {st.install.version} at "
                                        f"{st.install.path}"))
            if st.ledger_error:
                common.env().out.print(Text(f"ledger: {st.ledger_error}", style="bold red"))
                render_backups(st.backups, common.env().out)
            elif not st.entries:
                common.env().out.print(Text("no patches applied", style="dim"))
            for e in st.entries:
                color = "green" if e.verdict == "applied" else "red"
                common.env().out.print(Text(f"{e.id}: {e.verdict}", style=f"bold {color}"))
                common.env().out.print(Text(f"  {e.description}  [{e.applied_at} by {e.who}]",
                                            style="dim"))
                t = Table(show_header=True, box=None, pad_edge=False)
                for c in ("file", "state", "sha256 before", "after", "backup"):
                    t.add_column(c)
                for f in e.files:
                    t.add_row(Text(f.path), Text(f.state, style="green" if f.state == "patched"
                                                 else "yellow"),
                              Text(f.sha_before[:12]), Text(f.sha_after[:12]),
                              Text("ok" if f.backup_ok else "MISSING"))
                common.env().out.print(t)
                if e.advice:
                    common.env().out.print(Text(f"  {e.advice}", style="yellow"))
        if st.ledger_error or any(e.verdict in ("incomplete", "drifted",
                                                "interrupted-complete") for e in st.entries):
            raise typer.Exit(int(ExitCode.PATCH))

    @papp.command("recover")
    def recover_cmd(host: options.Hosts,
                    apply: bool = typer.Option(False, "--apply", help="Restore (default: show "
                                               "what would be restored)."),
                    as_json: options.Json = False) -> None:
        """A damaged or hand-edited ledger: restore every file from its oldest backup (the
        original before the first patch) and start a new ledger; the old one is kept."""
        h = common.one_host(host)
        with common.env().connect(h) as r:
            res = recover_patches(r, host=h, apply=apply)
        if as_json:
            common.emit_json(res)
            return
        if res["status"] == "dry-run":
            common.env().out.print(Text(f"{h.name}: would restore {len(res['restore'])} file(s) "
                                        "(run again with --apply):"))
            render_backups(tuple(res["restore"]), common.env().out)
        else:
            common.env().out.print(Text(f"{h.name}: restored {len(res['restored'])} file(s); the "
                                        f"damaged ledger is kept as {res['damaged_ledger']}"))
        for b in res.get("refused") or ():
            common.env().err.print(Text(f"refused {b['backup']}: {b['state']}", style="yellow"))

    @papp.command("diff")
    def diff_cmd(
        patch_id: Optional[str] = typer.Argument(None, help="Only this applied patch."),
        *,
        host: options.Hosts,
        as_json: options.Json = False,
    ) -> None:
        """What the applied patches changed on the host: original (backup) -> file now."""
        h = common.one_host(host)
        with common.env().connect(h) as r:
            diffs = patch_diff(r, patch_id, host=h)
        if as_json:
            common.emit_json({"host": h.name, "patches": [{"id": i, "diff": d}
                                                          for i, d in diffs]})
            return
        if not diffs:
            common.env().err.print(Text(f"{h.name}: no patches applied"))
        for pid, d in diffs:
            common.env().out.print(Text(f"# patch {pid}", style="bold"))
            render_diff(d, common.env().out)

    @papp.command("list")
    def list_cmd(as_json: options.Json = False) -> None:
        """The patches in ./playbooks/patches and the ones shipped with ddprobe."""
        ps = list_patches()
        if as_json:
            common.emit_json([{"id": p.id, "description": p.description, "package": p.package,
                               "versions": list(p.versions), "files": list(p.paths),
                               "source": p.source} for p in ps])
            return
        t = Table(title="patches")
        for c in ("id", "package", "versions", "files", "description"):
            t.add_column(c, overflow="fold")
        for p in ps:
            t.add_row(Text(p.id), Text(p.package or ""), Text(", ".join(p.versions)),
                      Text("\n".join(p.paths)), Text(p.description))
        common.env().out.print(t)
