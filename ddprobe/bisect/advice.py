"""Every sentence a verdict advises, from its `Advice` (pure).

The bisect's logic decides numbers and names (`results.Advice`: keep budget N, the workaround's
max bs, the buffers to size, the next command as argv); this module is the one place they
become text. `lower_keep` is how a later finding (the latent check) changes advice: it lowers
the number, and the sentence is written again from the record.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from ddprobe.results import Advice, AdviceKind, NextCommand, Verdict

if TYPE_CHECKING:
    from ddprobe.bisect.ladder import Decision

HOST: Final = "HOST"
NO_KEEP: Final = ("no budget passed with CUDA graphs: run with --disable-cuda-graph "
                  "meanwhile")


def bisect_cmd(host: str | None, *args: str, note: str = "") -> NextCommand:
    return NextCommand(["ddprobe", "bisect", "--host", host or HOST, *args], note=note)


def host_cmd(host: str | None, command: Sequence[str], *args: str,
             note: str = "") -> NextCommand:
    """`ddprobe COMMAND --host HOST ARGS`, e.g. (("server", "logs"),) or (("run",), ...)."""
    return NextCommand(["ddprobe", *command, "--host", host or HOST, *args], note=note)


def command_text(c: NextCommand | None) -> str:
    if c is None or not c.argv:
        return ""
    text = " ".join(c.argv)
    if c.then:
        text += "   # then: " + " ".join(c.then)
    if c.note:
        text += f"   # {c.note}"
    return text


def names(budgets: Iterable[int]) -> str:
    return ", ".join(f"b{b}" for b in budgets)


def _budget(a: Advice) -> str:
    """The kept budget, and why it is lower than the passing one where it was lowered."""
    if a.unsafe is None:
        return str(a.keep)
    if a.keep is None:
        return f"{a.unsafe} (b{a.unsafe} passes but writes out of bounds: none is safe)"
    return f"{a.keep} (b{a.unsafe} passes but writes out of bounds)"


def _keep(a: Advice, suffix: str) -> str:
    if a.keep is None and a.unsafe is None:
        return NO_KEEP
    return f"keep budget <= {_budget(a)}{suffix}"


def _works(a: Advice) -> str:
    head = f"budgets up to {_budget(a)} work with CUDA graphs" + _batches(a)
    return head if a.first_bad is None else f"{head}; b{a.first_bad} is the first failing one"


def _unchecked(a: Advice) -> str:
    head = (f"budgets up to {_budget(a)} pass with CUDA graphs{_batches(a)}, but an "
            f"out-of-bounds write from b{a.at} up is possible and unchecked (it would not "
            f"crash here): {a.decide}")
    return head if a.first_bad is None else f"{head}; b{a.first_bad} is the first failing one"


def _batches(a: Advice) -> str:
    """The batch sizes the comparison with eager covered, where it did not cover them all."""
    if a.compared_requests is None or a.captured_bs is None:
        return ""
    return (f" at batches of up to {a.compared_requests} requests (the graphs captured for "
            f"larger ones, up to {a.captured_bs}, were not compared with eager)")


def _sentence(a: Advice) -> str:
    k = a.kind
    b = a.at
    if k == "works":
        return _works(a)
    if k == "works_unchecked":
        return _unchecked(a)
    if k == "kernel":
        return (f"the kernel or algorithm is wrong at b{b} without CUDA graphs: try another "
                f"--attention-backend at b{b}, {_keep(a, ' meanwhile')}, and report it "
                "upstream with the signature")
    if k == "graph_capture":
        return (f"b{b} works without CUDA graphs (--disable-cuda-graph) but enlarging the "
                "suspect buffers does not help: a graph capture/replay bug (stale buffers, "
                f"capture-time state); {_keep(a, ' with graphs')}, try a newer release, "
                "report it upstream")
    if k == "diverged":
        return (f"b{b}: the greedy output with CUDA graphs differs from eager, which is right "
                "and stable: a graph capture/replay bug (stale buffers, capture-time state) "
                f"that corrupts output silently; {_keep(a, ' with graphs')}, report it "
                "upstream")
    if k == "workspace":
        return (f"--cuda-graph-max-bs {a.max_bs} at b{b} avoids this failure (other failure "
                "modes may remain there), or enlarge the fixed workspace the failing call "
                f"uses; {_keep(a, ' at the current max bs')}")
    if k == "fixed":
        return (f"{a.patch} fixes it: b{b} passes with it (kept applied); make the fix "
                f"permanent (ship the patch or a release that has it); `ddprobe patch revert "
                f"{a.patch} --host {a.host}` brings the defect back")
    if k == "buffer":
        return (f"size {', '.join(a.buffers)} ({', '.join(a.where) or '?'}) from the configured "
                "draft tokens, not a default; verify a fix with `ddprobe bisect ... "
                f"--confirm-patch PATCH`; {_keep(a, ' with graphs meanwhile')}")
    return _FIXED[k].format(names=names(a.budgets), decide=a.decide,
                            buffer=", ".join(a.buffers), where=", ".join(a.where) or "?")


_FIXED: Final[dict[AdviceKind, str]] = {
    "inconclusive": "the experiments could not tell the cause apart: {decide}",
    "unstarted": "the experiments could not tell the cause apart: the first failing budget "
                 "of this mode is not settled",
    "nondeterministic": "not a verdict on CUDA graphs: {decide}",
    "works_assumed": "{names}: assumed ok (not tested); --thorough restarts every budget",
    "assumed": "{names}: assumed, not tested; --thorough restarts every budget",
    "flaky": "not a verdict: re-run with a higher --repeat, and check the host",
    "config_error": "fix the flags (or use a version that has them) before bisecting",
    "infrastructure": "no cell could run (infrastructure): check the host and the server "
                      "(`ddprobe run`), then resume",
    "latent": "size {buffer} ({where}) from the configured draft tokens; these budgets pass "
              "only because the overrun lands in mapped memory: do not deploy them with CUDA "
              "graphs until memcheck is clean (`ddprobe bisect ... --sanitize --confirm-patch "
              "PATCH`)",
    "latent_foreign": "a memory error in a passing config, not attributed to a flagged "
                      "buffer: read the sanitize cell's log (the kernel and allocation it "
                      "names), and do not deploy this budget with CUDA graphs meanwhile",
}


def render(a: Advice) -> str:
    return _sentence(a)


def finish(v: Verdict) -> Verdict:
    """The verdict's next_step and next_command written from its advice (in place)."""
    if v.advice is not None:
        v.next_step = render(v.advice)
        v.next_command = command_text(v.advice.command)
    return v


