"""The manual bisect commands: `ddprobe bisect start|good|bad|skip|next|oversize|visualize|reset`.

Mounted on the `bisect` group by `ddprobe.cli.bisect.register`. The logic is in
`ddprobe.bisect.manual`; this module parses, prints and picks the exit code.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ddprobe.cli import common, options
from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import ConfigError, UsageError
from ddprobe.intlist import budget_set

if TYPE_CHECKING:  # the planner is imported by the command that runs, not by a completion
    from ddprobe.bisect import manual
    from ddprobe.bisect.sessionlog import Mark

PANEL = "Manual bisect (you restart the server, ddprobe plans)"


def _print_next(st: manual.State, *, as_json: bool) -> int:
    from ddprobe.bisect import manual
    from ddprobe.bisect.verdicts import exit_code
    if as_json:
        common.emit_json({
            "done": st.next is None, "configs_left": st.left,
            "next": None if st.next is None else {
                **st.next.to_dict(),
                "run": manual.how_to_run(st.next, st.session.spec.options.oversize_factor)},
            "verdicts": [v.to_dict() for v in st.verdicts]})
        return exit_code(st.verdicts) if st.next is None else 0
    if st.next is None:
        common.env().out.print("the bisect is complete; verdicts:")
        for v in st.verdicts:
            common.env().out.print(f"  b{',b'.join(map(str, v.budgets))}: {v.kind} "
                                   f"({v.decided_by}, {v.confidence})")
            for e in v.evidence:
                common.env().out.print(f"     - {e.kind}: {e.summary}")
            common.env().out.print(f"     next: {v.next_step}")
        common.env().out.print("`ddprobe bisect log` prints the session; `ddprobe bisect reset` "
                               "ends it")
        return exit_code(st.verdicts)
    c = st.next
    common.env().out.print(f"Bisecting: at most {st.left} restart{'' if st.left == 1 else 's'} "
                           "left (worst case of the plan)")
    common.env().out.print(f"next: {c.key}  {manual.PURPOSE_TEXT.get(c.purpose, c.purpose)}")
    common.env().out.print(
        f"  run it: {manual.how_to_run(c, st.session.spec.options.oversize_factor)}")
    if c.buffers:
        common.env().out.print("  first:  ddprobe bisect oversize --host HOST   # applies that "
                               "patch; restart the server with it")
    common.env().out.print("  then:   ddprobe bisect good | ddprobe bisect bad --mode 'crash' "
                           "(or --log server.log) | ddprobe bisect skip")
    if c.buffers:
        common.env().out.print("  after:  ddprobe bisect oversize --revert --host HOST")
    return 0


def _mark(verb: Mark, target: Optional[str], words: list[str], log: Optional[Path],
          as_json: bool) -> None:
    if log is not None:
        if verb != "bad":
            raise UsageError("--log goes with `bad` (it reads the failure mode from the log)")
        if "--mode" in words:
            raise UsageError("--mode and --log exclude each other")
        words = [*words, "--mode", _mode_from_log(log)]
    from ddprobe.bisect import manual
    cell, st = manual.mark(verb, target, words)
    if not as_json:
        common.env().err.print(f"marked {cell.key} {verb}")
    _print_next(st, as_json=as_json)  # a mark exits 0; `next` gives the verdicts' exit code


def _mode_from_log(path: Path) -> str:
    """The failure mode of a server log, from the signature catalogue (as cells classify)."""
    from ddprobe.signatures.matcher import match_log
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[-2_000_000:]
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=str(path)) from None
    sig = match_log(text)
    if sig is None:
        raise UsageError(f"{path}: no known failure signature in the log; give --mode TEXT "
                         "(one text per failure mode)")
    outcome = "hang" if sig.kind == "hang" else "crash"
    return f"{outcome} {sig.kind}: {sig.key}"


def _words(**opts: object) -> list[str]:
    out: list[str] = []
    for name, val in opts.items():
        flag = "--" + name.replace("_", "-")
        if val is None or val is False:
            continue
        if val is True:
            out.append(flag)
        elif isinstance(val, list):
            for v in val:
                out += [flag, str(v)]
        else:
            out += [flag, str(val)]
    return out


def register(bis: typer.Typer) -> None:
    @bis.command("start", rich_help_panel=PANEL)
    def start_cmd(
        budgets: options.Budgets,
        host: Optional[str] = typer.Option(None, "--host", "-H", metavar="NAME",
                                           help="The host, recorded in the log (never "
                                                "contacted)."),
        max_bs: options.MaxBs = None,
        backend: options.Backend = None,
        small_max_bs: Optional[int] = typer.Option(
            None, "--small-max-bs", min=1, metavar="N",
            help="Max bs of the max-bs experiment (default: a quarter of --max-bs, else 8)."),
        suspect: list[str] = typer.Option(
            [], "--suspect", metavar="ATTR@FILE:LINE",
            help="A captured buffer the oversize experiment enlarges (repeat; from `ddprobe "
                 "grep-buffers`). None: no oversize experiment."),
        order: options.Order = None,
        graph_first: options.GraphFirst = False,
        eager_first: options.EagerFirst = False,
        oversize_factor: options.OversizeFactor = OVERSIZE_FACTOR,
        as_json: options.Json = False,
    ) -> None:
        """Start a manual bisect: you restart the server by hand, ddprobe picks each cell.

        Example:

            ddprobe bisect start --budgets 8,16,32,64 --max-bs 64 \\
                --suspect cuda_graph_custom_mask@srt/layers/attention/triton_backend.py:118
        """
        from ddprobe.bisect import manual
        from ddprobe.bisect.planner import small_max_bs_for
        picked = order is not None or graph_first or eager_first
        st = manual.start(_words(
            host=host, budgets=",".join(map(str, budget_set(budgets or ()))), max_bs=max_bs,
            backend=backend, small_max_bs=small_max_bs or small_max_bs_for(max_bs),
            order=options.order_of(order, graph_first=graph_first, eager_first=eager_first)
            if picked else None, suspect=suspect,
            oversize_factor=None if oversize_factor == OVERSIZE_FACTOR else oversize_factor))
        if not as_json:
            from ddprobe.bisect.agreement import plan_line
            common.env().err.print(f"manual bisect started ({manual.session_path()})")
            common.env().out.print(plan_line(st.session.spec.options.agreement).strip(),
                                   markup=False, highlight=False)
        raise typer.Exit(_print_next(st, as_json=as_json))

    def _mark_cmd(verb: Mark, helptext: str, example: str) -> None:
        def cmd(
            target: Optional[str] = typer.Argument(
                None, metavar="BUDGET|CELL",
                help="The budget (or a cell key from `next`/`log`); default: the cell `next` "
                     "names."),
            graph: Optional[bool] = typer.Option(None, "--graph/--no-graph",
                                                 help="With a BUDGET: CUDA graphs on (default) "
                                                      "or off."),
            max_bs: Optional[int] = typer.Option(None, "--max-bs", min=1, metavar="N",
                                                 help="With a BUDGET: the max bs it ran with."),
            oversize: Optional[str] = typer.Option(None, "--oversize", metavar="ATTR,...",
                                                   help="With a BUDGET: the buffers enlarged."),
            mode: Optional[str] = typer.Option(
                None, "--mode", metavar="TEXT",
                help="bad: the failure mode, e.g. 'crash cuda_illegal_address: ...' or "
                     "'garbage' (the same text for the same failure).") if verb == "bad"
            else typer.Option(None, hidden=True),
            log: Optional[Path] = typer.Option(
                None, "--log", metavar="FILE",
                help="bad: read the failure mode from this server log (signature catalogue).")
            if verb == "bad" else typer.Option(None, hidden=True),
            refused: Optional[str] = typer.Option(
                None, "--refused", metavar="WHY",
                help="skip: the server refused the flags (config error), and why.")
            if verb == "skip" else typer.Option(None, hidden=True),
            as_json: options.Json = False,
        ) -> None:
            words = _words(max_bs=max_bs, oversize=oversize, mode=mode, refused=refused)
            if graph is not None:
                words.append("--graph" if graph else "--no-graph")
            _mark(verb, target, words, log, as_json)
        cmd.__doc__ = f"{helptext}\n\nExample:\n\n    {example}\n"
        bis.command(verb, rich_help_panel=PANEL)(cmd)

    _mark_cmd("good", "Mark a cell good (it passed), then print the next cell.",
              "ddprobe bisect good 8")
    _mark_cmd("bad", "Mark a cell bad (it failed, in the mode --mode or --log names), then "
                     "print the next cell.",
              "ddprobe bisect bad 16 --log /var/log/sglang.log")
    _mark_cmd("skip", "Mark a cell as not testable (infrastructure), then print the next cell.",
              "ddprobe bisect skip 32 --no-graph")

    @bis.command("next", rich_help_panel=PANEL)
    def next_cmd(as_json: options.Json = False) -> None:
        """Print the next cell to run (or the verdicts when the bisect is complete).

        Example:

            ddprobe bisect next
        """
        from ddprobe.bisect import manual
        raise typer.Exit(_print_next(manual.load(), as_json=as_json))

    @bis.command("oversize", rich_help_panel=PANEL)
    def oversize_cmd(
        host: str = typer.Option(..., "--host", "-H", metavar="NAME",
                                 help="The host whose SGLang install gets the patch."),
        revert: bool = typer.Option(False, "--revert",
                                    help="Take the temporary oversize patch off again."),
        as_json: options.Json = False,
    ) -> None:
        """Apply the temporary patch of the oversize step `next` names (its buffers, its
        factor), built from the host's own sources; --revert takes it off. Restart the server
        yourself after each.

        Example:

            ddprobe bisect oversize --host b300; ddprobe bisect oversize --revert --host b300
        """
        from ddprobe.bisect import manual, manualpatch
        st = None if revert else manual.load()
        if st is not None:
            manualpatch.oversize_cell(st)  # no oversize step next: refused before any contact
        h = common.one_host(host)
        with common.env().connect(h) as r:
            if revert:
                gone = manualpatch.revert_oversize(r, h)
                if as_json:
                    common.emit_json({"host": h.name, "reverted": gone})
                else:
                    common.env().err.print(
                        f"{h.name}: reverted {', '.join(gone)}" if gone else
                        f"{h.name}: no temporary oversize patch applied", markup=False)
                return
            assert st is not None
            done = manualpatch.apply_oversize(r, h, st)
        if as_json:
            common.emit_json({"host": h.name, "cell": done.cell.key, "patch": done.patch_id,
                              "factor": done.factor, "buffers": list(done.cell.buffers),
                              "files": list(done.files), "already_applied": done.noop})
            return
        common.env().err.print(
            f"{h.name}: {'already applied' if done.noop else 'applied'} {done.patch_id} "
            f"({', '.join(done.cell.buffers)} x{done.factor}, for {done.cell.key}; files: "
            f"{', '.join(done.files)}); restart the server, run the cell, mark it, then "
            f"`ddprobe bisect oversize --revert --host {h.name}`", markup=False)

    @bis.command("visualize", rich_help_panel=PANEL)
    def visualize_cmd(as_json: options.Json = False) -> None:
        """Show the marks so far: each budget, each failure mode's experiments.

        Example:

            ddprobe bisect visualize
        """
        from ddprobe.bisect import manual
        st = manual.load()
        lines = manual.row_lines(st)
        if as_json:
            common.emit_json({"lines": lines, "configs_left": st.left,
                              "next": st.next.key if st.next else None})
            return
        for line in lines:
            common.env().out.print(line, highlight=False)
        common.env().out.print(f"at most {st.left} restart{'' if st.left == 1 else 's'} left"
                               + (f"; next: {st.next.key}" if st.next else "; complete"))

    @bis.command("reset", rich_help_panel=PANEL)
    def reset_cmd(as_json: options.Json = False) -> None:
        """End the manual bisect (removes its session file).

        Example:

            ddprobe bisect reset
        """
        from ddprobe.bisect import manual
        gone = manual.reset()
        if as_json:
            common.emit_json({"removed": str(gone) if gone else None})
            return
        common.env().err.print(f"removed {gone}" if gone else "no manual bisect in progress")

