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


def test_the_remote_options_of_an_invocation_are_put_back_after_it(tmp_path: Path, capsys,
                                                                   monkeypatch) -> None:
    # the options live in the invocation's Context and are passed to every connect: the remote
    # package keeps no process default an invocation could set and leave behind
    assert not hasattr(remote, "default_options") and not hasattr(remote, "set_default_options")
    assert not hasattr(remote.base, "_defaults")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    import ddprobe.context as context_mod
    seen: list[object] = []
    real = context_mod.connect

    def spy(host, opts):  # type: ignore[no-untyped-def]  # runs in fan_out's worker thread
        seen.append(opts)
        return real(host, opts)

    monkeypatch.setattr(context_mod, "connect", spy)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DDPROBE_INVENTORY", raising=False)
    assert main(["--ssh-config", str(cfg), "--connect-timeout", "3", "hosts", "--check",
                 "--json"]) == 0
    capsys.readouterr()
    assert seen == [remote.RemoteOptions(ssh_config=str(cfg), connect_timeout=3)]
    assert main(["hosts", "--check", "--json"]) == 0  # the next invocation: its own options
    capsys.readouterr()
    assert seen[1:] == [remote.RemoteOptions()]
    assert current().options.ssh_config is None  # outside an invocation: a fresh Context


def test_a_second_main_reads_the_flags_and_prepares_again(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    """The run's caches (flags, prepare steps, held locks) are the invocation's: within one
    `main` the flags are read once per host and the prepare step runs once; the next `main`
    starts from fresh caches (a process global would make the second call read nothing)."""
    from ddprobe.server.prepare import PREPARERS
    from ddprobe.sources import fetch
    reads: list[str] = []
    prepares: list[str] = []
    real_read, real_prepare = fetch.read_flags, PREPARERS["testbed"]

    def read_flags(r, host=None):  # type: ignore[no-untyped-def]
        reads.append((host or r.host).name)
        return real_read(r, host)

    def prepare(r, host):  # type: ignore[no-untyped-def]
        prepares.append(host.name)
        return real_prepare(r, host)

    monkeypatch.setattr(fetch, "read_flags", read_flags)
    monkeypatch.setitem(PREPARERS, "testbed", prepare)
    monkeypatch.chdir(tmp_path)
    args = ["bisect", "--plan", "--host", "testbed", "--budgets", "8", "--json"]
    assert main(args) == 0
    assert reads == ["testbed"] and prepares == ["testbed"]
    assert main(args) == 0
    capsys.readouterr()
    assert reads == ["testbed", "testbed"] and prepares == ["testbed", "testbed"]


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


def test_the_log_handlers_of_v_and_debug_end_with_their_invocation(tmp_path: Path, capsys,
                                                                   monkeypatch) -> None:
    """-v/-vv/-vvv and --debug attach a stderr handler for one invocation. Left attached, it
    kept the stderr of its time: pytest closes that capture after the test, and the next
    debug record anywhere in the process printed '--- Logging error ---'."""
    import logging
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DDPROBE_INVENTORY", raising=False)
    names = ["", "ddprobe", "ddprobe.remote", "httpx", "paramiko"]
    before = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level)
              for n in names}
    for flags in (["-v"], ["-vv"], ["-vvv"], ["--debug"]):
        assert main([*flags, "hosts", "--check", "--json"]) == 0, flags
        err = capsys.readouterr().err
        if flags != ["--debug"]:  # the invocation did log to its stderr: the handler was there
            assert "ddprobe.remote" in err, (flags, err)
        after = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level)
                 for n in names}
        assert after == before, flags
