"""Helpers to run a real testbed server from an installed copy (reusable by any test).

    prefix = install_prefix(tmp_path_factory.mktemp("tb"))
    with running_testbed(prefix, "--speculative-algorithm", "DDTREE",
                         "--speculative-ddtree-budget", "8", scenario="seed") as server:
        out = generate(server.url, chat_text("hi"), max_new_tokens=32)

The server runs as `python -m ddtestbed.launch_server` with PYTHONPATH=prefix and cwd in the
prefix, so nothing from ddprobe's checkout is imported by it.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ddtestbed.install import sync_testbed

REPO = Path(__file__).resolve().parents[1]
REAL_SUITE = REPO / "ddprobe" / "probes" / "suites" / "coding.json"

# Used when ddprobe's coding suite is not there yet; same format as the real one.
FIXTURE_TASKS = [
    {"id": "add", "entry_point": "add",
     "prompt": "Write a Python function `add(a, b)` that returns the sum of a and b.",
     "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0",
     "solution": "def add(a, b):\n    return a + b"},
    {"id": "fizzbuzz", "entry_point": "fizzbuzz",
     "prompt": "Write a Python function `fizzbuzz(n)` that returns 'Fizz' for multiples of 3, "
               "'Buzz' for multiples of 5, 'FizzBuzz' for multiples of both, else str(n).",
     "tests": "assert fizzbuzz(3) == 'Fizz'\nassert fizzbuzz(10) == 'Buzz'\n"
              "assert fizzbuzz(15) == 'FizzBuzz'\nassert fizzbuzz(7) == '7'",
     "solution": "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n"
                 "    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n"
                 "        return 'Buzz'\n    return str(n)"},
    {"id": "is_palindrome", "entry_point": "is_palindrome",
     "prompt": "Write a Python function `is_palindrome(s)` that returns True if the string s "
               "reads the same forwards and backwards, ignoring case and non-alphanumeric "
               "characters.",
     "tests": "assert is_palindrome('A man, a plan, a canal: Panama')\n"
              "assert not is_palindrome('hello')",
     "solution": "def is_palindrome(s):\n    cleaned = [c.lower() for c in s if c.isalnum()]\n"
                 "    return cleaned == cleaned[::-1]"},
]


def write_fixture_suite(path: Path) -> Path:
    path.write_text(json.dumps({"name": "coding", "version": 1, "tasks": FIXTURE_TASKS}))
    return path


def suite_for_tests(tmp: Path) -> Path:
    """ddprobe's real coding suite if present, else the fixture suite."""
    return REAL_SUITE if REAL_SUITE.is_file() else write_fixture_suite(tmp / "coding.json")


def load_tasks(suite: Path) -> list[dict[str, Any]]:
    return json.loads(suite.read_text())["tasks"]


def installed_tasks(prefix: Path, limit: int | None = 5) -> list[dict[str, Any]]:
    """The coding tasks of an install; by default the first five, as in the seed's 5/5."""
    tasks = load_tasks(prefix / "ddtestbed" / "data" / "coding.json")
    return tasks[:limit] if limit else tasks


def install_prefix(prefix: Path, suite: Path | None = None) -> Path:
    """Install the testbed into `prefix` (suite: the real one or the fixture)."""
    prefix.mkdir(parents=True, exist_ok=True)
    sync_testbed(prefix, suite=suite or suite_for_tests(prefix.parent))
    return prefix


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestbedDied(AssertionError):
    __test__ = False  # not a pytest test class


