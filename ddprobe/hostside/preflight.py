"""ddprobe's preflight: parse planned launch argvs with the host's OWN SGLang argument handling.

Runs ON the host, with the interpreter the server runs with (standard library only; it imports
the installed package, never starts a server, never opens a port). For each argv it does what
`python -m <package>.launch_server` does before launching, and reads back the values the
server would run with after SGLang's post-init rewrites (e.g. `--speculative-eagle-topk 1`
sets draft tokens to steps + 1) and assertions (e.g. steps unset with draft tokens given).

Entry point, per release layout (first that exists):
  1. <package>.srt.server_args.prepare_server_args(argv)        0.4.x .. 0.5.23 (and ddtestbed)
  2. ServerArgs.add_cli_args(parser); ServerArgs.from_cli_args(ns)   older / patched layouts
then, when the record has it, `resolve_once()` (0.5.2x: resolution moved out of __post_init__
into arg_groups/*_hook.py) and `resolved_dict()` for the values; else the dataclass fields.

Interface: op `parse` of `hostside.common`'s protocol (`python -c BOOT parse`, the program
`hostside.client.program_source("preflight")` then the request on stdin):

    request  {"package": "sglang", "configs": [{"key": "b8-graph", "argv": ["--model-path", ...],
              "env": {"SGLANG_X": "1"}}]}
    result   one JSON object (the answer line's "result"; its own "ok" is the preflight's):
      {"ok": true, "package": "sglang", "version": "0.5.2", "python": "3.11.9",
       "entry": "sglang.srt.server_args:prepare_server_args", "resolve": "resolve_once" | null,
       "results": [{"key": ..., "status": "ok" | "rejected" | "error",
                    "values": {field: json value, ...},          # status ok; plus
                        # _model_context_len / _model_context_source when context_length is
                        # unset (read from the model's config.json like get_context_length)
                    "warnings": ["speculative_num_draft_tokens is adjusted ...", ...],
                    "error": {"kind": "argparse" | "assertion" | "value" | "import" | "environment",
                              "type": "AssertionError", "message": ..., "where": "file:line",
                              "line": "the source line", "missing": "torch" | null}}]}
      {"ok": false, "stage": "import", "version": ..., "python": ..., "error": {... as above}}

`rejected` means SGLang itself refused the argv (argparse exit, or an AssertionError /
ValueError raised inside the package): the server would die the same way at start-up.
`error` means the parse could not be completed for a reason outside the argv (a module the
host lacks, no GPU visible to post-init, ...): nothing is known about the effective config.
Everything the imported code prints goes to stderr; only the answer line is on stdout.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import linecache
import logging
import os
import sys
import traceback

if "OpError" not in globals():  # read standalone; on a host common.py's text comes first
    from ddprobe.hostside.common import main

_MAX_MSG = 2000


def _version(package):
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - 3.7
        return None
    for name in (package, package.replace("_", "-")):
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def _pkg_dir(package):
    spec = None
    try:
        import importlib.util
        spec = importlib.util.find_spec(package)
    except Exception:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _in_pkg(frame, pkg_dir):
    return bool(frame is not None and pkg_dir and
                os.path.realpath(frame.filename).startswith(pkg_dir))


def _kind_of(exc, inner, pkg_dir):
    """import / assertion / value (raised inside the package: SGLang refused) / environment."""
    if isinstance(exc, ImportError):
        return "import"
    raised_in_pkg = _in_pkg(inner, pkg_dir)
    if isinstance(exc, AssertionError) and raised_in_pkg:
        return "assertion"
    if isinstance(exc, ValueError) and raised_in_pkg:
        return "value"
    return "environment"


def _describe(exc, pkg_dir, kind=None):
    tb = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    inner = tb[-1] if tb else None
    in_pkg = [f for f in tb if _in_pkg(f, pkg_dir)]
    site = in_pkg[-1] if in_pkg else inner
    where = line = ""
    if site is not None:
        where = "%s:%s" % (site.filename, site.lineno)
        line = (site.line or linecache.getline(site.filename, site.lineno or 0) or "").strip()
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    if kind is None:
        kind = _kind_of(exc, inner, pkg_dir)
    msg = str(exc) or type(exc).__name__
    if kind == "assertion" and site is not None:
        line = _statement(site.filename, site.lineno) or line
        if not str(exc):
            msg = "assertion failed: " + line
    return {"kind": kind, "type": type(exc).__name__, "message": msg[:_MAX_MSG],
            "where": where, "line": line[:400], "missing": missing}


def _statement(path, lineno):
    """The whole statement around `lineno` (a multi-line assert), on one line."""
    try:
        import ast
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        best = None
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.stmt) and not isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If,
                           ast.For, ast.While, ast.With, ast.Try)) and \
                    node.lineno <= lineno <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
        if best is None:
            return ""
        seg = ast.get_source_segment(text, best) or ""
        return " ".join(seg.split())[:400]
    except Exception:
        return ""


def _plain(v, depth=0):
    if v is None or isinstance(v, (bool, int, str)):
        return v if not isinstance(v, str) else v[:400]
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if depth < 2 and isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1) for x in list(v)[:512]]
    if depth < 2 and isinstance(v, dict):
        return {str(k)[:100]: _plain(x, depth + 1) for k, x in list(v.items())[:100]}
    if hasattr(v, "value") and isinstance(v.value, (str, int)):  # enums
        return v.value
    return None


def _values(args):
    if hasattr(args, "resolved_dict"):
        with contextlib.suppress(Exception):
            d = args.resolved_dict()
            if isinstance(d, dict):
                return {str(k): _plain(v) for k, v in d.items()}
    if dataclasses.is_dataclass(args):
        names = [f.name for f in dataclasses.fields(args)]
    else:
        names = [k for k in vars(args) if not k.startswith("_")]
    out = {}
    for n in names:
        with contextlib.suppress(Exception):
            out[n] = _plain(getattr(args, n))
    return out


_CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                 "max_position_embeddings")


def _model_context_len(model_path):
    """The model's context length from its config.json (a local dir or the HF cache), the way
    SGLang's get_context_length reads it; (value, path) or (None, why)."""
    import glob
    if not isinstance(model_path, str) or not model_path:
        return None, "no model path"
    cands = [os.path.join(model_path, "config.json")]
    if not os.path.isdir(model_path) and model_path.count("/") == 1:
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
        cands += sorted(glob.glob(os.path.join(
            hub, "models--" + model_path.replace("/", "--"), "snapshots", "*", "config.json")))
    for path in cands:
        try:
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(cfg, dict):
            continue
        inner = cfg.get("text_config")
        text = inner if isinstance(inner, dict) else cfg
        rope = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else None
        factor = 1
        if rope and "original_max_position_embeddings" not in rope and \
                rope.get("rope_type") != "llama3":
            factor = rope.get("factor", 1) if isinstance(rope.get("factor", 1), (int, float)) \
                else 1
        for k in _CONTEXT_KEYS:
            v = text.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return int(factor * v), path
        return None, "%s has none of %s" % (path, ", ".join(_CONTEXT_KEYS))
    return None, "no config.json for %s" % model_path


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        with contextlib.suppress(Exception):
            self.lines.append(record.getMessage()[:400])


