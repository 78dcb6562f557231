"""Host identity for k-ary rounds: facts decide, labels refine, unknown GPUs never merge."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ddprobe.bisect.groups import group_hosts, identity, why_apart
from ddprobe.facts import Facts, gather_facts
from ddprobe.inventory import Host, builtin_testbed
from ddprobe.remote import connect

B300 = {"name": "NVIDIA B300 SXM6", "compute_cap": "10.3", "sm": "sm_103", "driver": "580.95"}
RTX = {"name": "NVIDIA RTX PRO 6000 Blackwell", "compute_cap": "12.0", "sm": "sm_120",
       "driver": "580.95"}


def facts(name: str, gpus: list[dict], *, driver: str = "580.95", version: str = "0.5.11",
          src: str = "abcd") -> Facts:
    return Facts(host=name, gpus=gpus, driver=driver,
                 install={"name": "sglang", "version": version, "path": "/x",
                          "source_hash": src})


def host(name: str, **labels: str) -> Host:
    return Host(name=name, host=name, labels=tuple(labels.items()))


def names(groups: list) -> list[list[str]]:
    return [[h.name for h in g.hosts] for g in groups]


def test_identical_facts_share_rounds() -> None:
    hs = [host("a"), host("b")]
    gs = group_hosts(hs, [facts("a", [B300] * 8), facts("b", [B300] * 8)])
    assert names(gs) == [["a", "b"]]
    assert gs[0].identity.gpu == "NVIDIA B300 SXM6 (10.3) x8" and gs[0].identity.known


@pytest.mark.parametrize("other,why", [
    (facts("b", [RTX] * 8), "gpu differs"),
    (facts("b", [B300] * 4), "gpu differs"),  # count
    (facts("b", [B300] * 8, driver="570.1"), "driver differs"),
    (facts("b", [B300] * 8, version="0.5.10"), "version differs"),
    (facts("b", [B300] * 8, src="ffff"), "source hash differs"),  # e.g. a patched install
])
def test_any_differing_fact_splits(other: Facts, why: str) -> None:
    gs = group_hosts([host("a"), host("b")], [facts("a", [B300] * 8), other])
    assert names(gs) == [["a"], ["b"]]
    assert why in why_apart(gs[0].identity, gs[1].identity)


def test_unknown_gpu_is_never_identical_even_with_equal_labels() -> None:
    hs = [host("a", gpu="B300", arch="sm_103"), host("b", gpu="B300", arch="sm_103")]
    gs = group_hosts(hs, [facts("a", []), facts("b", [])])
    assert names(gs) == [["a"], ["b"]]
    assert not gs[0].identity.known and gs[0].identity.gpu == "unknown GPU"
    assert "unknown" in why_apart(gs[0].identity, gs[1].identity)
    gs = group_hosts(hs, [None, None])  # facts failed altogether
    assert names(gs) == [["a"], ["b"]]


def test_labels_refine_but_never_override_facts() -> None:
    same = [facts("a", [B300] * 8), facts("b", [B300] * 8)]
    # facts equal, labels differ: split (the inventory knows something facts cannot see)
    gs = group_hosts([host("a", arch="sm_103"), host("b", arch="sm_100")], same)
    assert names(gs) == [["a"], ["b"]] and "labels differ" in why_apart(gs[0].identity,
                                                                        gs[1].identity)
    # facts differ, labels equal: still split (a label cannot merge different GPUs)
    gs = group_hosts([host("a", gpu="B300"), host("b", gpu="B300")],
                     [facts("a", [B300] * 8), facts("b", [RTX] * 8)])
    assert names(gs) == [["a"], ["b"]]
    # a label never gives a GPU to a host whose facts found none
    assert identity(host("a", gpu="B300"), facts("a", [])).gpu == "unknown GPU"


def test_no_parallel_keeps_every_host_apart() -> None:
    gs = group_hosts([host("a"), host("b")], [facts("a", [B300]), facts("b", [B300])],
                     parallel=False)
    assert names(gs) == [["a"], ["b"]]


def test_the_builtin_testbed_reports_its_scenarios_gpu(ssh_opts, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts on the built-in host, through the testbed's nvidia-smi stand-in, name the GPU
    of the scenario (and a source hash of the install), so testbed hosts with different
    scenarios never share rounds."""
    from testbed_util import install_prefix
    prefix = install_prefix(tmp_path / "site")
    got = {}
    for scenario in ("seed", "h200"):
        monkeypatch.setenv("DDTESTBED_SCENARIO", scenario)
        h = builtin_testbed()
        h = replace(h, env=tuple((k, str(prefix) if k == "PYTHONPATH" else v)
                                 for k, v in h.env))
        with connect(h, ssh_opts) as r:
            f = gather_facts(r, h)
        got[scenario] = identity(h, f)
    assert got["seed"].gpu == "NVIDIA B300 SXM6 (10.3) x8"
    assert got["h200"].gpu == "NVIDIA H200 (9.0)"
    assert got["seed"].source_hash == got["h200"].source_hash != "?"
    assert got["seed"].key != got["h200"].key
