"""`report.html`: one self-contained file a person would rather look at than read.

The budget x graph outcome matrix as a coloured grid, acceptance length and tok/s per budget as
inline SVG bar charts, the verdicts with their evidence, and every cell. No scripts, no fonts,
no images fetched: a Content-Security-Policy of `default-src 'none'` makes that a promise the
browser enforces.
"""
from __future__ import annotations

from html import escape

from ddprobe.report.style import (
    OUTCOME_STYLE,
    buffer_shape,
    buffer_sizes,
    buffer_where,
    fmt_accept,
    fmt_secs,
    fmt_tok_s,
    outcome_colour,
    restarts_line,
    text_on,
    verdict_colour,
    verdict_words,
)
from ddprobe.report.svg import bar_chart
from ddprobe.results import Verdict
from ddprobe.runmodel import (
    LOG_LINES,
    CellView,
    HostMatrix,
    MatrixEntry,
    RunModel,
)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#212121;
 max-width:1100px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid
 #e0e0e0;padding-bottom:4px} .meta{color:#555;font-size:13px;line-height:1.6}
table{border-collapse:collapse} .grid{margin:8px 0 4px}
.grid th{font-size:13px;padding:6px 10px;color:#424242;text-align:center}
.grid th.budget{text-align:right}
.grid td.cell{width:220px;height:64px;padding:8px 10px;border:3px solid #fff;border-radius:6px;
 vertical-align:top;font-size:12px}
.grid td.cell .o{font-size:15px;font-weight:bold;text-transform:uppercase;letter-spacing:.5px}
.grid td.cell .sig{opacity:.9;font-family:ui-monospace,monospace;font-size:11px;
 word-break:break-word}
.grid td.cell .var{margin-top:3px;padding:1px 4px;border-radius:3px;display:inline-block;
 font-size:11px;border:1px solid rgba(255,255,255,.6)}
.legend span{display:inline-block;margin:2px 10px 2px 0;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
 vertical-align:-1px}
.verdict{border-left:6px solid #999;background:#fafafa;padding:10px 14px;margin:10px 0;
 border-radius:4px} .verdict h3{margin:0 0 6px;font-size:16px}
.verdict .kv{font-size:13px;line-height:1.6} .verdict code{font-size:12px}
.verdict ul{margin:6px 0 0 18px;padding:0;font-size:13px}
.grid td.cell.outcome-not-run{color:#90a4ae!important}
.grid td.cell.outcome-not-run .o{font-size:12px;font-weight:normal}
.charts{display:flex;flex-wrap:wrap}
.charts svg{margin:6px 12px 6px 0;border:1px solid #eee;border-radius:6px;background:#fff}
table.cells{font-size:12px;margin-top:6px} table.cells th,table.cells td{padding:4px 8px;
 border-bottom:1px solid #eee;text-align:left} table.cells td.num{text-align:right}
.pill{padding:1px 6px;border-radius:8px;color:#fff;font-weight:bold;font-size:11px}
.warn{color:#8a6d00}
.failcell{border:1px solid #ddd;border-radius:6px;padding:6px 12px;margin:10px 0}
pre.log{background:#f6f8fa;padding:8px;overflow-x:auto;max-height:28em;font-size:12px;white-space:pre-wrap}
"""


def _e(v: object) -> str:
    return escape(str(v), quote=True)


def _pill(outcome: str) -> str:
    col = outcome_colour(outcome)
    return (f'<span class="pill outcome-{_e(outcome)}" style="background:{col};'
            f'color:{text_on(col)}">{_e(outcome)}</span>')


def _cell(e: MatrixEntry) -> str:
    col = outcome_colour(e.outcome)
    fg = text_on(col)
    graph = "on" if e.mode == "graph" else "off"
    body = [f'<div class="o">{_e(e.outcome if e.outcome != "not-run" else "not run")}</div>']
    metrics = []
    if e.accept is not None:
        metrics.append(f"accept {fmt_accept(e.accept)}")
    if e.tok_s is not None:
        metrics.append(f"{fmt_tok_s(e.tok_s)} tok/s")
    if e.coding:
        metrics.append(f"coding {e.coding}")
    if metrics:
        body.append(f'<div class="m">{_e(" · ".join(metrics))}</div>')
    if e.signature and e.outcome != "ok":
        body.append(f'<div class="sig">{_e(e.signature)}</div>')
    for v in e.variants:
        vc = outcome_colour(v.outcome)
        body.append(f'<div class="var outcome-{_e(v.outcome)}" style="background:{vc};'
                    f'color:{text_on(vc)}">{_e(v.variant or "repeat")}: {_e(v.outcome)}</div>')
    if len(e.cells) > 1:
        body.append(f'<div class="m">{len(e.cells)} repeats</div>')
    return (f'<td class="cell outcome-{_e(e.outcome)}" data-host="{_e(e.host)}" '
            f'data-budget="{e.budget}" data-graph="{graph}" data-outcome="{_e(e.outcome)}" '
            f'style="background:{col};color:{fg}">' + "".join(body) + "</td>")


def _grid(hm: HostMatrix) -> str:
    head = "".join(f'<th>CUDA graph {"on" if m == "graph" else "off"}</th>' for m in hm.modes)
    rows = [f'<table class="grid" data-host="{_e(hm.host)}"><thead><tr>'
            f'<th class="budget">budget</th>{head}</tr></thead><tbody>']
    for b in hm.budgets:
        rows.append(f'<tr><th class="budget">{b}</th>'
                    + "".join(_cell(hm.get(b, m)) for m in hm.modes) + "</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _legend() -> str:
    items = "".join(f'<span><i style="background:{c}"></i>{_e(o)}: {_e(words)}</span>'
                    for o, (c, _, words) in OUTCOME_STYLE.items())
    return f'<div class="legend">{items}</div>'


def _links(m: RunModel | None, keys: list[str], host: str | None) -> str:
    out = []
    for k in keys:
        found = m.cells_of([k], host) if m is not None else []
        if not found:
            out.append(_e(k))
        out += [f'<a href="#cell-{c.index}">{_e(k)}</a>' for c in found]
    return ", ".join(out)


def _failing_cell(m: RunModel, c: CellView) -> str:
    import shlex
    cites = m.cited_by(c)
    kv = []
    if cites:
        kv.append(("cited by", ", ".join(f'<a href="#verdict-{n}">verdict {n}</a>'
                                         for n in cites)))
    if c.signature:
        kv.append(("signature", f"<code>{_e(c.signature)}</code>"))
    if c.error:
        kv.append(("error", _e(c.error)))
    if c.launch:
        kv.append(("launch", f"<code>{_e(shlex.join(c.launch))}</code>"))
    if c.effective:
        src = f" (from {_e(c.effective_source)})" if c.effective_source else ""
        kv.append((f"effective config{src}", ", ".join(
            f"{_e(k)}=<code>{_e(v)}</code>" for k, v in c.effective)))
    body = "<br>".join(f"<b>{k}</b>: {val}" for k, val in kv)
    log = (f"<details open><summary>server log (last {LOG_LINES} lines at most)</summary>"
           f'<pre class="log">{_e(c.log)}</pre></details>') if c.log else ""
    return (f'<div class="failcell" id="cell-{c.index}"><h3>cell {c.index}: '
            f"<code>{_e(c.plan_key)}</code> on {_e(c.host)}: {_pill(c.outcome)}</h3>"
            f'<div class="kv">{body}</div>{log}</div>')


def _verdict(n: int, v: Verdict, m: RunModel | None = None) -> str:
    col = verdict_colour(v.kind)
    budgets = ", ".join(map(str, v.budgets))
    kv = [("outcome", _pill(v.outcome) if v.outcome else ""),
          ("signature", f"<code>{_e(v.signature)}</code>" if v.signature else ""),
          ("confidence", _e(v.confidence)), ("decided by", _e(v.decided_by)),
          ("host", _e(v.host or ""))]
    if v.buffer:
        b = v.buffer
        shape, sizes = buffer_shape(b), buffer_sizes(b)
        kv.append(("buffer", f"<code>{_e(b.get('attr', '?'))}</code> at "
                             f"<code>{_e(buffer_where(b))}</code>"
                   + (f", shape <code>{_e(shape)}</code>" if shape else "")
                   + (f"; {_e(sizes)}" if sizes else "")))
    if v.patch_confirmed is not None:
        kv.append(("patch", "fixed it" if v.patch_confirmed else "did not fix it"))
    lines = "<br>".join(f"<b>{k}</b>: {val}" for k, val in kv if val)
    ev = "".join(f"<li><i>{_e(e.kind)}</i>: {_e(e.summary)}"
                 + (f" <small>(cells: {_links(m, e.cells, v.host)})</small>" if e.cells
                    else "")
                 + "</li>" for e in v.evidence)
    nxt = f'<div class="kv"><b>next step</b>: {_e(v.next_step)}</div>' if v.next_step else ""
    if v.would_decide:
        nxt += f'<div class="kv"><b>what would decide it</b>: {_e(v.would_decide)}</div>'
    if v.next_command:
        nxt += f'<div class="kv"><b>run</b>: <code>{_e(v.next_command)}</code></div>'
    return (f'<div class="verdict verdict-{_e(v.kind)}" id="verdict-{n}" '
            f'style="border-left-color:{col}">'
            f'<h3 style="color:{col}">{n}. {_e(verdict_words(v.label))} '
            f'<small>budget{"s" if len(v.budgets) != 1 else ""} {_e(budgets)}</small></h3>'
            f'<div class="kv">{lines}</div>' + (f"<ul>{ev}</ul>" if ev else "") + nxt + "</div>")


def _cells(m: RunModel) -> str:
    head = ("<tr><th>#</th><th>host</th><th>config</th><th>outcome</th><th>signature</th>"
            "<th>coding</th><th>accept</th><th>tok/s</th><th>restart</th><th>total</th>"
            "<th>note</th></tr>")
    rows = []
    for c in m.cells:
        note = "; ".join(x for x in (c.variant, c.error or "") if x)
        num = f'<a href="#cell-{c.index}">{c.index}</a>' if c.failed else str(c.index)
        rid = "" if c.failed else f' id="cell-{c.index}"'  # failing: its own section
        rows.append(f'<tr class="cellrow outcome-{_e(c.outcome)}"{rid}><td class="num">{num}</td>'
                    f"<td>{_e(c.host)}</td><td><code>{_e(c.key)}</code></td>"
                    f"<td>{_pill(c.outcome)}</td><td><code>{_e(c.signature or '')}</code></td>"
                    f'<td class="num">{_e(c.coding)}</td>'
                    f'<td class="num">{fmt_accept(c.accept)}</td>'
                    f'<td class="num">{fmt_tok_s(c.tok_s)}</td>'
                    f'<td class="num">{fmt_secs(c.restart_s)}</td>'
                    f'<td class="num">{fmt_secs(c.total_s)}</td><td>{_e(note)}</td></tr>')
    return f'<table class="cells"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def render_html(m: RunModel) -> str:
    title = f"ddprobe {m.command or 'run'} {m.run_id}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
             "style-src 'unsafe-inline'; img-src data:\">",
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", f'<div class="meta">{"<br>".join(_meta(m))}</div>']
    parts += _matrix_section(m)
    parts.append('<h2 id="verdicts">Verdicts</h2>')
    parts += [_verdict(n, v, m) for n, v in enumerate(m.verdicts, 1)] or [
        "<p>No verdicts recorded.</p>"]
    parts += _charts(m)
    parts.append('<h2 id="cells">Cells</h2>' + _cells(m))
    failing = [c for c in m.cells if c.failed]
    if failing:
        parts.append('<h2 id="failing">Failing cells</h2>'
                     + "".join(_failing_cell(m, c) for c in failing))
    if m.notes:
        parts.append('<h2 id="notes">Notes</h2><ul>'
                     + "".join(f"<li>{_e(n)}</li>" for n in m.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _meta(m: RunModel) -> list[str]:
    state = "finished" if m.finished else "unfinished (resume with --resume)"
    meta = [f"hosts <b>{_e(', '.join(m.hosts) or '-')}</b>",
            f"budgets <b>{_e(', '.join(map(str, m.budgets)) or '-')}</b>",
            f"{len(m.cells)} cells, {_e(restarts_line(m.restarts_used, m.restarts_full_sweep))}",
            f"started {_e(m.started_at or '?')}, {_e(state)}"
            + (f" {_e(m.finished_at)}" if m.finished_at else "")]
    if m.argv:
        meta.append(f"<code>{_e(' '.join(m.argv))}</code>")
    return meta


def _matrix_section(m: RunModel) -> list[str]:
    parts = ['<h2 id="matrix">Outcome matrix: budget x CUDA graph</h2>']
    for hm in m.matrices:
        if len(m.matrices) > 1:
            parts.append(f"<h3>{_e(hm.host)}</h3>")
        parts.append(_grid(hm))
    if not m.matrices:
        parts.append("<p>No cells were run.</p>")
    parts.append(_legend())
    parts += [f'<p class="warn">hosts disagree: {_e(d)}</p>' for d in m.disagreements]
    return parts


def _charts(m: RunModel) -> list[str]:
    return ['<h2 id="charts">Acceptance length and throughput per budget</h2>'
            '<div class="charts">',
            bar_chart(m.accept_series, title="acceptance length per budget",
                      unit="tokens / step", chart_id="chart-accept", digits=2, width=520),
            bar_chart(m.tok_series, title="output tok/s per budget", unit="tok/s",
                      chart_id="chart-tok-s", digits=0, width=520),
            "</div>"]