def _entry(mod):
    prep = getattr(mod, "prepare_server_args", None)
    if callable(prep):
        return "prepare_server_args", prep
    cls = getattr(mod, "ServerArgs", None)
    if cls is not None and hasattr(cls, "add_cli_args") and hasattr(cls, "from_cli_args"):
        def parse(argv):
            import argparse
            parser = argparse.ArgumentParser()
            cls.add_cli_args(parser)
            return cls.from_cli_args(parser.parse_args(argv))
        return "ServerArgs.from_cli_args", parse
    return None, None


def _one(parse, cfg, package, pkg_dir):
    key = cfg.get("key", "")
    argv = [str(a) for a in cfg.get("argv") or []]
    env = {str(k): str(v) for k, v in (cfg.get("env") or {}).items()}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    collect = _Collect()
    plog = logging.getLogger(package)
    plog.addHandler(collect)
    err = io.StringIO()
    resolve = None
    try:
        with contextlib.redirect_stdout(sys.stderr), contextlib.redirect_stderr(err):
            try:
                args = parse(argv)
                if hasattr(args, "resolve_once"):
                    resolve = "resolve_once"
                    args.resolve_once()
                values = _values(args)
            except SystemExit as e:
                text = err.getvalue().strip().splitlines()
                msg = text[-1] if text else "argument parsing exited with %r" % (e.code,)
                return {"key": key, "status": "rejected", "warnings": collect.lines,
                        "error": {"kind": "argparse", "type": "SystemExit",
                                  "message": msg[:_MAX_MSG], "where": "", "line": "",
                                  "missing": None, "exit_code": _plain(e.code)}}, resolve
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                d = _describe(e, pkg_dir)
                status = "rejected" if d["kind"] in ("assertion", "value") else "error"
                return {"key": key, "status": status, "warnings": collect.lines,
                        "error": d}, resolve
    finally:
        plog.removeHandler(collect)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sys.stderr.write(err.getvalue()[-20000:])
    if values.get("context_length") is None:
        ctx, where = _model_context_len(values.get("model_path"))
        values["_model_context_len"], values["_model_context_source"] = ctx, where
    return {"key": key, "status": "ok", "values": values, "warnings": collect.lines}, resolve


def _parse_all(req):
    package = str(req.get("package") or "sglang")
    base = {"package": package, "version": _version(package),
            "python": "%d.%d.%d" % sys.version_info[:3]}
    pkg_dir = _pkg_dir(package)
    modname = package + ".srt.server_args"
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import importlib
            mod = importlib.import_module(modname)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        d = _describe(e, pkg_dir, kind="import" if isinstance(e, ImportError) else "environment")
        return {"ok": False, "stage": "import", "module": modname, "error": d, **base}
    name, parse = _entry(mod)
    if parse is None:
        return {"ok": False, "stage": "entry", "module": modname, **base,
                "error": {"kind": "environment", "type": "LookupError", "where": "",
                          "line": "", "missing": None,
                          "message": "%s has neither prepare_server_args nor ServerArgs with "
                                     "add_cli_args/from_cli_args" % modname}}
    results, resolve = [], None
    for cfg in req.get("configs") or []:
        res, r = _one(parse, cfg, package, pkg_dir)
        resolve = resolve or r
        results.append(res)
    return {"ok": True, "entry": "%s:%s" % (modname, name), "resolve": resolve,
            "results": results, **base}


def op_parse(req):
    """The preflight of every config in the request (see the module's docstring)."""
    try:
        return _parse_all(req)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"ok": False, "stage": "program", "error": {
            "kind": "environment", "type": type(e).__name__, "message": str(e)[:_MAX_MSG],
            "where": "", "line": "", "missing": None}}


OPS = {"parse": op_parse}


if __name__ == "__main__":
    sys.exit(main(sys.argv, OPS))
