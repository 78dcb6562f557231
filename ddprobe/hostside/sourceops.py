"""The host side of sources and patches: ONE program run with the host's interpreter.

Shipped as source text on stdin with `patchtext`, `sourceio`, `ledger` and `patch`
prepended (`hostside.client`), so it needs nothing but the standard library (and works on
Python 3.8). The request and the answer are `hostside.common`'s protocol, through its one
main loop. During an apply it writes a progress line before each file and ignores hang-ups:
if the caller dies (ddprobe killed, ssh dropped) the apply still completes.
Only a kill of this process itself stops it between files; each file is then original or
patched (atomic rename), the ledger entry says "applying", and `status` offers finish/roll back.

Ops: locate, read, apply, revert, status, diff. The ledger lives beside the package:
`<dir holding the package>/.ddprobe/ledger.json`, backups under `.ddprobe/backups/<patch id>/`.
"""
from __future__ import annotations

import sys
from typing import Any

if "locate" not in globals():  # standalone (tests); on a host the parts are concatenated
    from ddprobe.hostside.common import main
    from ddprobe.hostside.ledger import op_diff, op_recover, op_status  # noqa: F401
    from ddprobe.hostside.patch import op_apply, op_revert  # noqa: F401
    from ddprobe.hostside.sourceio import locate, op_grep, op_read  # noqa: F401

# The function behind each op. The client sends only the parts an op needs (a read does not
# carry the patch engine), so only the functions of the parts sent are offered.
OP_FUNCS = {"locate": "op_locate", "read": "op_read", "grep": "op_grep", "status": "op_status",
            "diff": "op_diff", "apply": "op_apply", "revert": "op_revert",
            "recover": "op_recover"}


def op_locate(req: dict[str, Any]) -> dict[str, Any]:
    return locate(req["package"])


def oserror_kind(op: str, e: OSError) -> str:
    """A failed write of an apply or revert is a failed patch; any other OSError is `oserror`
    (the atomic writes have removed their temp files on the way out)."""
    return "patch" if op in ("apply", "revert") else "oserror"


def offered() -> dict[str, Any]:
    names = globals()
    return {op: names[fn] for op, fn in OP_FUNCS.items() if fn in names}


if __name__ == "__main__":
    sys.exit(main(sys.argv, offered(), oserror_kind))
