"""Ansible inventories (INI, YAML, `ansible-inventory --list` JSON) read as ddprobe inventories,
and `--host` patterns in Ansible's language. Expected answers written before running: the three
files describe one fleet, so all three give the same hosts, users, ports, interpreters and
groups (INI's [all:vars] ansible_user=ubuntu loses to [b300:vars] root, as in Ansible)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddprobe.cli import main
from ddprobe.errors import ConfigError
from ddprobe.exitcodes import ExitCode
from ddprobe.inventory import load_inventory

DATA = Path(__file__).parent / "data" / "ansible"
FLEET = ["b300-1", "b300-2", "b300-3", "rtx-a", "solo"]


def _names(hosts) -> list[str]:
    return [h.name for h in hosts]


@pytest.mark.parametrize("name", ["fleet.ini", "fleet.yml", "fleet.json"])
def test_the_three_formats_give_the_same_fleet(name: str) -> None:
    inv = load_inventory(str(DATA / name))
    assert sorted(n for n in inv.hosts if n != "testbed") == FLEET
    b = inv.hosts["b300-2"]
    assert (b.user, b.port, b.python, b.host) == ("root", 2222, "/root/venv_sglang211/bin/python",
                                                   "b300-2")
    r = inv.hosts["rtx-a"]
    assert (r.host, r.user, r.identity_file, r.python) == ("10.0.0.7", "ubuntu", "~/.ssh/rtx",
                                                           "/opt/venv/bin/python")
    assert inv.hosts["solo"].transport == "local"
    assert sorted(inv.groups["blackwell"]) == ["b300-1", "b300-2", "b300-3", "rtx-a"]
    assert inv.groups["b300"] == ("b300-1", "b300-2", "b300-3")


def test_hosts_yaml_imports_an_ansible_inventory_and_adds_its_own_settings(tmp_path: Path
                                                                          ) -> None:
    (tmp_path / "fleet.ini").write_text((DATA / "fleet.ini").read_text())
    (tmp_path / "hosts.yaml").write_text(
        "ansible: fleet.ini\n"
        "defaults:\n  server: {model_path: moonshotai/Kimi-K2.6, max_bs: 64}\n"
        "hosts:\n  lab: {host: 10.0.0.9}\n"
        "groups:\n  everything: [blackwell, lab]\n")
    inv = load_inventory(str(tmp_path / "hosts.yaml"))
    assert inv.hosts["b300-1"].server.model_path == "moonshotai/Kimi-K2.6"
    assert inv.hosts["b300-1"].source.startswith(str(tmp_path / "fleet.ini") + ":")
    assert inv.groups["everything"] == ("b300-1", "b300-2", "b300-3", "rtx-a", "lab")


@pytest.mark.parametrize("pattern,want", [
    ("all", FLEET),
    ("*", FLEET),
    ("b300", ["b300-1", "b300-2", "b300-3"]),
    ("b300-*", ["b300-1", "b300-2", "b300-3"]),
    ("blackwell:!b300-2", ["b300-1", "b300-3", "rtx-a"]),
    ("blackwell,!b300-2", ["b300-1", "b300-3", "rtx-a"]),
    ("!rtxpro", ["b300-1", "b300-2", "b300-3", "solo"]),
    ("blackwell:&b300", ["b300-1", "b300-2", "b300-3"]),
    ("all:&blackwell:!b300-1", ["b300-2", "b300-3", "rtx-a"]),
    ("~b300-[12]$", ["b300-1", "b300-2"]),
    ("solo,testbed", ["solo", "testbed"]),  # the built-in host only when named
    ("rtx-a,b300-1,rtx-a", ["rtx-a", "b300-1"]),  # order kept, no duplicates
])
def test_patterns(pattern: str, want: list[str]) -> None:
    inv = load_inventory(str(DATA / "fleet.yml"))
    assert _names(inv.select(pattern)) == want


def test_limit_narrows_the_pattern() -> None:
    inv = load_inventory(str(DATA / "fleet.ini"))
    assert _names(inv.select("blackwell", limit="b300-[23]")) == ["b300-2", "b300-3"]
    with pytest.raises(ConfigError, match="leaves none"):
        inv.select("rtxpro", limit="b300")


@pytest.mark.parametrize("pattern,msg", [
    ("nosuch", "unknown host or group 'nosuch'"),
    ("b300:&rtxpro", "matches no host"),
    ("~(", "bad regex"),
    ("b300,!", "need a name"),
])
def test_bad_patterns(pattern: str, msg: str) -> None:
    inv = load_inventory(str(DATA / "fleet.ini"))
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        inv.select(pattern)


def test_groups_of_groups_in_hosts_yaml_and_a_cycle(tmp_path: Path) -> None:
    f = tmp_path / "hosts.yaml"
    f.write_text("hosts:\n  a: {}\n  b: {}\n  c: {}\n"
                 "groups:\n  ab: [a, b]\n  abc: [ab, c]\n  top: [abc]\n")
    inv = load_inventory(str(f))
    assert inv.groups["top"] == ("a", "b", "c")
    f.write_text("hosts:\n  a: {}\ngroups:\n  x: [y]\n  y: [x, a]\n")
    with pytest.raises(ConfigError, match="contains itself") as e:
        load_inventory(str(f))
    assert e.value.line == 5  # y closes the cycle


@pytest.mark.parametrize("text,msg,line", [
    ("[gpu]\nbox ansible_port=ssh\n", "ansible_port must be a port number", 2),
    ("[gpu]\nbox ansible_connection=winrm\n", "ansible_connection 'winrm'", 2),
    ("[gpu\nbox\n", "bad section header", 1),
    ("[gpu]\nbox ddprobe_pyhton=/x\n", "unknown variable ddprobe_pyhton", 2),
    ("[gpu]\nbox port\n", "expected key=value", 2),
])
def test_bad_ini_is_one_message_with_its_line(tmp_path: Path, text: str, msg: str, line: int,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "inventory.ini"
    f.write_text(text)
    code = main(["-i", str(f), "hosts"])
    err = capsys.readouterr().err
    assert code == int(ExitCode.CONFIG) and msg in err and f"{f}:{line}" in err
    assert "Traceback" not in err


def test_cli_host_patterns_and_limit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["-i", str(DATA / "fleet.json"), "--limit", "!b300-3", "bisect", "--host",
                 "blackwell", "--budgets", "8,16", "--plan", "--json"])
    out = capsys.readouterr().out
    import json
    assert code == 0 and json.loads(out)["hosts"] == ["b300-1", "b300-2", "rtx-a"]
