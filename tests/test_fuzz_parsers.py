"""Every parser of untrusted text raises only its own documented error (hypothesis).

The inputs are the real corpora (the log corpus, the shipped patches, the example inventories
and playbooks, the old journal, each host program's real answer here) changed by a list of
mutations hypothesis draws (and shrinks), or plain generated text. The targets, their errors
and the mutations are tests/fuzz_util.py's, shared with benchmarks/fuzz_parsers.py, which
feeds each parser 100,000 such inputs.
"""
from __future__ import annotations

import fuzz_util
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_SEEDS: dict[str, list[str]] = {}
_WORDS: dict[str, list[str]] = {}


def _seeds(name: str) -> list[str]:
    if name not in _SEEDS:
        _SEEDS[name] = fuzz_util.BY_NAME[name].seeds()
        _WORDS[name] = fuzz_util.dictionary(_SEEDS[name])
    return _SEEDS[name]


def _ops(name: str) -> st.SearchStrategy[list[fuzz_util.Op]]:
    payload = st.one_of(st.sampled_from(_WORDS[name]), st.text(max_size=12))
    op = st.builds(fuzz_util.Op, st.integers(0, fuzz_util.N_KINDS - 1), st.integers(0, 1 << 20),
                   st.integers(0, 1 << 20), payload)
    return st.lists(op, min_size=1, max_size=6)


@st.composite
def _inputs(draw: st.DrawFn, name: str) -> str:
    seeds = _seeds(name)
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=200))
    seed = seeds[draw(st.integers(0, len(seeds) - 1))]
    return fuzz_util.mutate(seed, draw(_ops(name)), seeds)


# slower parsers (a YAML file, a whole log) get fewer examples: the benchmark does the volume
_EXAMPLES = {"hosts.yaml": 40, "ansible-yaml": 40, "playbook": 40, "server-log": 40,
             "journal": 60, "server-args": 40}


@pytest.mark.parametrize("name", [t.name for t in fuzz_util.TARGETS])
def test_a_parser_raises_only_its_documented_error(name: str) -> None:
    target = fuzz_util.BY_NAME[name]
    _seeds(name)

    @settings(max_examples=_EXAMPLES.get(name, 120), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_inputs(name))
    def check(text: str) -> None:
        assert fuzz_util.outcome(target, text) in ("ok", "documented")

    check()


@pytest.mark.parametrize("name", [t.name for t in fuzz_util.TARGETS])
def test_the_real_seeds_parse(name: str) -> None:
    """The unmutated corpora are valid input: most parse (a pattern or a `when:` seed may name
    what the fixed scope lacks, a documented error)."""
    target = fuzz_util.BY_NAME[name]
    got = [fuzz_util.outcome(target, s) for s in _seeds(name)]
    assert got and got.count("ok") >= 1, got
