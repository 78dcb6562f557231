"""The layering docs/ARCHITECTURE.md states, checked on the source: which package may import
which (an allow-list table, rendered into ARCHITECTURE.md and compared with it), that the
table has a row for every package, and that what runs on a host is standard-library Python 3.8.

A package is a sub-package of ddprobe or a top-level module (tests/imports_util.py: how the
imports are read). Every import that can run counts, including imports inside functions (a
lazy import still couples two layers); imports under `if TYPE_CHECKING:` are left out here
(they never run), but not from the cycle count of .ci/health.py. A row's entry is a package
(any of its modules) or one module (`hostside.client`); a row keyed by a module (`hostside.
client`) rules that module, the package's row the rest of it. After a change to ALLOWED:
`python tests/test_layers.py --write-doc` renders it into docs/ARCHITECTURE.md.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from imports_util import cycles, ddprobe_imports, imports, modules, package_of

from ddprobe.hostside.client import PROGRAMS, program_source
from ddprobe.remote.agent import AGENT_SRC

ROOT = Path(__file__).resolve().parents[1] / "ddprobe"
DOC = ROOT.parent / "docs" / "ARCHITECTURE.md"

# the leaves any layer may import (they import nothing above them: their own rows below)
LEAVES = ("results", "effective", "errors", "exitcodes", "untrusted", "safeconsole", "yamlio",
          "timestamps", "store", "runmodel", "interrupt", "bundled_files", "intlist",
          "defaults", "httpclients")
# the modules of hostside/ that run in ddprobe's process; the rest are host programs, run only
# on a host (as text), which no other package imports
HOST_LOCAL = ("hostside.client", "hostside.errors", "hostside.patchtext")

# package (or one module) -> what it may import, top of the layers first
ALLOWED: dict[str, tuple[str, ...]] = {
    "__main__": ("entry",),
    "entry": ("cli",),
    "cli": ("context", "playbook", "smoke", "bisect", "cell", "server", "probes", "sources",
            "signatures", "remote", "inventory", "report", "facts", *HOST_LOCAL, *LEAVES),
    "context": ("server", "remote", "inventory", *LEAVES),
    "playbook": ("smoke", "bisect", "cell", "server", "probes", "sources", "remote",
                 "inventory", "report", "facts", "hostside.patchtext", *LEAVES),
    "smoke": ("cell", "server", "probes", "remote", "inventory", "report", "facts", *LEAVES),
    # never report: a bisect returns its run's model, the caller renders it (issue 26, item 2)
    "bisect": ("cell", "server", "probes", "sources", "remote", "inventory", "facts", *LEAVES),
    "cell": ("server", "probes", "signatures", "sources", "remote", "inventory",
             "hostside.client", "hostside.errors", "facts", *LEAVES),
    "server": ("sources", "remote", "inventory", "hostside.client", "hostside.errors",
               *LEAVES),
    "probes": ("results", "errors", "untrusted", "defaults", "httpclients"),
    "sources": ("remote", "inventory", "hostside.client", "hostside.patchtext", *LEAVES),
    "signatures": ("results", "errors", "yamlio", "untrusted"),
    "hostside": (),  # the host programs: the standard library and each other only
    "hostside.client": ("remote", "errors", "untrusted"),
    "hostside.errors": ("errors", "untrusted"),
    "hostside.patchtext": ("errors",),  # also sent to hosts: that import falls back there
    "remote": ("inventory", "errors", "interrupt", "untrusted"),
    "inventory": ("errors", "yamlio"),
    # bisect.cells: report/live.py describes a cell (issue 26, item 2: one model of a run)
    "report": ("bisect.cells", "probes.differential", "sources", "runmodel", "results", "store",
               "errors", "untrusted", "safeconsole"),
    "facts": ("hostside.client", "remote", "inventory", "errors", "untrusted"),
    "results": ("effective",),
    "effective": ("httpclients",),
    "errors": ("exitcodes",),
    "exitcodes": (),
    "untrusted": (),
    "safeconsole": ("untrusted",),
    "yamlio": ("errors",),
    "timestamps": (),
    "store": ("results", "errors", "untrusted", "timestamps"),
    "runmodel": ("results", "store", "untrusted"),
    "interrupt": (),
    "bundled_files": (),
    "intlist": (),
    "defaults": (),
    "httpclients": (),
    "__init__": (),
}

MODULES = sorted(ROOT.rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import that can run."""
    return [(i.line, i.module) for i in imports(path) if not i.typing]


