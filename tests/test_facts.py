"""`facts` and `hosts --check` over a real sshd, with a real SGLang wheel installed."""
from __future__ import annotations

import json

import pytest

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.facts import gather_facts

pytestmark = pytest.mark.ssh


def test_facts_find_sglang_without_importing_it(ssh_opts, make_host, sglang_venv):
    py = sglang_venv("0.5.10")
    h = make_host(python=py)
    with remote.connect(h, ssh_opts) as r:
        f = gather_facts(r, h)
    assert f.install and f.install["version"] == "0.5.10"
    assert f.install["path"].endswith("site-packages/sglang")
    assert f.python["path"] == str(py)
    assert f.packages["sglang"] == "0.5.10" and "torch" not in f.packages
    assert f.gpus == [] and f.cpus and f.memory_mib
    d = f.to_dict()
    assert {k: d["sglang"][k] for k in ("name", "version", "path")} == {
        "name": "sglang", "version": "0.5.10", "path": f.install["path"]}
    # a hash of the install's sources (hosts with the same version but edited files differ)
    assert len(d["sglang"]["source_hash"]) == 16 and d["sglang"]["source_files"] > 1000
    assert d["server"]["listening"] is False



def test_facts_name_the_kernel_package_by_both_distribution_names(ssh_opts, make_host,
                                                                   sglang_venv, tmp_path):
    """SGLang 0.5.11 depends on `sglang-kernel` (0.4.x; earlier releases on `sgl-kernel`): on the
    H200 facts listed torch, triton, sglang, transformers and no kernel package at all."""
    py = sglang_venv("0.5.10")
    site = tmp_path / "site"
    for dist, ver in (("sglang_kernel", "0.4.2"), ("sgl_kernel", "0.3.21")):
        d = site / f"{dist}-{ver}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\n"
                                    f"Version: {ver}\n")
    h = make_host(python=py, env={"PYTHONPATH": str(site)})
    with remote.connect(h, ssh_opts) as r:
        f = gather_facts(r, h)
    assert f.packages["sglang-kernel"] == "0.4.2"
    assert f.packages["sgl-kernel"] == "0.3.21"

def _inventory(tmp_path, sshd, py, extra=""):
    p = tmp_path / "hosts.yaml"
    p.write_text(f"hosts:\n  gpu-a:\n    python: {py}\n{extra}")
    return p


def test_facts_cli_json(tmp_path, sshd, sglang_venv, capsys):
    inv = _inventory(tmp_path, sshd, sglang_venv("0.5.2"))
    code = main(["--inventory", str(inv), "--ssh-config", str(sshd.ssh_config), "facts",
                 "--host", "gpu-a", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    (doc,) = json.loads(out)["hosts"]  # one host: the shape of several
    assert doc["host"] == "gpu-a" and doc["sglang"]["version"] == "0.5.2"
    assert set(doc) >= {"os", "gpus", "cuda", "python", "packages", "server"}


def test_facts_bad_interpreter_is_clear(tmp_path, sshd, capsys):
    inv = _inventory(tmp_path, sshd, "/nonexistent/python")
    code = main(["--inventory", str(inv), "--ssh-config", str(sshd.ssh_config), "facts",
                 "--host", "gpu-a"])
    err = capsys.readouterr().err
    assert code == 3 and "/nonexistent/python" in err and "Traceback" not in err
    assert "key 'python'" in err  # a configuration error, not an unreachable host


def test_hosts_check_parallel_with_a_dead_host(tmp_path, sshd, sshd2, capsys):
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts:\n  gpu-a: {}\n  gpu-b: {}\n  dead: {host: 127.0.0.1, port: 1}\n"
                 "groups:\n  all: [gpu-a, gpu-b, dead]\n")
    cfg = sshd.dir / "ssh_config_ab"
    cfg.write_text(sshd.ssh_config.read_text().split("Host *")[0] + sshd2.ssh_config.read_text())
    code = main(["--inventory", str(p), "--ssh-config", str(cfg), "--connect-timeout", "3",
                 "hosts", "--check", "--host", "all", "--json"])
    doc = json.loads(capsys.readouterr().out)
    st = {h["name"]: h["status"] for h in doc["hosts"]}
    assert st == {"gpu-a": "ok", "gpu-b": "ok", "dead": "unreachable"} and code == 4
    assert all(h["rtt_ms"] > 0 for h in doc["hosts"] if h["status"] == "ok")