def lower_keep(verdicts: Sequence[Verdict], unsafe: Iterable[int], safe: int | None) -> None:
    """Advice that keeps a budget found unsafe keeps `safe` instead (None: none is)."""
    bad = set(unsafe)
    for v in verdicts:
        a = v.advice
        if a is None or a.keep is None or a.keep not in bad:
            continue
        a.unsafe, a.keep = a.keep, safe
        finish(v)


def next_command(d: Decision, host: str | None, budget: int, budgets: Sequence[int],
                 factor: int) -> NextCommand | None:
    """The exact command that would decide an inconclusive diagnosis (or verify a verdict)."""
    one = ("--budgets", str(budget))
    if d.reason == "preload":
        c = host_cmd(host, ("server", "logs"))
        c.then = bisect_cmd(host, "--budgets", ",".join(map(str, budgets))).argv
        return c
    if d.reason == "eager-differs":
        return host_cmd(host, ("run",), "--budget", str(budget), "--no-graph",
                               note="the eager failure, on its own")
    if d.reason == "graph-undecided" and d.decided_by == "max-bs experiment":
        return bisect_cmd(host, *one, "--confirm-patch", "PATCH")
    if d.reason == "graph-undecided":
        return bisect_cmd(host, *one, "--oversize-factor", str(max(64, factor * 16)))
    if d.kind == "inconclusive":
        return bisect_cmd(host, *one, "--repeat", "3")
    if d.kind == "buffer_sizing" and not d.workspace:
        return bisect_cmd(host, *one, "--confirm-patch", "PATCH")
    return None  # a workspace: the workaround's command (_mode_advice)


__all__ = ["NO_KEEP", "bisect_cmd", "command_text", "finish", "host_cmd", "lower_keep",
           "names", "next_command", "render"]
