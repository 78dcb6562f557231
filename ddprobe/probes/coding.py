"""The coding suite: load it, pull the code out of an answer, run the task's tests on it.

A suite is a JSON data file in `ddprobe/probes/suites/` (or any path):
`{"name", "version", "tasks": [{"id", "prompt", "entry_point", "tests", "solution"}]}`.
`solution` is a correct reference answer; it is never sent to the server.
"""
from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from ddprobe.errors import ConfigError, UsageError
from ddprobe.probes.sandbox import SandboxLimits, TestRun, run_tests_async

_FENCE: Final = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PY_TAGS: Final = frozenset({"python", "py", "python3", "py3", ""})
_TASK_KEYS: Final = ("id", "prompt", "entry_point", "tests", "solution")


@dataclass(frozen=True)
class CodingTask:
    id: str
    prompt: str
    entry_point: str
    tests: str
    solution: str


@dataclass(frozen=True)
class Suite:
    name: str
    version: int
    tasks: tuple[CodingTask, ...]
    path: str

    def select(self, ids: Sequence[str] | None) -> tuple[CodingTask, ...]:
        """The tasks `--tasks` names: ids, one number N (the first N), or 'all' (or none)."""
        if not ids or [i.lower() for i in ids] == ["all"]:
            return self.tasks
        if len(ids) == 1 and ids[0].isdigit():
            n = int(ids[0])
            if n < 1:
                raise UsageError("--tasks N needs N >= 1")
            return self.tasks[:n]
        known = {t.id: t for t in self.tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise ConfigError(f"unknown task id(s) {', '.join(missing)} in suite '{self.name}'",
                              path=self.path, key="tasks")
        return tuple(known[i] for i in ids)


def bundled_suites() -> list[str]:
    d = resources.files("ddprobe.probes").joinpath("suites")
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def load_suite(name_or_path: str = "coding") -> Suite:
    """A bundled suite by name ("coding") or a suite file by path."""
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        path = p
    else:
        path = Path(str(resources.files("ddprobe.probes") / "suites"
                        / f"{name_or_path}.json"))
        if not path.is_file():
            raise ConfigError(f"no suite named '{name_or_path}' (bundled: "
                              f"{', '.join(bundled_suites())}; or give a .json path)",
                              key="suite")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read suite: {e.strerror}", path=str(path)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON: {e.msg}", path=str(path), line=e.lineno) from None
    return _suite(doc, str(path), text)


def _suite(doc: Any, path: str, text: str) -> Suite:
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list) or not doc["tasks"]:
        raise ConfigError("a suite needs a non-empty 'tasks' list", path=path, key="tasks")
    tasks: list[CodingTask] = []
    seen: set[str] = set()
    for i, t in enumerate(doc["tasks"]):
        if not isinstance(t, dict):
            raise ConfigError(f"task #{i + 1} must be an object", path=path, key="tasks")
        for k in _TASK_KEYS:
            if not isinstance(t.get(k), str) or not t[k].strip():
                raise ConfigError(f"task #{i + 1} ({t.get('id', '?')}) needs a non-empty "
                                  f"string '{k}'", path=path, line=_line_of(text, t.get("id")),
                                  key=k)
        if t["id"] in seen:
            raise ConfigError(f"duplicate task id '{t['id']}'", path=path,
                              line=_line_of(text, t["id"]), key="id")
        seen.add(t["id"])
        tasks.append(CodingTask(**{k: t[k] for k in _TASK_KEYS}))
    version = doc.get("version", 1)
    return Suite(name=str(doc.get("name") or Path(path).stem),
                 version=version if isinstance(version, int) else 1, tasks=tuple(tasks),
                 path=path)


def _line_of(text: str, task_id: Any) -> int | None:
    if not isinstance(task_id, str):
        return None
    i = text.find(json.dumps(task_id))
    return text.count("\n", 0, i) + 1 if i >= 0 else None


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The code in an answer: the last fenced Python block that defines `entry_point`, else
    the first fenced Python block, else the whole answer if it parses as Python."""
    blocks: list[tuple[str, str]] = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    py = [body for tag, body in blocks if tag in _PY_TAGS]
    if entry_point:
        defines = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(entry_point)}\b|"
                             rf"^\s*{re.escape(entry_point)}\s*=", re.M)
        for body in reversed(py):
            if defines.search(body):
                return body
    if py:
        return py[0]
    if blocks:
        return None  # fenced, but in another language
    try:
        with warnings.catch_warnings():  # a SyntaxWarning would print host text on stderr
            warnings.simplefilter("ignore")
            compile(text, "answer", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return text if text.strip() else None


@dataclass(frozen=True)
class Check:
    passed: bool
    reason: str
    code: str | None
    run: TestRun | None = None


async def check_answer(task: CodingTask, answer: str, *,
                       limits: SandboxLimits = SandboxLimits()) -> Check:
    """Extract the code from `answer` and run the task's tests on it in the sandbox."""
    code = extract_code(answer, task.entry_point)
    if code is None:
        return Check(False, "no Python code block in the answer", None)
    run = await run_tests_async(code, task.tests, limits=limits)
    return Check(run.passed, run.reason, code, run)
