"""A temporary patch that enlarges named buffers (the bisect's "oversize" experiment).

If a failure that appears at a budget goes away when a buffer is allocated `factor` times
larger, the buffer is undersized. The patch multiplies the allocation's first dimension (or its
single size expression) by `factor`, in the install's own source, so it is applied, recorded and
reverted like any other patch.
"""
from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping, Sequence

from ddprobe.defaults import OVERSIZE_FACTOR
from ddprobe.errors import PatchError
from ddprobe.hostside.patchtext import FilePatch, Patch, format_patch, make_file_patch, parse_patch
from ddprobe.sources.buffers import BufferReport, BufferRow, _matches
from ddprobe.sources.bufscan import _torch_names, allocator_name, shape_of
from ddprobe.sources.pyparse import UNPARSABLE, why

# temporary patches (an oversize experiment applies and reverts them): never left applied
OVERSIZE_PREFIX = "ddprobe-oversize-"


def make_oversize_patch(analysis_rows: BufferReport | Sequence[BufferRow], attrs: Sequence[str],
                        factor: int = OVERSIZE_FACTOR, *, texts: Mapping[str, str] | None = None,
                        patch_id: str | None = None) -> Patch:
    """Build a patch multiplying the size of each named buffer by `factor`.

    `attrs` match a row's attr (`cuda_graph_custom_mask`), target (`self.x`) or `Class.attr`;
    every allocation site of a matched buffer is enlarged. The texts come from the report
    (`grep_buffers` keeps them) or from `texts`."""
    if factor < 2:
        raise PatchError(f"oversize factor must be >= 2, got {factor}")
    report = analysis_rows if isinstance(analysis_rows, BufferReport) else None
    rows = list(analysis_rows.rows if isinstance(analysis_rows, BufferReport) else analysis_rows)
    sources: Mapping[str, str] = texts if texts is not None else (report.texts if report else {})
    chosen = _chosen_rows(rows, attrs)
    files, shas = _file_patches(chosen, sources, factor)
    names = ",".join(sorted({r.attr for r in chosen}))
    pid = patch_id or OVERSIZE_PREFIX + "x{}-{}".format(
        factor, hashlib.sha1(f"{names}|{factor}".encode()).hexdigest()[:8])
    p = Patch(id=pid, files=tuple(files),
              description=f"temporary: allocate {names} x{factor} (ddprobe oversize experiment)",
              package=report.package if report and report.package else None,
              versions=(report.version,) if report and report.version else (),
              original_sha256=tuple(shas))
    return parse_patch(format_patch(p), source=f"<{pid}>")


def _chosen_rows(rows: Sequence[BufferRow], attrs: Sequence[str]) -> list[BufferRow]:
    """The found rows each name matches (in order, once each); PatchError for a name that
    matches none."""
    chosen: list[BufferRow] = []
    for a in attrs:
        hit = [r for r in rows if r.status == "found" and _matches(r, a)]
        if not hit:
            known = sorted({r.attr for r in rows if r.status == "found"})
            raise PatchError(f"no buffer named {a!r} in the analysis (known: "
                             f"{', '.join(known[:12])}{' ...' if len(known) > 12 else ''})")
        chosen.extend(x for x in hit if x not in chosen)
    return chosen


def _file_patches(chosen: Sequence[BufferRow], sources: Mapping[str, str], factor: int
                  ) -> tuple[list[FilePatch], list[tuple[str, str]]]:
    """(a file patch per file that changes, (path, sha256 of its original text) each)."""
    by_file: dict[str, list[BufferRow]] = {}
    for r in chosen:
        by_file.setdefault(r.file, []).append(r)
    files: list[FilePatch] = []
    shas: list[tuple[str, str]] = []
    for path in sorted(by_file):
        if path not in sources:
            raise PatchError(f"{path}: source text not available (pass texts=)")
        old = sources[path]
        fp = make_file_patch(path, old, _enlarge(path, old, by_file[path], factor))
        if fp is not None:
            files.append(fp)
            shas.append((path, hashlib.sha256(old.encode("utf-8", "surrogateescape"))
                         .hexdigest()))
    if not files:
        raise PatchError("the oversize patch would change nothing")
    return files, shas


def _enlarge(path: str, text: str, rows: Sequence[BufferRow], factor: int) -> str:
    try:
        tree = ast.parse(text)
    except UNPARSABLE as e:
        raise PatchError(f"{path}: cannot parse: {why(e)}") from None
    mods, fns = _torch_names(tree)
    wanted = {(r.line, r.shape) for r in rows}
    edits: list[tuple[int, int, int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        alloc = allocator_name(node, mods, fns)
        if alloc is None:
            continue
        shape, kind = shape_of(node, alloc)
        if shape is None or (node.lineno, ast.unparse(shape)) not in wanted:
            continue
        if kind != "dims":
            raise PatchError(f"{path}:{node.lineno}: {alloc} has no size expression to enlarge "
                             f"({kind})")
        target = shape.elts[0] if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts \
            else shape
        edits.append((target.lineno, target.col_offset, target.end_lineno or target.lineno,
                      target.end_col_offset or target.col_offset))
        wanted.discard((node.lineno, ast.unparse(shape)))
    if wanted:
        missing = ", ".join(f"line {ln}" for ln, _ in sorted(wanted))
        raise PatchError(f"{path}: allocation not found at {missing} (the source changed since "
                         "the analysis?)")
    lines = text.splitlines(keepends=True)
    for l1, c1, l2, c2 in sorted(edits, reverse=True):  # last first: offsets stay valid
        first = lines[l1 - 1].encode("utf-8")
        last = lines[l2 - 1].encode("utf-8")
        seg_lines = [x.encode("utf-8") for x in lines[l1 - 1:l2]]
        if l1 == l2:
            seg = first[c1:c2].decode("utf-8")
        else:
            seg = b"".join([seg_lines[0][c1:], *seg_lines[1:-1], seg_lines[-1][:c2]]).decode(
                "utf-8")
        repl = f"({seg}) * {factor}"
        merged = first[:c1].decode("utf-8") + repl + last[c2:].decode("utf-8")
        lines[l1 - 1:l2] = [merged]
    return "".join(lines)