@dataclass
class TestbedServer:
    __test__ = False  # not a pytest test class

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    argv: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 15.0) -> float:
        """Seconds until /health answered 200; raises TestbedDied if the process exits."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise TestbedDied(f"testbed exited with {self.proc.returncode}:\n"
                                  f"{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return time.perf_counter() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"testbed not healthy after {timeout}s:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_testbed(prefix: Path, *args: str, scenario: str = "seed", time_scale: float = 0.001,
                  startup_scale: float | None = 0.0002, env: dict[str, str] | None = None,
                  port: int | None = None, model_path: str = "sim") -> TestbedServer:
    """Start `python -m ddtestbed.launch_server` from the installed copy (no health wait).
    `startup_scale` shortens the simulated load/capture (None: same as `time_scale`)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "ddtestbed.launch_server", "--model-path", model_path,
            "--port", str(port), "--testbed-scenario", scenario,
            "--testbed-time-scale", str(time_scale)]
    if startup_scale is not None:
        argv += ["--testbed-startup-scale", str(startup_scale)]
    argv += list(args)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DDTESTBED_")}
    full_env.update(PYTHONPATH=str(prefix), PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    log_path = prefix.parent / f"testbed-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=prefix, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT)
    return TestbedServer(proc, port, log_path, argv)


@contextmanager
def running_testbed(prefix: Path, *args: str, wait: bool = True, timeout: float = 15.0,
                    **kwargs: Any) -> Iterator[TestbedServer]:
    server = start_testbed(prefix, *args, **kwargs)
    try:
        if wait:
            server.wait_healthy(timeout)
        yield server
    finally:
        server.stop()


def ddtree(budget: int, *, graph: bool = True) -> list[str]:
    """Launch flags for a DDTree config, the way ddprobe builds them."""
    flags = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", str(budget)]
    return flags + ([] if graph else ["--disable-cuda-graph"])


def chat_text(user: str) -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def generate(url: str, text: str, *, max_new_tokens: int = 256, temperature: float = 0.0,
             timeout: float = 60.0, **sampling: Any) -> dict[str, Any]:
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens,
                                              "temperature": temperature, **sampling}}
    res = httpx.post(url + "/generate", json=body, timeout=timeout)
    res.raise_for_status()
    return res.json()


def chat(url: str, user: str, *, max_tokens: int = 512, timeout: float = 60.0,
         **extra: Any) -> dict[str, Any]:
    body = {"model": "sim", "messages": [{"role": "user", "content": user}], "temperature": 0,
            "max_tokens": max_tokens, **extra}
    res = httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)
    res.raise_for_status()
    return res.json()


def extract_code(content: str) -> str:
    if "```python\n" in content and content.rstrip().endswith("```"):
        return content.split("```python\n", 1)[1].rsplit("```", 1)[0]
    return content


def passes(task: dict[str, Any], content: str) -> bool:
    """Run a task's tests against the answer in a separate interpreter."""
    src = extract_code(content) + "\n\n" + task["tests"] + "\n"
    res = subprocess.run([sys.executable, "-c", src], capture_output=True, timeout=20)
    return res.returncode == 0


def coding_score(url: str, tasks: Sequence[dict[str, Any]],
                 max_tokens: int = 512) -> tuple[int, list[float]]:
    """(tasks passed, accept length per task) over chat completions + /generate meta.
    Garbage never stops by itself: pass a small `max_tokens` where garbage is expected."""
    passed, accepts = 0, []
    for task in tasks:
        answer = chat(url, task["prompt"], max_tokens=max_tokens)
        content = answer["choices"][0]["message"]["content"]
        passed += passes(task, content)
        meta = generate(url, chat_text(task["prompt"]), max_new_tokens=max_tokens)["meta_info"]
        accepts.append(meta.get("spec_accept_length", 0.0))
    return passed, accepts


def scenario_host(scenario: str, prefix: Path, tmp: Path) -> Any:  # -> ddprobe Host
    """The built-in testbed host running `scenario` from `prefix`, on its own port and
    workdir under `tmp`, with the scenario's own (production) max bs."""
    from dataclasses import replace

    from ddprobe.inventory import builtin_testbed
    h = builtin_testbed()
    env = tuple((k, str(prefix) if k == "PYTHONPATH" else scenario if k ==
                 "DDTESTBED_SCENARIO" else v) for k, v in h.env)
    server = replace(h.server, port=free_port(), args=("--testbed-scenario", scenario),
                     workdir=str(tmp / "work"), prepare="", health_timeout=10.0,
                     max_bs=None)  # the scenario's own max bs is its production one
    return replace(h, env=env, server=server)
