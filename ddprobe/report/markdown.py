"""`report.md`: the run for a pull request or an issue: verdicts first, then the matrix."""
from __future__ import annotations

from ddprobe.report.style import (
    buffer_shape,
    buffer_sizes,
    buffer_where,
    fmt_accept,
    fmt_secs,
    fmt_tok_s,
    restarts_line,
    verdict_words,
)
from ddprobe.report.timing import markdown_rows
from ddprobe.results import Verdict
from ddprobe.runmodel import (
    LOG_LINES,
    CellView,
    HostMatrix,
    MatrixEntry,
    RunModel,
)
from ddprobe.untrusted import md_block, md_code, md_text

_esc = md_text  # host text in a table cell or a list item (ddprobe/untrusted.py)


def _matrix_cell(e: MatrixEntry) -> str:
    if e.outcome == "not-run":
        return "-"
    bits = [f"**{_esc(e.outcome)}**"]
    if e.accept is not None:
        bits.append(f"accept {fmt_accept(e.accept)}")
    if e.tok_s is not None:
        bits.append(f"{fmt_tok_s(e.tok_s)} tok/s")
    if e.coding:
        bits.append(f"coding {_esc(e.coding)}")
    if e.signature and e.outcome != "ok":
        bits.append(md_code(e.signature, table=True))
    for v in e.variants:
        bits.append(f"({_esc(v.variant or 'repeat')}: {_esc(v.outcome)})")
    head, rest = bits[0], ", ".join(bits[1:])
    return f"{head} {rest}" if rest else head


def _matrix(hm: HostMatrix) -> list[str]:
    lines = ["| budget | " + " | ".join(hm.modes) + " |",
             "| ---: | " + " | ".join("---" for _ in hm.modes) + " |"]
    for b in hm.budgets:
        lines.append(f"| {b} | " + " | ".join(_matrix_cell(hm.get(b, m)) for m in hm.modes)
                     + " |")
    return lines


def _verdict(n: int, v: Verdict, m: RunModel | None = None) -> list[str]:
    head = (f"### {n}. {verdict_words(v.label)}: "
            f"budget{'s' if len(v.budgets) != 1 else ''} "
            f"{', '.join(map(str, v.budgets))}")
    lines = [f'<a id="verdict-{n}"></a>', "", head, ""]
    facts = [("outcome", _esc(v.outcome)),
             ("signature", md_code(v.signature) if v.signature else ""),
             ("confidence", v.confidence), ("decided by", v.decided_by),
             ("host", _esc(v.host or ""))]
    if v.buffer:
        b = v.buffer
        text = f"{md_code(b.get('attr', '?'))} at {md_code(buffer_where(b))}"
        if buffer_shape(b):
            text += f", shape {md_code(buffer_shape(b))}"
        if buffer_sizes(b):
            text += f"; {_esc(buffer_sizes(b))}"
        facts.append(("buffer", text))
    if v.patch_confirmed is not None:
        facts.append(("patch", "fixed it" if v.patch_confirmed else "did not fix it"))
    lines += [f"- **{k}**: {val}" for k, val in facts if val]
    if v.evidence:
        lines += ["", "Evidence:", ""]
        for e in v.evidence:
            cells = f" (cells: {_cell_links(m, e.cells, v.host)})" if e.cells else ""
            lines.append(f"- *{e.kind}*: {_esc(e.summary, limit=4000)}{cells}")
    if v.next_step:
        lines += ["", f"Next step: {_esc(v.next_step, limit=4000)}"]
    if v.would_decide:
        lines += ["", f"What would decide it: {_esc(v.would_decide, limit=4000)}"]
    if v.next_command:
        lines += ["", "```", v.next_command.replace("`", "'"), "```"]
    return lines + [""]


def _cell_links(m: RunModel | None, keys: list[str], host: str | None) -> str:
    """Each cited cell as a link to its section (failing cells) or its row."""
    out = []
    for k in keys:
        found = m.cells_of([k], host) if m is not None else []
        if not found:
            out.append(_esc(k))
        for c in found:
            out.append(f"[{_esc(k)}](#cell-{c.index})")
    return ", ".join(out)


