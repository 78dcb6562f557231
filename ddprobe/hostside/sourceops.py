"""The host side of sources and patches: ONE program run with the host's interpreter.

Shipped as source text (`python -c SRC OP`) with `patchtext`, `sourceio`, `ledger` and `patch`
prepended (`hostside.client`), so it needs nothing but the standard library (and works on
Python 3.8). Input: JSON on stdin. Output: JSON lines on stdout; the last line is the result
`{"ok": true, "result": ...}` or
`{"ok": false, "error": {...}}`. During an apply it writes a progress line before each file and
ignores hang-ups: if the caller dies (ddprobe killed, ssh dropped) the apply still completes.
Only a kill of this process itself stops it between files; each file is then original or
patched (atomic rename), the ledger entry says "applying", and `status` offers finish/roll back.

Ops: locate, read, apply, revert, status, diff. The ledger lives beside the package:
`<dir holding the package>/.ddprobe/ledger.json`, backups under `.ddprobe/backups/<patch id>/`.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

if "emit" not in globals():  # standalone (tests); on a host the parts are concatenated
    from ddprobe.hostside.ledger import op_diff, op_recover, op_status  # noqa: F401
    from ddprobe.hostside.patch import op_apply, op_revert  # noqa: F401
    from ddprobe.hostside.patchtext import PatchTextError  # noqa: F401
    from ddprobe.hostside.sourceio import HelperError, emit, locate, op_grep, op_read  # noqa: F401

# The function behind each op. The client sends only the parts an op needs (a read does not
# carry the patch engine), so look the function up when the op runs.
OP_FUNCS = {"locate": "op_locate", "read": "op_read", "grep": "op_grep", "status": "op_status",
            "diff": "op_diff", "apply": "op_apply", "revert": "op_revert",
            "recover": "op_recover"}


def op_locate(req: dict[str, Any]) -> dict[str, Any]:
    return locate(req["package"])


def main(argv: list[str]) -> int:
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)  # `-c` puts the cwd first; a stray ./sglang must not shadow the install
    op = argv[1] if len(argv) > 1 else ""
    fn = globals().get(OP_FUNCS.get(op, ""))
    if fn is None:
        emit({"ok": False, "error": {"kind": "usage", "message": "unknown op %r" % op}})
        return 2
    patch_error = globals().get("PatchTextError", HelperError)  # absent when not shipped
    try:
        raw = sys.stdin.read()
        req = json.loads(raw) if raw.strip() else {}
        emit({"ok": True, "result": fn(req)})
    except HelperError as e:
        err = {"kind": e.kind, "message": str(e)}
        err.update(e.extra)
        emit({"ok": False, "error": err})
    except patch_error as e:
        emit({"ok": False, "error": {"kind": "patch", "message": str(e), "path": e.path,
                                     "hunk": e.hunk}})
    except OSError as e:
        # a full disk, a read-only or odd path: one clear error, not a traceback (issue 15);
        # the atomic writes have removed their temp files on the way out
        what = "%s%s" % (e.strerror or type(e).__name__,
                         (": %s" % e.filename) if getattr(e, "filename", None) else "")
        kind = "patch" if op in ("apply", "revert") else "oserror"
        emit({"ok": False, "error": {"kind": kind, "message": "%s failed: %s" % (op, what),
                                     "errno": e.errno}})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
