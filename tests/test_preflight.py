"""The preflight: planned launches parsed by the host's own argument handling (here the
testbed's ServerArgs, which applies SGLang's post-init rewrites and assertions), before any
restart; cells whose effective config is not their label are refused, never run.

Expected answers, written before running:
- DDTREE b8/b16 on the testbed: runs as planned (tree budget b, draft tokens b+1, graphs on,
  max bs 64 from the scenario, context 32768).
- EAGLE steps 3 topk 1, budget_flag draft_tokens, b16: the server would run draft tokens 4
  (steps + 1): refused, the message quotes SGLang's warning and names `budget_flag: steps`.
- the same host with `budget_flag: steps`: b16 runs steps 16, draft tokens 17: as planned.
- EAGLE with steps unset (hosts.example.yaml's default): AssertionError in server_args.py,
  refused with the whole assert statement and the hint to set server.steps/topk.
- `--attention-backend torch_native` with graphs: the server turns graphs off: refused.
- an install whose server_args imports a module the host lacks: refused (config_error), the
  module named; an install that needs torch the host lacks: not run, assumption named.
- a bisect whose every budget is refused: config_error, 0 restarts, exit 7; with
  `--exit-protocol bisect` exit 125. `--plan` prints the preflight per budget.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SshServer
from server_util import TASKS, reap, tb_env, tb_server
from testbed_util import free_port

from ddprobe import remote
from ddprobe.bisect.preflight import plan_preflight
from ddprobe.cell.experiment import ProbeOptions, run_cell
from ddprobe.cli import main
from ddprobe.errors import RefusedError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config, Outcome
from ddprobe.server.launch import build_launch
from ddprobe.server.preflight import clear_cache, preflight_launch, run_preflight

PROBE = ProbeOptions(tasks=TASKS[:1], max_tokens=32, concurrency=1)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def _local(prefix: Path, tmp: Path, **server: object) -> Host:
    s = tb_server(free_port(), tmp / "work", **server)
    return Host(name="tb", host="localhost", python=sys.executable, package="ddtestbed",
                env=tuple(tb_env(prefix).items()), server=s, transport="local", source="test")


def _eagle(host: Host, **kw: object) -> Host:
    fields = {"algorithm": "EAGLE", "budget_flag": "draft_tokens", "steps": 3, "topk": 1,
              **kw}
    return replace(host, server=replace(host.server, **fields))  # type: ignore[arg-type]


def _check(host: Host, cfg: Config) -> object:
    with remote.connect(host, remote.RemoteOptions()) as r:  # a local host
        return preflight_launch(r, host, build_launch(host, cfg))


def test_ddtree_runs_as_planned(ssh_opts, tb_prefix: Path, tmp_path: Path) -> None:
    host = _local(tb_prefix, tmp_path)
    with remote.connect(host, ssh_opts) as r:
        pf = plan_preflight(r, host, budgets=(8, 16), base=Config(budget=8))
    assert pf.ran and not pf.refused and pf.entry.endswith(":prepare_server_args")
    e16 = pf.effective[16]
    assert (e16.tree_budget, e16.draft_tokens, e16.cuda_graph) == (16, 17, True)
    assert e16.cuda_graph_max_bs == 64 and e16.context_length == 32768
    assert e16.source == "preflight"
    eager = pf.results["b8-eager"].effective
    assert eager is not None and eager.cuda_graph is False
    assert any("b16-graph: DDTREE draft 17" in ln for ln in pf.lines())


def test_eagle_topk1_is_refused_not_run_under_a_wrong_label(tb_prefix: Path,
                                                             tmp_path: Path) -> None:
    host = _eagle(_local(tb_prefix, tmp_path))
    with pytest.raises(RefusedError) as e:
        _check(host, Config(budget=16))
    msg = str(e.value)
    assert "draft tokens 4 (asked 17)" in msg
    assert "adjusted to speculative_num_steps + 1" in msg and "budget_flag: steps" in msg
    # the chain-length mapping is what topk 1 can sweep
    chain = _eagle(_local(tb_prefix, tmp_path), budget_flag="steps")
    ok = _check(chain, Config(budget=16))
    assert ok.effective.num_steps == 16 and ok.effective.draft_tokens == 17  # type: ignore


def test_steps_unset_is_the_assertion_sglang_dies_on(tb_prefix: Path,
                                                     tmp_path: Path) -> None:
    host = _eagle(_local(tb_prefix, tmp_path), steps=None, topk=None)
    with pytest.raises(RefusedError) as e:
        _check(host, Config(budget=8))
    msg = str(e.value)
    assert "AssertionError" in msg and "speculative_eagle_topk is None" in msg
    assert "set server.steps" in msg and "server_args.py:" in msg


def test_backend_that_disables_graphs_is_refused(tb_prefix: Path,
                                                 tmp_path: Path) -> None:
    host = _local(tb_prefix, tmp_path)
    with pytest.raises(RefusedError, match=r"CUDA graphs off \(asked on\)"):
        _check(host, Config(budget=8, backend="torch_native"))
    eager = _check(host, Config(budget=8, graph=False, backend="torch_native"))
    assert eager.effective.attention_backend == "torch_native"  # type: ignore[attr-defined]


def _fake_install(tmp: Path, name: str, body: str) -> Path:
    d = tmp / "site" / name / "srt"
    d.mkdir(parents=True)
    (d.parent / "__init__.py").write_text("")
    (d / "__init__.py").write_text("")
    (d / "server_args.py").write_text(body)
    return tmp / "site"


@pytest.mark.parametrize("missing,status", [("ddprobe_no_such_dep", "rejected"),
                                            ("torch", "not_run")])
def test_an_install_that_cannot_be_imported(ssh_opts, tmp_path: Path, missing: str,
                                            status: str) -> None:
    site = _fake_install(tmp_path, "fakesgl", f"import {missing}\n")
    host = Host(name="h", python=sys.executable, package="fakesgl",
                env=(("PYTHONPATH", str(site)),),
                server=ServerSettings(model_path="m", algorithm="EAGLE", steps=3, topk=4),
                transport="local")
    ln = build_launch(host, Config(budget=8))
    with remote.connect(host, ssh_opts) as r:
        res = run_preflight(r, host, [ln])[0]
        assert res.status == status, res
        assert missing in res.message
        if status == "rejected":
            assert "cannot be imported" in res.message and "fails the same way" in res.message
            with pytest.raises(RefusedError):
                preflight_launch(r, host, ln)
        else:
            assert "assumption: the server applies the launch flags as given" in res.message
            out = preflight_launch(r, host, ln)
            note = out.notes[-1]
            assert out.effective is None and note.startswith("preflight not run: importing")
            assert "no speculative rewrite found" in note and "assumption:" in note


def test_the_program_keeps_stdout_to_its_answer(ssh_opts, tmp_path: Path) -> None:
    """What the imported code prints never reaches the answer line."""
    site = _fake_install(tmp_path, "noisy", (
        "import dataclasses\nprint('DDPROBE-PREFLIGHT {\"ok\": false}')\n"
        "print('{\"ok\": false, \"error\": {\"kind\": \"io\"}}')\n"  # the answer line's form
        "@dataclasses.dataclass\nclass ServerArgs:\n    speculative_num_draft_tokens: int = 0\n"
        "def prepare_server_args(argv):\n    print('hello from sglang')\n"
        "    print('{\"ok\": true, \"result\": {}}')\n"
        "    return ServerArgs(int(argv[1]))\n"))
    host = Host(name="h", python=sys.executable, package="noisy",
                env=(("PYTHONPATH", str(site)),), server=ServerSettings(model_path="m"),
                transport="local")
    ln = build_launch(host, Config(budget=8))
    ln = replace(ln, server_args=("--speculative-num-draft-tokens", "9"))
    with remote.connect(host, ssh_opts) as r:
        res = run_preflight(r, host, [ln])[0]
    assert res.status == "ok" and res.effective is not None
    assert res.effective.draft_tokens == 9


def test_refused_cell_never_restarts(ssh_opts, tb_prefix: Path, tmp_path: Path) -> None:
    host = _eagle(_local(tb_prefix, tmp_path))
    with remote.connect(host, ssh_opts) as r:
        cell = run_cell(r, host, Config(budget=16), probe=PROBE)
    assert cell.outcome is Outcome.REFUSED and "wrong label" in (cell.error or "")
    assert "restart" not in cell.timings and not (tmp_path / "work" / "server.json").exists()


@pytest.mark.ssh
def test_preflight_over_ssh(ssh_opts, make_host: Callable[..., Host], tb_prefix: Path,
                            tmp_path: Path) -> None:
    host = make_host("gpu-a", python=sys.executable, package="ddtestbed",
                     env=tb_env(tb_prefix), server=tb_server(free_port(), tmp_path / "work"))
    with remote.connect(host, ssh_opts) as r:
        pf = plan_preflight(r, host, budgets=(8, 32), base=Config(budget=8, max_bs=16))
        assert pf.ran and pf.effective[32].cuda_graph_max_bs == 16
        assert pf.effective[32].tree_budget == 32
        eagle = _eagle(host)
        with pytest.raises(RefusedError, match="wrong label"):
            preflight_launch(r, eagle, build_launch(eagle, Config(budget=32)))


def _inventory(tmp: Path, sshd: SshServer, prefix: Path, server: str) -> Path:
    env = "".join(f"      {k}: '{v}'\n" for k, v in tb_env(prefix).items())
    p = tmp / "hosts.yaml"
    p.write_text(f"hosts:\n  gpu:\n    host: {sshd.alias}\n    python: {sys.executable}\n"
                 f"    package: ddtestbed\n    env:\n{env}    server:\n"
                 f"      port: {free_port()}\n      model_path: ddtestbed/tiny-coder\n"
                 f"      draft_model_path: ddtestbed/tiny-drafter\n      max_bs: 64\n"
                 f"      workdir: {tmp / 'work'}\n      health_timeout: 30\n"
                 f"      stop_timeout: 5\n" + server)
    return p


@pytest.mark.ssh
def test_bisect_all_refused_is_config_error_before_any_restart(
        sshd: SshServer, tb_prefix: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    inv = _inventory(tmp_path, sshd, tb_prefix,
                     "      algorithm: EAGLE\n      steps: 3\n      topk: 1\n")
    base = ["-i", str(inv), "--ssh-config", str(sshd.ssh_config), "bisect", "-H", "gpu",
            "--budgets", "8,16"]
    try:
        code = main([*base, "--plan"])
        out = capsys.readouterr().out
        assert code == 0 and "REFUSED" in out and "draft tokens 4 (asked 9)" in out
        code = main([*base, "--json", "--tasks", TASKS[0]])
        doc = json.loads(capsys.readouterr().out)
        assert code == ExitCode.REFUSED, doc
        assert doc["restarts_used"] == 0
        assert {v["kind"] for v in doc["verdicts"]} == {"config_error"}
        assert any("wrong label" in e["summary"] for v in doc["verdicts"]
                   for e in v["evidence"]), doc["verdicts"]
        code = main([*base, "--exit-protocol", "bisect", "--tasks", TASKS[0]])
        capsys.readouterr()
        assert code == ExitCode.BISECT_SKIP
    finally:
        reap(tmp_path / "work")


def test_a_hanging_argument_handler_is_not_an_infrastructure_error(ssh_opts,
                                                                    tmp_path: Path) -> None:
    site = _fake_install(tmp_path, "slowsgl", "import time\n"
                         "def prepare_server_args(argv):\n    time.sleep(60)\n")
    host = Host(name="h", python=sys.executable, package="slowsgl",
                env=(("PYTHONPATH", str(site)),), server=ServerSettings(model_path="m"),
                transport="local")
    with remote.connect(host, ssh_opts) as r:
        res = run_preflight(r, host, [build_launch(host, Config(budget=8))], timeout=2)[0]
    assert res.status == "not_run" and "did not answer within 2 s" in res.message


def test_context_length_from_the_model_config_when_the_server_leaves_it_unset(
        ssh_opts, tmp_path: Path) -> None:
    """Real ServerArgs keep context_length None unless given; SGLang reads the model's
    config.json (max_position_embeddings x a rope factor): so does the preflight."""
    site = _fake_install(tmp_path, "ctxsgl", (
        "import dataclasses\n@dataclasses.dataclass\nclass ServerArgs:\n"
        "    model_path: str = ''\n    context_length: int = None\n"
        "def prepare_server_args(argv):\n    return ServerArgs(argv[1])\n"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "max_position_embeddings": 8192, "rope_scaling": {"rope_type": "yarn", "factor": 4}}))
    host = Host(name="h", python=sys.executable, package="ctxsgl",
                env=(("PYTHONPATH", str(site)),), server=ServerSettings(model_path=str(model)),
                transport="local")
    ln = build_launch(host, Config(budget=8))
    with remote.connect(host, ssh_opts) as r:
        res = run_preflight(r, host, [ln])[0]
    assert res.status == "ok" and res.effective is not None
    assert res.effective.context_length == 32768