def _failing_cell(m: RunModel, c: CellView) -> list[str]:
    """A failing cell's evidence: launch argv, effective config, the server log's tail."""
    import shlex
    cites = m.cited_by(c)
    out = [f'<a id="cell-{c.index}"></a>', "",
           f"### cell {c.index}: {md_code(c.plan_key)} on {_esc(c.host)}: {_esc(c.outcome)}",
           ""]
    if cites:
        out.append("- cited by: " + ", ".join(f"[verdict {n}](#verdict-{n})" for n in cites))
    if c.signature:
        out.append(f"- signature: {md_code(c.signature)}")
    if c.error:
        out.append(f"- error: {_esc(c.error)}")
    if c.launch:
        out.append(f"- launch: {md_code(shlex.join(c.launch))}")
    if c.effective:
        src = f" (from {_esc(c.effective_source)})" if c.effective_source else ""
        out.append(f"- effective config{src}: "
                   + ", ".join(f"{_esc(k)}={md_code(v)}" for k, v in c.effective))
    if c.log:
        out += ["", f"Server log (last {LOG_LINES} lines at most):", "", md_block(c.log)]
    return out + [""]


def render_markdown(m: RunModel) -> str:
    out = _header(m) + _verdicts(m) + _matrices(m) + _cells(m) + \
        markdown_rows(list(enumerate(m.record.cells, 1))) + _failing(m)
    if m.notes:
        out += ["## Notes", ""] + [f"- {_esc(n)}" for n in m.notes] + [""]
    return "\n".join(out)


def _header(m: RunModel) -> list[str]:
    out = [f"# ddprobe {m.command or 'run'} {m.run_id}", ""]
    state = "finished" if m.finished else "unfinished (resume with `--resume`)"
    out += [f"- hosts: {_esc(', '.join(m.hosts)) or '-'}",
            f"- budgets: {', '.join(map(str, m.budgets)) or '-'}",
            f"- started: {m.started_at or '?'}; {state}"
            + (f" at {m.finished_at}" if m.finished_at else ""),
            f"- cells: {len(m.cells)} ({', '.join(f'{n} {o}' for o, n in m.counts) or 'none'});"
            f" {restarts_line(m.restarts_used, m.restarts_full_sweep)}"]
    if m.exit_code is not None:
        out.append(f"- exit code: {m.exit_code}")
    return out + [""]


def _verdicts(m: RunModel) -> list[str]:
    out = ["## Verdicts", ""]
    if not m.verdicts:
        out += ["No verdicts recorded.", ""]
    for n, v in enumerate(m.verdicts, 1):
        out += _verdict(n, v, m)
    return out


def _matrices(m: RunModel) -> list[str]:
    out = ["## Outcome matrix (budget x CUDA graph)", ""]
    for hm in m.matrices:
        if len(m.matrices) > 1:
            out += [f"### {_esc(hm.host)}", ""]
        out += _matrix(hm) + [""]
    if not m.matrices:
        out += ["No cells were run.", ""]
    if m.disagreements:
        out += ["Hosts disagree (architecture-specific?):", ""]
        out += [f"- {_esc(d)}" for d in m.disagreements] + [""]
    return out


def _cells(m: RunModel) -> list[str]:
    out = ["## Cells", "",
           "| # | host | config | outcome | signature | coding | accept | tok/s | restart "
           "| total | note |",
           "| ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for c in m.cells:
        note = "; ".join(x for x in (c.variant, c.error or "") if x)
        # a failing cell links to its section below; a passing one is its own link target
        num = f"[{c.index}](#cell-{c.index})" if c.failed else \
            f'<a id="cell-{c.index}"></a>{c.index}'
        out.append(f"| {num} | " + " | ".join(_esc(x) for x in (
            c.host, c.key, c.outcome, c.signature or "", c.coding, fmt_accept(c.accept),
            fmt_tok_s(c.tok_s), fmt_secs(c.restart_s), fmt_secs(c.total_s), note)) + " |")
    return out + [""]


def _failing(m: RunModel) -> list[str]:
    failing = [c for c in m.cells if c.failed]
    if not failing:
        return []
    out = ["## Failing cells", ""]
    for c in failing:
        out += _failing_cell(m, c)
    return out
