"""Inventory parsing and its error messages, through the real CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[1]


def run_cli(args, capsys):
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_example_inventory_parses_every_documented_key():
    inv = load_inventory(str(ROOT / "hosts.example.yaml"))
    b300 = inv.get("b300")
    assert b300.host == "86.38.182.109" and b300.user == "root" and b300.port == 22
    assert b300.python == "/root/venv_sglang211/bin/python"
    assert b300.server.budget_flag == "ddtree" and b300.server.max_bs == 64
    assert b300.server.model_path == "moonshotai/Kimi-K2.6"
    assert b300.labels_dict["arch"] == "sm_103"
    rtx = inv.get("rtxpro")
    assert rtx.server.manager == "systemd" and rtx.server.max_bs == 32 and rtx.user == "ubuntu"
    assert [h.name for h in inv.select("blackwell")] == ["b300", "rtxpro"]
    assert [h.name for h in inv.select("rtxpro,blackwell,testbed")] == ["rtxpro", "b300",
                                                                          "testbed"]


def test_no_inventory_still_has_testbed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DDPROBE_INVENTORY", raising=False)
    inv = load_inventory(None)
    assert inv.path is None and list(inv.hosts) == ["testbed"]
    assert inv.get("testbed").transport == "local"


def test_lookup_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".config" / "ddprobe").mkdir(parents=True)
    (tmp_path / ".config" / "ddprobe" / "hosts.yaml").write_text("hosts: {home: {}}\n")
    monkeypatch.delenv("DDPROBE_INVENTORY", raising=False)
    assert "home" in load_inventory(None).hosts
    (tmp_path / "hosts.yaml").write_text("hosts: {cwd: {}}\n")
    assert "cwd" in load_inventory(None).hosts
    (tmp_path / "env.yaml").write_text("hosts: {env: {}}\n")
    monkeypatch.setenv("DDPROBE_INVENTORY", str(tmp_path / "env.yaml"))
    assert "env" in load_inventory(None).hosts
    (tmp_path / "x.yaml").write_text("hosts: {explicit: {}}\n")
    assert "explicit" in load_inventory(str(tmp_path / "x.yaml")).hosts


@pytest.mark.parametrize("text,line,needle", [
    ("hosts:\n  a:\n    hots: x\n", 3, "unknown key 'hots'"),
    ("hosts:\n  a:\n    port: twenty\n", 3, "'port' must be an integer"),
    ("hosts:\n  a:\n    port: 70000\n", 3, "1..65535"),
    ("hosts:\n  a:\n    server:\n      manager: k8s\n", 4, "server.manager"),
    ("hosts:\n  a:\n    server:\n      budgetflag: ddtree\n", 4, "unknown key 'server.budgetflag'"),
    ("hosts:\n  a: {}\ngroups:\n  g: [a, b]\n", 4, "unknown host or group 'b'"),
    ("hosts:\n  a:\n    env: [x]\n", 3, "'env' must be a mapping"),
    ("hosts:\n  a: {\n", 3, "YAML syntax error"),
    ("hostz: {}\n", 1, "unknown top-level key 'hostz'"),
    ("hosts:\n  a: {}\n  a: {}\n", 3, "duplicate key 'a'"),
])
def test_bad_inventory_one_clear_message(tmp_path, capsys, text, line, needle):
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_inventory(str(p))
    assert needle in str(ei.value) and f"{p}:{line}:" in str(ei.value)
    code, out, err = run_cli(["--inventory", str(p), "facts", "--host", "a"], capsys)
    assert code == 3 and out == ""
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_host_is_config_error(tmp_path, capsys):
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts:\n  a: {}\n")
    code, out, err = run_cli(["--inventory", str(p), "facts", "--host", "nope"], capsys)
    assert code == 3 and "unknown host or group 'nope'" in err and "known: a, testbed" in err


def test_hosts_json_lists_inventory(tmp_path, capsys):
    code, out, err = run_cli(["--inventory", str(ROOT / "hosts.example.yaml"), "hosts", "--json"],
                             capsys)
    assert code == 0
    doc = json.loads(out)
    assert {h["name"] for h in doc["hosts"]} == {"b300", "rtxpro", "testbed"}
    assert doc["groups"] == {"blackwell": ["b300", "rtxpro"]}


def test_usage_error_exit_2(capsys):
    code, out, err = run_cli(["facts", "--bogus"], capsys)
    assert code == 2 and "No such option" in err


def test_entry_point_subprocess():
    import subprocess
    import sys
    exe = shutil.which("ddprobe")
    argv = [exe, "--version"] if exe else [sys.executable, "-m", "ddprobe", "--version"]
    p = subprocess.run(argv, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("ddprobe ")
    p = subprocess.run([sys.executable, "-m", "ddprobe", "--version"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stdout.startswith("ddprobe ")