def _row(module: str) -> str:
    """The table row that rules a module: its own, else its package's."""
    short = module.removeprefix("ddprobe.")
    return short if short in ALLOWED else package_of(module)


def _allowed(row: str, dep: str) -> bool:
    short = dep.removeprefix("ddprobe.")
    return any(short == e or short.startswith(e + ".") for e in ALLOWED[row])


def _violations(root: Path = ROOT) -> list[str]:
    bad = []
    for name, path in modules(root).items():
        row = _row(name)
        for ln, dep in ddprobe_imports(path, typing=False, root=root):
            if package_of(dep) != package_of(name) and not _allowed(row, dep):
                bad.append(f"{path.relative_to(root.parent)}:{ln} imports {dep} "
                           f"(not in the row {row!r})")
    return bad


def test_the_table_has_a_row_for_every_package_and_names_only_real_ones() -> None:
    # a rule naming a package that does not exist would pass for ever
    names = {package_of(m) for m in modules()}
    rows = {r for r in ALLOWED if "." not in r}
    assert rows == names, (names - rows, rows - names)
    real = set(modules())
    for row, entries in ALLOWED.items():
        for e in (row, *entries):
            assert f"ddprobe.{e}" in real or e in names, (row, e)


def test_every_import_is_in_the_table() -> None:
    assert _violations() == []


def test_the_table_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "ddprobe"
    for rel, text in {"__init__.py": "", "errors.py": "", "remote/__init__.py": "",
                      "remote/local.py": "from ddprobe.hostside.sourceio import atomic_write\n"
                                         "from ddprobe import errors\n",
                      "hostside/__init__.py": "", "hostside/sourceio.py": "",
                      "probes/__init__.py": "def f():\n    from ddprobe.remote import local\n"
                      }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    assert _violations(pkg) == [
        "ddprobe/probes/__init__.py:2 imports ddprobe.remote.local (not in the row 'probes')",
        "ddprobe/remote/local.py:1 imports ddprobe.hostside.sourceio (not in the row 'remote')"]


def test_the_layers_the_table_allows_have_no_cycle() -> None:
    """The table allows no cycle of packages (an import graph inside it has none either)."""
    graph = {row: {package_of(f"ddprobe.{e}") for e in entries} - {row}
             for row, entries in ALLOWED.items() if "." not in row}
    assert cycles(graph) == []
    # the check can fail: bisect allowed to import report again (before issue 26 item 2)
    assert cycles({**graph, "bisect": graph["bisect"] | {"report"}}) == [["bisect", "report"]]


def render_table() -> str:
    """The table as docs/ARCHITECTURE.md shows it."""
    def cell(entries: tuple[str, ...]) -> str:
        rest = [e for e in entries if e not in LEAVES]
        leaves = [e for e in entries if e in LEAVES]
        parts = [f"`{e}`" for e in rest]
        if len(leaves) == len(LEAVES):
            parts.append("the leaves")
        else:
            parts += [f"`{e}`" for e in leaves]
        return ", ".join(parts) or "nothing of ddprobe"
    lines = [f"The leaves: {', '.join(f'`{x}`' for x in LEAVES)}.", "",
             "| package | may import |", "| --- | --- |"]
    lines += [f"| `{row}` | {cell(entries)} |" for row, entries in ALLOWED.items()]
    return "\n".join(lines) + "\n"


BEGIN = "<!-- layers: generated from tests/test_layers.py ALLOWED; " \
        "`python tests/test_layers.py --write-doc` -->\n"
END = "<!-- layers: end -->\n"


def _doc_block(text: str) -> str:
    assert BEGIN in text and END in text, "docs/ARCHITECTURE.md lost the layers table markers"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_architecture_md_shows_the_table() -> None:
    assert _doc_block(DOC.read_text(encoding="utf-8")) == render_table(), \
        "run `python tests/test_layers.py --write-doc`"


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


if __name__ == "__main__" and sys.argv[1:] == ["--write-doc"]:
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(text.replace(BEGIN + _doc_block(text) + END, BEGIN + render_table() + END),
                   encoding="utf-8")
