"""The bundled coding suite: every reference solution passes its tests in the sandbox, wrong
answers fail, code extraction finds the right block, and a bad suite file is one clear error."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ddprobe.errors import ConfigError
from ddprobe.probes.coding import bundled_suites, check_answer, extract_code, load_suite
from ddprobe.probes.sandbox import run_tests_async

SUITE = load_suite("coding")


def test_suite_shape() -> None:
    assert "coding" in bundled_suites()
    assert SUITE.name == "coding" and SUITE.version == 1
    assert len(SUITE.tasks) >= 20
    ids = [t.id for t in SUITE.tasks]
    assert len(ids) == len(set(ids))
    for t in SUITE.tasks:
        assert t.entry_point in t.solution and t.entry_point in t.tests, t.id
        assert t.entry_point in t.prompt, t.id  # the prompt names what to write
    # a class or two, and recursion, among the tasks
    assert sum(1 for t in SUITE.tasks if f"class {t.entry_point}" in t.solution) >= 2


async def _all(pairs: list[tuple[str, str]]) -> list[tuple[bool, str]]:
    sem = asyncio.Semaphore(8)

    async def one(sol: str, tests: str) -> tuple[bool, str]:
        async with sem:
            r = await run_tests_async(sol, tests)
            return r.passed, r.reason

    return await asyncio.gather(*(one(s, t) for s, t in pairs))


def test_every_reference_solution_passes_in_the_sandbox() -> None:
    results = asyncio.run(_all([(t.solution, t.tests) for t in SUITE.tasks]))
    failed = [(t.id, why) for t, (ok, why) in zip(SUITE.tasks, results, strict=False) if not ok]
    assert failed == []


def test_a_wrong_solution_fails_every_task() -> None:
    """A stub that defines the entry point but returns None must fail every task's tests."""
    stubs = []
    for t in SUITE.tasks:
        kind = "class" if f"class {t.entry_point}" in t.solution else "def"
        stub = (f"class {t.entry_point}:\n    def __init__(self, *a, **k):\n        pass\n"
                if kind == "class" else f"def {t.entry_point}(*a, **k):\n    return None\n")
        stubs.append((stub, t.tests))
    results = asyncio.run(_all(stubs))
    passed = [t.id for t, (ok, _) in zip(SUITE.tasks, results, strict=False) if ok]
    assert passed == []
    assert all(why.startswith("tests: ") for _, why in results), results


def test_an_off_by_one_fails_with_the_failing_assert() -> None:
    task = next(t for t in SUITE.tasks if t.id == "fibonacci")
    wrong = task.solution.replace("for _ in range(n):", "for _ in range(n + 1):")
    assert wrong != task.solution
    chk = asyncio.run(check_answer(task, "```python\n" + wrong + "\n```"))
    assert not chk.passed
    assert chk.reason.startswith("tests: AssertionError") and "tests.py:" in chk.reason


@pytest.mark.parametrize("answer,expected", [
    ("Sure:\n```python\ndef f():\n    return 1\n```\n", "def f():\n    return 1\n"),
    ("```py\ndef f(): return 1\n```", "def f(): return 1\n"),
    # the last block that defines the entry point wins over an earlier usage example
    ("```python\nprint(f())\n```\nthen\n```python\ndef f():\n    return 2\n```",
     "def f():\n    return 2\n"),
    # no block defines it: the first python block
    ("```python\nx = 1\n```\n```python\ny = 2\n```", "x = 1\n"),
    # unterminated fence (max_tokens cut the answer)
    ("```python\ndef f():\n    return 3\n", "def f():\n    return 3\n"),
    # a bare answer that is Python
    ("def f():\n    return 4\n", "def f():\n    return 4\n"),
])
def test_extract_code(answer: str, expected: str) -> None:
    assert extract_code(answer, "f") == expected


@pytest.mark.parametrize("answer", ["", "I cannot help with that.", "```js\nfunction f(){}\n```",
                                    "\ufffd\ufffd the the the"])
def test_extract_code_finds_nothing(answer: str) -> None:
    assert extract_code(answer, "f") is None


def test_check_answer_without_code() -> None:
    chk = asyncio.run(check_answer(SUITE.tasks[0], "The answer is 42."))
    assert not chk.passed and chk.reason == "no Python code block in the answer"


@pytest.mark.parametrize("doc,key", [
    ({"name": "x"}, "tasks"),
    ({"tasks": [{"id": "a", "prompt": "p", "entry_point": "f", "tests": "assert 1"}]},
     "solution"),
    ({"tasks": [{"id": "a", "prompt": "p", "entry_point": "f", "tests": "t", "solution": "s"},
                {"id": "a", "prompt": "p", "entry_point": "f", "tests": "t", "solution": "s"}]},
     "id"),
])
def test_bad_suite_file_is_one_config_error(tmp_path: Path, doc: dict, key: str) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc, indent=1))
    with pytest.raises(ConfigError) as e:
        load_suite(str(p))
    assert e.value.key == key and e.value.path == str(p)


def test_invalid_json_and_unknown_suite(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text('{"tasks": [\n  {"id": 1,}\n]}')
    with pytest.raises(ConfigError) as e:
        load_suite(str(p))
    assert e.value.line == 2
    with pytest.raises(ConfigError, match="no suite named 'nope'"):
        load_suite("nope")
    with pytest.raises(ConfigError, match="unknown task id"):
        SUITE.select(["fizzbuzz", "missing_task"])
