"""`ddprobe grep / grep-buffers / flags` through a real sshd on four real SGLang installs."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import SGLANG_VERSIONS, ensure_program

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.hostside.client import find_install
from ddprobe.sources.grep import grep

# pyenv's interpreters (PYENV_ROOT where set, as pyenv itself reads it)
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")

pytestmark = pytest.mark.ssh
TRITON = "srt/layers/attention/triton_backend.py"


def _name(v: str) -> str:
    return "v" + v.replace(".", "-")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory, sglang_venv, sshd, sshd2) -> Path:
    lines = ["hosts:"]
    for v in SGLANG_VERSIONS:
        lines += [f"  {_name(v)}:", "    host: gpu-a", f"    python: {sglang_venv(v)}"]
    # the same 0.5.2 install seen through a second sshd, for side-by-side greps
    lines += ["  other-0-5-2:", "    host: gpu-b", f"    python: {sglang_venv('0.5.2')}",
              "  no-such-pkg:", "    host: gpu-a", f"    python: {sys.executable}",
              "    package: not_a_package_xyz"]
    p = tmp_path_factory.mktemp("inv") / "hosts.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture(scope="module")
def ssh_config(sshd, sshd2, tmp_path_factory: pytest.TempPathFactory) -> Path:
    merged = tmp_path_factory.mktemp("cfg") / "ssh_config"
    merged.write_text(sshd.ssh_config.read_text().split("Host *")[0] + sshd2.ssh_config.read_text())
    return merged


def run(capsys, inventory: Path, ssh_config: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["-i", str(inventory), "--ssh-config", str(ssh_config), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_grep_buffers_over_ssh(version: str, capsys, inventory: Path, ssh_config: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "grep-buffers", "--host", _name(version),
                       "--backend", "triton", "--max-bs", "64", "--budgets", "8,16,32",
                       "--context-len", "4096", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["version"] == version and doc["package"] == "sglang"
    rows = {r["attr"]: r for r in doc["rows"] if r["status"] == "found"}
    if version == "0.5.23":
        missing = [r for r in doc["rows"] if r["status"] == "missing-buffer"]
        assert any(r["attr"] == "cuda_graph_custom_mask" for r in missing)
        vm = rows["_verify_mask.buffer"]
        assert [s["elements"] for s in vm["sizes"]] == [64 * (b + 1) * (4096 + b + 1)
                                                       for b in (8, 16, 32)]
        assert [s["demand_elements"] for s in vm["sizes"]] == [
            64 * (b + 1) * (4094 + b + 1) for b in (8, 16, 32)]
        assert doc["seq_limit"]["below"] == 2
    else:
        m = rows["cuda_graph_custom_mask"]
        assert m["file"] == TRITON and m["shape"] == "max_num_tokens * self.max_context_len"
        assert [s["bytes"] for s in m["sizes"]] == [64 * (b + 1) * 4096 for b in (8, 16, 32)]
        # at the longest seq_len a request reaches, context_len - 2 (the release's limits)
        assert [s["seq_len"] for s in m["sizes"]] == [4094] * 3
        assert [s["short_by"] for s in m["sizes"]] == [64 * (b + 1) * (b - 1)
                                                       for b in (8, 16, 32)]


def test_grep_buffers_table_answers_the_seed_question(capsys, inventory: Path,
                                                      ssh_config: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "grep-buffers", "--host",
                       _name("0.5.10"), "--backend", "triton", "--max-bs", "64", "--budgets",
                       "8,16,32", "--context-len", "4096")
    assert rc == 0, err
    text = " ".join(out.split())
    assert "cuda_graph_custom_mask" in text and "triton_backend.py:479" in text
    assert "set to None at srt/layers/attention/triton_backend.py:182" in text
    assert "really allocated at srt/layers/attention/triton_backend.py:479" in text
    assert "budget 16 (draft tokens 17): 4,456,448 elements, 4.2 MiB" in text
    assert "the layout needs 4,472,768 at seq_len 4094; SHORT by 16,320" in text
    assert "max_req_len = context_len - 1 (srt/managers/tp_worker.py:301)" in text


def test_grep_buffers_shows_the_comparison_that_clears_0523s_verify_mask(
        capsys, inventory: Path, ssh_config: Path) -> None:
    """A buffer that is not suspect because it holds its use's layout says so, with both
    numbers: 0.5.23's _verify_mask.buffer against triton_backend.py's seq_mask_len."""
    rc, out, err = run(capsys, inventory, ssh_config, "grep-buffers", "--host",
                       _name("0.5.23"), "--backend", "triton", "--max-bs", "64", "--budgets",
                       "16", "--context-len", "4096")
    assert rc == 0, err
    text = " ".join(out.split())
    assert "_verify_mask.buffer (srt/layers/attention/verify_mask.py:" in text
    assert ("the use's layout: seq_mask_len = num_tokens_per_req * (seq_lens + "
            "num_tokens_per_req)") in text
    assert ("4,474,944 elements, 4.3 MiB; the layout needs 4,472,768 at seq_len 4094; fits "
            "(2,176 to spare)") in text
    assert "-> cleared: the allocation holds the use's layout" in text


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_flags_over_ssh(version: str, capsys, inventory: Path, ssh_config: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "flags", "--host", _name(version),
                       "--json")
    assert rc == 0, err
    doc = json.loads(out)
    names = {n for f in doc["flags"] for n in f["names"]}
    assert doc["version"] == version and "--speculative-num-draft-tokens" in names
    rc, out, err = run(capsys, inventory, ssh_config, "flags", "--host", _name(version),
                       "--check", "--cuda-graph-max-bs 64 --speculative-num-draft-tokens 17")
    if version == "0.5.23":
        assert rc == 7
        assert "--cuda-graph-max-bs is not a flag of sglang 0.5.23" in err
        assert "--cuda-graph-max-bs-decode" in err
    else:
        assert rc == 0 and "accepts" in out, err


def test_grep_hits_context_and_hostile_pattern(capsys, inventory: Path, ssh_config: Path,
                                               tmp_path: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "grep",
                       r"cuda_graph_custom_mask|def init_cuda_graph_state", "--host",
                       _name("0.5.10"), "--path", "srt/layers/attention", "-C", "1", "--json")
    assert rc == 0, err
    (only,) = json.loads(out)["hosts"]  # one host: the shape of several
    doc = only["result"]
    hits = [(h["file"], h["line"], h["kind"]) for h in doc["hits"]]
    assert (TRITON, 182, "match") in hits and (TRITON, 181, "context") in hits
    assert (TRITON, 479, "match") in hits
    assert doc["install"]["version"] == "0.5.10"
    canary = tmp_path / "pwned"
    evil = f"$(touch {canary})'\"; touch {canary} `touch {canary}`"
    rc, out, err = run(capsys, inventory, ssh_config, "grep", evil, "-F", "--host",
                       _name("0.5.10"))
    assert rc == 1 and not canary.exists()  # no match, and nothing ran


def test_grep_fallback_without_ripgrep_gives_same_hits(ssh_opts, make_host, sglang_venv) -> None:
    ensure_program("rg", "ripgrep")  # installed by .ci/run; test_faults_grep covers a no-rg PATH
    h = make_host(python=sglang_venv("0.5.2"))
    with remote.connect(h, ssh_opts) as r:
        a = grep(r, "cuda_graph_custom_mask", host=h, subdir="srt/layers", context=2)
        b = grep(r, "cuda_graph_custom_mask", host=h, subdir="srt/layers", context=2,
                 use_rg=False)
        inst = find_install(r, h)
    assert a.tool == "rg" and b.tool == "grep"
    assert a.hits == b.hits and len(a.matches) >= 4
    assert inst.version == "0.5.2" and inst.path.endswith("/sglang")


def test_grep_several_hosts_side_by_side(capsys, inventory: Path, ssh_config: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "grep", "self.cuda_graph_custom_mask = ",
                       "-F", "--host", f"{_name('0.5.2')},other-0-5-2,{_name('0.5.10')}",
                       "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [h["status"] for h in doc["hosts"]] == ["ok", "ok", "ok"]
    rows = {(c["file"], c["text"]): c for c in doc["compare"]}
    alloc = rows[(TRITON, "self.cuda_graph_custom_mask = torch.zeros(")]
    assert alloc["differs"] is True
    assert alloc["lines"][_name("0.5.2")] == alloc["lines"]["other-0-5-2"] != \
        alloc["lines"][_name("0.5.10")]
    rc, out, err = run(capsys, inventory, ssh_config, "grep", "self.cuda_graph_custom_mask = ",
                       "-F", "--host", f"{_name('0.5.2')},{_name('0.5.10')}")
    assert rc == 0 and _name("0.5.10") in out and "0.5.2" in out


def test_bad_host_inputs_are_one_clear_error(capsys, inventory: Path, ssh_config: Path) -> None:
    rc, out, err = run(capsys, inventory, ssh_config, "flags", "--host", "no-such-pkg")
    assert rc == 3 and "package 'not_a_package_xyz' is not importable" in err
    assert "Traceback" not in err
    rc, out, err = run(capsys, inventory, ssh_config, "grep", "x", "--host", _name("0.5.2"),
                       "--path", "../..")
    assert rc == 2 and "leaves the package directory" in err
    rc, out, err = run(capsys, inventory, ssh_config, "grep-buffers", "--host",
                       _name("0.5.2"), "--budgets", "8,x")
    assert rc == 2 and "--budgets" in err


def test_helper_runs_on_the_oldest_python_sglang_supports(ssh_opts, make_host, sglang_venv) -> None:
    import glob
    import shutil
    import subprocess
    # a real interpreter path (a pyenv shim needs pyenv's environment, absent over ssh)
    found = sorted(glob.glob(str(PYENV / "versions/3.8.*/bin/python"))) + [
        p for p in (shutil.which("python3.8"),) if p and "shims" not in p]
    py38 = found[0] if found else None
    if py38 is None:
        pytest.skip("no python3.8 on this machine: the helper's 3.8 compatibility is unchecked")
    site = subprocess.run([str(sglang_venv("0.5.10")), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    h = make_host(python=py38, env={"PYTHONPATH": site})
    from ddprobe.sources.fetch import grep_buffers, read_flags
    with remote.connect(h, ssh_opts) as r:
        inst = find_install(r, h)
        assert inst.version == "0.5.10" and inst.python_version.startswith("3.8")
        assert grep_buffers(r, h, backend="triton").find("cuda_graph_custom_mask")
        assert read_flags(r, h).has("--speculative-num-draft-tokens")
