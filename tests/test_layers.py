"""The layering docs/ARCHITECTURE.md states, checked on the source: which package may import
which, and that what runs on a host is standard-library Python 3.8.

Each rule is a (package, packages it must not import) pair read with `ast` from every module of
the package, including imports inside functions (a lazy import still couples two layers);
imports under `if TYPE_CHECKING:` are allowed (they never run).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from ddprobe.hostside.agent import AGENT_SRC
from ddprobe.hostside.client import PROGRAMS, program_source

ROOT = Path(__file__).resolve().parents[1] / "ddprobe"

# package (a sub-package or a top-level module of ddprobe) -> what it must not import
MUST_NOT = {
    "server": {"cell", "probes", "bisect", "report", "playbook", "cli", "smoke"},
    "cell": {"bisect", "report", "playbook", "cli", "smoke"},
    "probes": {"server", "cell", "bisect", "report", "playbook", "cli", "sources", "remote"},
    "sources": {"server", "cell", "bisect", "report", "playbook", "cli", "probes"},
    "signatures": {"remote", "hostside", "server", "cell", "bisect", "report", "cli"},
    "remote": {"server", "cell", "bisect", "report", "playbook", "cli", "probes", "sources"},
    "hostside": {"server", "cell", "bisect", "report", "playbook", "cli", "sources"},
    "inventory": {"remote", "server", "cell", "bisect", "report", "playbook", "cli"},
    "bisect": {"cli", "playbook"},
    "report": {"cli", "remote", "server", "cell", "hostside"},
    "playbook": {"cli"},
    "smoke": {"cli", "bisect", "playbook"},
}
LEAVES = {"results", "effective", "errors", "exitcodes", "untrusted", "yamlio", "timestamps",
          "store", "intlist", "defaults"}
LEAF_MAY = {"results": {"effective"}, "errors": {"exitcodes"}, "store": {"errors", "results",
            "untrusted", "timestamps"}, "yamlio": {"errors"}}


def _package(path: Path) -> str:
    return path.relative_to(ROOT).with_suffix("").parts[0]


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import that can run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return out


def _ddprobe_deps(path: Path) -> list[tuple[int, str]]:
    return [(ln, m.split(".")[1]) for ln, m in _imports(path)
            if m.startswith("ddprobe.") and m.split(".")[1] != _package(path)]


MODULES = sorted(ROOT.rglob("*.py"))


def test_the_layer_rules_see_every_package() -> None:
    # a rule naming a package that does not exist would pass for ever
    names = {_package(p) for p in MODULES}
    for pkg, banned in MUST_NOT.items():
        assert pkg in names, pkg
        assert banned <= names | {"smoke"}, banned - names
    assert LEAVES <= names


@pytest.mark.parametrize("pkg", sorted(MUST_NOT))
def test_no_import_runs_back_up(pkg: str) -> None:
    bad = [f"{p.relative_to(ROOT.parent)}:{ln} imports ddprobe.{dep}"
           for p in MODULES if _package(p) == pkg
           for ln, dep in _ddprobe_deps(p) if dep in MUST_NOT[pkg]]
    assert bad == []


def test_leaf_modules_import_nothing_above_them() -> None:
    bad = [f"{p.relative_to(ROOT.parent)}:{ln} imports ddprobe.{dep}"
           for p in MODULES if _package(p) in LEAVES
           for ln, dep in _ddprobe_deps(p) if dep not in LEAF_MAY.get(_package(p), set())]
    assert bad == []


def test_nothing_imports_the_cli_but_the_entry_point() -> None:
    bad = [f"{p.relative_to(ROOT.parent)}:{ln}" for p in MODULES
           if _package(p) not in {"cli", "__main__", "entry"}
           for ln, dep in _ddprobe_deps(p) if dep == "cli"]
    assert bad == []


def test_only_the_testbed_commands_and_its_prepare_step_import_the_testbed() -> None:
    users = {p.relative_to(ROOT.parent).as_posix() for p in MODULES
             for _, m in _imports(p) if m == "ddtestbed" or m.startswith("ddtestbed.")}
    assert users <= {"ddprobe/cli/testbed.py", "ddprobe/server/prepare.py"}, users


def _host_texts() -> list[tuple[str, str]]:
    texts = [(f"{name} program", program_source(name)) for name in PROGRAMS]
    texts += [(f"{name} program, op {op}", program_source(name, op))
              for name, prog in PROGRAMS.items() for op in prog.op_parts]
    texts.append(("agent", AGENT_SRC))
    return texts


def test_every_host_module_is_sent_by_a_program() -> None:
    """Every module of hostside/ but the client's own (client, errors, agent: the agent is sent
    as AGENT_SRC) is part of a program, so the check below reads it as a host would."""
    sent = {part for prog in PROGRAMS.values() for part in prog.parts}
    local = {"__init__.py", "client.py", "errors.py", "agent.py"}
    assert {p.name for p in (ROOT / "hostside").glob("*.py")} - local == sent
    assert {"preflight", "facts", "kernel_log"} <= set(PROGRAMS)
    assert all(prog.parts[0] == "common.py" for prog in PROGRAMS.values())


HOST_TEXTS = _host_texts()


def _top_level_names(text: str) -> list[str]:
    out: list[str] = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append(node.target.id)
    return out


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_no_two_modules_of_a_program_define_one_name(program: str) -> None:
    """A program's modules are concatenated into one text: a name defined twice would be
    the later module's silently (one `main`, one `emit`, one `OpError` for all)."""
    where: dict[str, list[str]] = {}
    for part in PROGRAMS[program].parts:
        for name in _top_level_names((ROOT / "hostside" / part).read_text("utf-8")):
            where.setdefault(name, []).append(part)
    assert {n: p for n, p in where.items() if len(p) > 1} == {}
    # the check can fail: a module read twice defines `main` twice
    text = (ROOT / "hostside" / "common.py").read_text("utf-8")
    assert "main" in _top_level_names(text) and _top_level_names(text + text).count("main") == 2


