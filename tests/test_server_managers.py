"""The systemd and docker managers: the drop-in text and docker argv they generate, and a live
run where this machine can (systemd as PID 1 and root; a docker engine) - else a skip naming
why."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from server_util import tb_env, tb_server
from testbed_util import free_port

from ddprobe import remote
from ddprobe.cell.health import wait_healthy
from ddprobe.errors import ConfigError
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config
from ddprobe.server import build_launch, get_manager
from ddprobe.server.docker import DockerManager, run_argv
from ddprobe.server.systemd import dropin_text, env_line, parse_unit, systemd_quote


def _host(**kw: object) -> Host:
    s = ServerSettings(model_path="/m/Kimi K2.6", algorithm="DDTREE", budget_flag="ddtree",
                       env=(("SGLANG_DDTREE_MAX_TOPK", "8"), ("NOTE", 'say "100%" $HOME')))
    return Host(name="b300", python="/opt/venv/bin/python", transport="local",
                server=replace(s, **kw))


def test_systemd_dropin_overrides_execstart_and_quotes_every_word() -> None:
    h = _host(unit="sglang")
    launch = build_launch(h, Config(16, graph=False, extra_args=("--json-model-override-args",
                                                                 '{"a": "b c"}')))
    text = dropin_text(launch, unit="sglang.service")
    lines = text.splitlines()
    assert lines[0].startswith("# Written by ddprobe for cell b16-eager-x")
    assert "[Service]" in lines and "Restart=no" in lines
    assert lines[-2] == "ExecStart="  # clears the unit's own ExecStart
    assert lines[-1].startswith("ExecStart=/opt/venv/bin/python -m sglang.launch_server "
                                '--model-path "/m/Kimi K2.6" ')
    assert '"{\\"a\\": \\"b c\\"}"' in lines[-1] and "--disable-cuda-graph" in lines[-1]
    assert 'Environment="SGLANG_DDTREE_MAX_TOPK=8"' in lines
    assert 'Environment="NOTE=say \\"100%%\\" $HOME"' in lines  # no specifier expansion


def test_systemd_quoting_rules() -> None:
    assert systemd_quote("--port") == "--port"
    assert systemd_quote("50%") == '"50%%"'  # % is a specifier in ExecStart=
    assert systemd_quote("$HOME") == '"$$HOME"'  # and $ an environment variable
    assert systemd_quote("a\nb") == '"a\\nb"'
    rel = build_launch(replace(_host(), python="python3"), Config(8))
    assert "ExecStart=/usr/bin/env python3 -m" in dropin_text(rel, unit="u.service")
    assert parse_unit("sglang") == ("sglang.service", False)
    assert parse_unit("user:sgl@1.service") == ("sgl@1.service", True)
    with pytest.raises(ConfigError, match="server.unit"):
        parse_unit("bad unit;rm")
    with pytest.raises(ConfigError, match="server.env"):
        env_line("BAD-NAME", "x")


def test_docker_run_argv(ssh_opts) -> None:
    h = _host(manager="docker", container="sglang-ddprobe", image="lmsysorg/sglang:v0.5.10")
    mgr = DockerManager(remote.connect(h, ssh_opts), h)
    launch = build_launch(h, Config(8, max_bs=16), template=mgr.template())
    argv = run_argv(launch, container="sglang-ddprobe", image="lmsysorg/sglang:v0.5.10")
    assert argv[:5] == ["docker", "run", "-d", "--name", "sglang-ddprobe"]
    assert argv[5:7] == ["--label", "ddprobe.config=b8-graph-bs16"]
    assert ["--gpus", "all"] == argv[7:9] and "--network" in argv
    # by name only: docker takes the value from its environment, never from a command line
    assert argv[argv.index("-e") + 1] == "SGLANG_DDTREE_MAX_TOPK"
    assert not any("=8" in w for w in argv)
    i = argv.index("lmsysorg/sglang:v0.5.10")
    assert argv[i + 1:i + 4] == ["python3", "-m", "sglang.launch_server"]  # inside the image
    assert argv[-2:] == ["--cuda-graph-max-bs", "16"]


def test_manager_config_errors(ssh_opts) -> None:
    r = remote.connect(_host(), ssh_opts)
    with pytest.raises(ConfigError, match="server.unit"):
        get_manager(r, _host(manager="systemd"))
    with pytest.raises(ConfigError, match="server.image"):
        get_manager(r, _host(manager="docker", container="c"))
    with pytest.raises(ConfigError, match="server.container"):
        get_manager(r, _host(manager="docker", container="no spaces", image="i"))
    with pytest.raises(ConfigError, match="unknown server manager"):
        get_manager(r, _host(manager="k8s"))


def _systemd_live() -> str | None:
    try:
        comm = Path("/proc/1/comm").read_text().strip()
    except OSError:
        comm = "?"
    if comm != "systemd":
        return f"systemd is not PID 1 on this machine (PID 1 is {comm!r}): no unit can run"
    if os.geteuid() != 0:
        return "not root: cannot install a test unit under /etc/systemd/system"
    return None


def _docker_live() -> str | None:
    if not shutil.which("docker"):
        return "no docker client on this machine"
    res = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        return f"no docker engine reachable: {(res.stderr or res.stdout).strip()[:160]}"
    if subprocess.run(["docker", "image", "inspect", "python:3.11-slim"],
                      capture_output=True, timeout=30).returncode != 0:
        return "docker image python:3.11-slim is not present (tests never pull images)"
    return None


def test_systemd_live(ssh_opts, tb_prefix: Path, tmp_path: Path) -> None:
    why = _systemd_live()
    if why:
        pytest.skip(why)
    unit = f"ddprobe-test-{os.getpid()}"
    Path(f"/etc/systemd/system/{unit}.service").write_text(
        "[Service]\nExecStart=/bin/sleep infinity\n")
    h = Host(name="sd", python=sys.executable, package="ddtestbed", transport="local",
             env=tuple(tb_env(tb_prefix).items()),
             server=tb_server(free_port(), tmp_path, manager="systemd", unit=unit))
    # the unit does not inherit our environment: pass the testbed's through the drop-in
    h = replace(h, server=replace(h.server, env=h.env))
    try:
        with remote.connect(h, ssh_opts) as r:
            mgr = get_manager(r, h)
            mgr.start(build_launch(h, Config(8)))
            res = wait_healthy(f"http://127.0.0.1:{h.server.port}", mgr.peek, timeout=30)
            assert res.healthy, res.log[-2000:]
            assert mgr.status().running and "ready to roll" in mgr.logs()
            info = mgr.stop()
            assert info.was_running and info.port_free
            assert not Path(f"/etc/systemd/system/{unit}.service.d/ddprobe.conf").exists()
    finally:
        Path(f"/etc/systemd/system/{unit}.service").unlink(missing_ok=True)
        subprocess.run(["systemctl", "daemon-reload"], check=False)


# A stand-in server for the image (the testbed is not in it): answers the health endpoints.
HEALTHY_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path.startswith("/health") else 404)
        self.end_headers()
print("The server is fired up and ready to roll!", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_docker_live(ssh_opts, tmp_path: Path) -> None:
    why = _docker_live()
    if why:
        pytest.skip(why)
    name = f"ddprobe-test-{os.getpid()}"
    port = free_port()
    h = Host(name="dk", transport="local",
             server=ServerSettings(port=port, model_path="m", manager="docker", container=name,
                                   image="python:3.11-slim", workdir=str(tmp_path)))
    with remote.connect(h, ssh_opts) as r:
        mgr = get_manager(r, h)
        launch = build_launch(h, Config(8), template=mgr.template())
        launch = replace(launch, argv=("python3", "-u", "-c", HEALTHY_SERVER, str(port)))
        try:
            mgr.start(launch)
            res = wait_healthy(f"http://127.0.0.1:{port}", mgr.peek, timeout=60)
            assert res.healthy, res.log
            st = mgr.status()
            assert st.running and st.config_key == "b8-graph"
            assert "ready to roll" in mgr.logs()
        finally:
            info = mgr.stop()
        assert info.was_running and info.port_free
        assert not mgr.status().running
