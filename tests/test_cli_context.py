"""The Context of one invocation (ddprobe/context.py) does not outlive it: `main` called again
in the same process sees its own options, inventory and remote options, never the last call's."""
from __future__ import annotations

import json
from pathlib import Path

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.context import current


def test_a_second_main_sees_its_own_inventory_not_the_first_ones(tmp_path: Path, capsys,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DDPROBE_INVENTORY", raising=False)
    inv = tmp_path / "x.yaml"
    inv.write_text("hosts: {first: {}}\n")
    assert main(["--inventory", str(inv), "hosts", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert {h["name"] for h in first["hosts"]} == {"first", "testbed"}
    assert main(["hosts", "--json"]) == 0  # no --inventory: the default search, not x.yaml
    second = json.loads(capsys.readouterr().out)
    assert second["inventory"] is None and [h["name"] for h in second["hosts"]] == ["testbed"]


def test_the_remote_options_of_an_invocation_are_put_back_after_it(tmp_path: Path,
                                                                   capsys) -> None:
    before = remote.default_options()
    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    assert main(["--ssh-config", str(cfg), "--connect-timeout", "3", "hosts", "--json"]) == 0
    capsys.readouterr()
    assert remote.default_options() == before
    assert current().options.ssh_config is None  # outside an invocation: a fresh Context


def test_fan_out_workers_see_the_invocations_context() -> None:
    # worker threads inherit no ContextVar: without a copy of the caller's context each
    # worker's current() would be a fresh default Context (other consoles, no options)
    from ddprobe.context import Context, Options, activate
    from ddprobe.inventory import Host
    ctx = Context(options=Options(ssh_config="/nonexistent/cfg", limit="a*"))
    hosts = [Host(name=f"h{i}", host=f"h{i}", transport="local") for i in range(3)]
    undo = activate(ctx)
    try:
        res = remote.fan_out(hosts, lambda _h: current(), deadline=10)
    finally:
        undo()
    assert [o.status for o in res] == ["ok"] * 3
    assert all(o.value is ctx for o in res)
    assert current() is not ctx  # undone in the caller