@pytest.mark.parametrize("name,text", HOST_TEXTS, ids=[n for n, _ in HOST_TEXTS])
def test_host_programs_are_python_3_8_standard_library(name: str, text: str) -> None:
    """What is sent to a host must run on its interpreter (3.8+) with nothing installed: the
    syntax parses as 3.8, and every import is the standard library or the program's own
    modules (concatenated into the same text), or sits in a try that falls back."""
    tree = ast.parse(text, feature_version=(3, 8))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Try, ast.If)):
            for sub in node.body:
                guarded.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    bad = []
    for node in ast.walk(tree):
        mods = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                and node.level == 0 else
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for m in mods:
            top = m.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if node.lineno in guarded:  # an optional import (sglang, torch, ddprobe's own)
                continue
            bad.append(f"{name}: line {node.lineno} imports {m}")
    assert bad == []


# ----- the tests themselves: helpers live in plain modules, never in another test module -----

TESTS = Path(__file__).resolve().parent


def _test_module_imports(paths: list[Path], root: Path = TESTS.parent
                         ) -> list[str]:
    """`path:line imports test_x` for every import of a test module (`test_*`, the names pytest
    collects) by another module, lazy ones inside functions included. Importing a test module
    runs its collection side effects and makes pytest see its fixtures twice: shared helpers
    belong in tests/*_util.py or conftest.py."""
    bad = []
    for p in paths:
        for ln, mod in _imports(p):
            if mod.split(".")[-1].startswith("test_") or mod.split(".")[0].startswith("test_"):
                bad.append(f"{p.relative_to(root)}:{ln} imports {mod}")
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # importlib.import_module("test_x") / __import__("test_x")
            if (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                    and node.args[0].value.split(".")[-1].startswith("test_")
                    and ast.unparse(node.func).split(".")[-1] in {"import_module",
                                                                   "__import__"}):
                bad.append(f"{p.relative_to(root)}:{node.lineno} imports "
                           f"{node.args[0].value}")
    return bad


def test_no_test_module_imports_another_test_module() -> None:
    paths = sorted(p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts)
    assert len(paths) > 50 and TESTS / "conftest.py" in paths
    assert _test_module_imports(paths) == []


def test_the_test_import_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    bad = tmp_path / "tests" / "test_a.py"
    bad.write_text("import os\nfrom bisect_util import TASKS\n\n\ndef test_x():\n"
                   "    from test_bisect_ssh import Site\n    import importlib\n"
                   "    importlib.import_module('test_sanitize_cell')\n")
    ok = tmp_path / "tests" / "test_b.py"
    ok.write_text("from server_util import procs_with\nimport testbed_util\n")
    assert _test_module_imports([bad, ok], root=tmp_path) == [
        "tests/test_a.py:6 imports test_bisect_ssh", "tests/test_a.py:8 imports test_sanitize_cell"]


def _fixtures_of(path: Path) -> set[str]:
    """Names of the functions a module decorates with pytest.fixture."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)}


def _imported_fixtures(tests: Path) -> list[str]:
    """`path:line imports fixture f from m` for a test module that imports a fixture from a
    helper module: pytest then registers a copy per importing module (a session-scoped one runs
    once per module). Shared fixtures reach the tests through conftest.py."""
    helpers = {p.stem: _fixtures_of(p) for p in tests.glob("*.py")
               if not p.name.startswith("test_") and p.name != "conftest.py"}
    bad = []
    for p in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in helpers and node.level == 0:
                bad += [f"{p.relative_to(tests.parent)}:{node.lineno} imports fixture {a.name} "
                        f"from {node.module}" for a in node.names if a.name in helpers[node.module]]
    return bad


def test_no_test_module_imports_a_fixture_from_a_helper(tmp_path: Path) -> None:
    assert "tb_prefix" in _fixtures_of(TESTS / "server_util.py")
    assert _imported_fixtures(TESTS) == []
    # the check can fail
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "h_util.py").write_text(
        "import pytest\n\n\n@pytest.fixture(scope='session')\ndef pre():\n    return 1\n\n\n"
        "def plain():\n    return 2\n")
    (tmp_path / "tests" / "test_c.py").write_text("from h_util import plain, pre\n")
    assert _imported_fixtures(tmp_path / "tests") == [
        "tests/test_c.py:1 imports fixture pre from h_util"]
