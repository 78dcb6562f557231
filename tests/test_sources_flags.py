"""Launch flags read from server_args.py (and 0.5.2x's arg_groups) of four real releases."""
from __future__ import annotations

import zipfile

import pytest
from conftest import SGLANG_VERSIONS, _wheel

from ddprobe.errors import ConfigError, RefusedError
from ddprobe.sources.flags import SERVER_ARGS, FlagSet
from ddprobe.sources.flagsrc import parse_flags

_cache: dict[str, FlagSet] = {}


def flags_of(version: str) -> FlagSet:
    if version not in _cache:
        texts: dict[str, str] = {}
        with zipfile.ZipFile(_wheel(version)) as z:
            for name in z.namelist():
                rel = name[len("sglang/"):]
                if rel == SERVER_ARGS or (rel.startswith("srt/arg_groups/")
                                          and rel.endswith(".py")):
                    texts[rel] = z.read(name).decode("utf-8")
        _cache[version] = parse_flags(texts, package="sglang", version=version)
    return _cache[version]


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_core_flags_present_with_types_and_choices(version: str) -> None:
    fs = flags_of(version)
    assert len(fs.flags) > 150
    nd = fs.get("--speculative-num-draft-tokens")
    assert nd is not None and nd.type == "int" and nd.takes_value
    ab = fs.get("--attention-backend")
    assert ab is not None and ab.choices and {"triton", "flashinfer", "fa3"} <= set(ab.choices)
    mp = fs.get("--model-path")
    assert mp is not None and "--model" in mp.names  # the alias
    dcg = fs.get("--disable-cuda-graph")
    assert dcg is not None and not dcg.takes_value
    fs.check(["--model-path", "m", "--speculative-num-draft-tokens", "17",
              "--attention-backend", "triton", "--disable-cuda-graph", "--mem-fraction-static",
              "0.8"])


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.2", "0.5.10"])
def test_cuda_graph_max_bs_spelling_older(version: str) -> None:
    fs = flags_of(version)
    assert fs.pick("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs") == "--cuda-graph-max-bs"
    fs.check(["--cuda-graph-max-bs", "64", "--cuda-graph-bs", "1", "2", "4", "8"])


def test_0523_renamed_flags_refused_with_nearest() -> None:
    fs = flags_of("0.5.23")
    assert fs.pick("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs") == \
        "--cuda-graph-max-bs-decode"
    with pytest.raises(RefusedError) as ei:
        fs.check(["--cuda-graph-max-bs", "64"])
    msg = str(ei.value)
    assert "--cuda-graph-max-bs is not a flag of sglang 0.5.23" in msg
    assert "ambiguous prefix" in msg and "--cuda-graph-max-bs-decode" in msg
    assert ei.value.exit_code == 7
    dcg = fs.get("--disable-cuda-graph")
    assert dcg is not None and dcg.deprecated and dcg.file == SERVER_ARGS
    # declared through annotated fields in arg_groups/fields/*.py
    assert fs.get("--cuda-graph-max-bs-decode").file.startswith("srt/arg_groups/fields/")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_bad_values_and_unknown_flags_refused(version: str) -> None:
    fs = flags_of(version)
    with pytest.raises(RefusedError, match=r"'trito' is not one of its choices.*did you mean "
                                           r"'triton'"):
        fs.check(["--attention-backend", "trito"])
    with pytest.raises(RefusedError, match="takes an int"):
        fs.check(["--speculative-num-draft-tokens", "seventeen"])
    with pytest.raises(RefusedError, match=r"--speculative-num-draft-tokenz is not a flag.*"
                                           r"nearest: --speculative-num-draft-tokens"):
        fs.check(["--speculative-num-draft-tokenz", "17"])
    # argparse would take an unambiguous prefix silently: refuse it with the reason
    with pytest.raises(RefusedError, match="abbreviation of --disable-cuda-graph-padding"):
        fs.check(["--disable-cuda-graph-paddin"])
    with pytest.raises(RefusedError, match="is a switch"):
        fs.check(["--disable-cuda-graph=1"])
    with pytest.raises(RefusedError, match="needs a value"):
        fs.check(["--speculative-num-draft-tokens"])
    with pytest.raises(RefusedError, match="unexpected argument 'stray'"):
        fs.check(["--disable-cuda-graph", "stray"])
    fs.check(["--speculative-num-draft-tokens=9"])


def test_field_declared_boolean_optional_action_adds_the_no_spelling() -> None:
    """0.5.2x declares flags as fields; `Arg(action=argparse.BooleanOptionalAction)` reaches
    add_argument as is, so argparse defines --no-NAME too (0.5.23 has 12 such fields, e.g.
    exec_.py's enable_tf32_matmul). The whole set is compared with the real parser in
    tests/test_real_sglang_args.py."""
    src = ("import argparse\n"
           "class Features:\n"
           "    _NS_PATH = 'exec.features'\n"
           "    enable_tf32_matmul: A[Optional[bool], Arg(help='x', "
           "action=argparse.BooleanOptionalAction)] = None\n"
           "    lora_paths: A[Optional[list], Arg(help='y', action=LoRAPathAction, "
           "action_kwargs={'type': str, 'nargs': '*'})] = None\n")
    fs = parse_flags({SERVER_ARGS: "add_cli_args_from_dataclass\n",
                      "srt/arg_groups/fields/exec_.py": src})
    f = fs.get("--no-enable-tf32-matmul")
    assert f is not None and f is fs.get("--enable-tf32-matmul") and not f.takes_value
    lp = fs.get("--lora-paths")
    assert lp is not None and lp.nargs == "*" and lp.takes_value
    fs.check(["--no-enable-tf32-matmul", "--lora-paths"])
    if "0.5.23" in SGLANG_VERSIONS:
        real = flags_of("0.5.23")
        nos = sorted(n for f in real.flags for n in f.names if n.startswith("--no-")
                     and f.file.startswith("srt/arg_groups/fields/"))
        assert len(nos) == 12 and "--no-enable-tf32-matmul" in nos
        real.check(["--no-enable-tf32-matmul", "--no-mm-enable-dp-encoder"])


def test_missing_or_broken_server_args_is_a_clear_error() -> None:
    with pytest.raises(RefusedError, match="srt/server_args.py not found in sglang 9.9"):
        parse_flags({}, package="sglang", version="9.9")
    with pytest.raises(ConfigError, match=r"srt/server_args.py:2: cannot parse"):
        parse_flags({SERVER_ARGS: "x = 1\ndef f(:\n"})


def test_choices_from_module_constants_and_starred() -> None:
    src = '''
BASE = ["a", "b"]
MORE = [*BASE, "c"]
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--pick", type=str, choices=MORE + ["d"], default="a")
        parser.add_argument("--dyn", type=str, choices=sorted(get_them()))
        parser.add_argument("--n", "-n", type=int, nargs="+")
'''
    fs = parse_flags({SERVER_ARGS: src})
    assert fs.get("--pick").choices == ("a", "b", "c", "d")
    assert fs.get("--dyn").choices is None  # computed at run time: not validated
    fs.check(["--dyn", "anything", "--n", "1", "2", "-n", "3", "--pick", "d"])
    with pytest.raises(RefusedError, match="'e' is not one of its choices"):
        fs.check(["--pick", "e"])


def test_boolean_optional_action_adds_the_no_spelling() -> None:
    """argparse.BooleanOptionalAction defines --no-NAME too (0.5.11's --record-nolora-graph);
    the real parser's option strings were compared in tests/test_real_sglang_args.py."""
    src = ("import argparse\n"
           "def add_cli_args(parser):\n"
           "    parser.add_argument('--record-nolora-graph', action=argparse.BooleanOptionalAction,"
           " default=True, help='x')\n")
    fs = parse_flags({SERVER_ARGS: src})
    f = fs.get("--no-record-nolora-graph")
    assert f is not None and f is fs.get("--record-nolora-graph")
    assert not f.takes_value
    fs.check(["--no-record-nolora-graph", "--record-nolora-graph"])
    if "0.5.11" in SGLANG_VERSIONS:
        assert flags_of("0.5.11").has("--no-experts-shared-outer-loras")


def test_flags_are_read_once_per_cache_passed_down(ssh_opts, sglang_venv) -> None:
    """`flags_for` remembers the flags in the cache it is given (the run's); without one it
    reads them again, and refresh=True reads them again into the cache."""
    from ddprobe import remote
    from ddprobe.inventory import Host
    from ddprobe.sources.fetch import FlagsCache, flags_for
    h = Host(name="src", python=str(sglang_venv("0.5.2")), transport="local")
    cache = FlagsCache()
    with remote.connect(h, ssh_opts) as r:
        first = flags_for(r, h, cache=cache)
        assert first.pick("--speculative-num-draft-tokens")
        assert flags_for(r, h, cache=cache) is first
        assert flags_for(r, h) is not first and flags_for(r, h) == first
        again = flags_for(r, h, cache=cache, refresh=True)
        assert again is not first and again == first
        assert flags_for(r, h, cache=cache) is again


# --enable-deterministic-inference per release, read by hand from each wheel before this test
# was written (ddprobe/sources/determinism.py): absent up to 0.5.2; 0.5.4-0.5.11 on flashinfer,
# fa3 and triton (srt/server_args.py); 0.5.21-0.5.23 on six backends (srt/arg_groups/choices.py)
OLD_DET = ("flashinfer", "fa3", "triton")
NEW_DET = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")
DETERMINISTIC = {"0.4.10.post2": None, "0.5.1": None, "0.5.2": None,
                 "0.5.4": (OLD_DET, "srt/server_args.py:128"),
                 "0.5.6.post2": (OLD_DET, "srt/server_args.py:142"),
                 "0.5.10": (OLD_DET, "srt/server_args.py:159"),
                 "0.5.11": (OLD_DET, "srt/server_args.py:164"),
                 "0.5.21": (NEW_DET, "srt/arg_groups/choices.py:111"),
                 "0.5.22": (NEW_DET, "srt/arg_groups/choices.py:113"),
                 "0.5.23": (NEW_DET, "srt/arg_groups/choices.py:113")}


@pytest.mark.parametrize("version", sorted(DETERMINISTIC))
def test_deterministic_inference_backends_per_release(version: str) -> None:
    det = flags_of(version).deterministic
    want = DETERMINISTIC[version]
    if want is None:
        assert not det.flag and not det.supports("triton")
        assert "has no --enable-deterministic-inference" in det.why_not("triton")
        return
    assert det.flag and flags_of(version).has("--enable-deterministic-inference")
    assert (det.backends, det.where) == want
    assert det.supports("triton") and det.supports("fa3") and not det.supports("torch_native")
    assert not det.supports(None)  # the server would pick a backend of its own
    assert det.supports("fa4") == (want[0] == NEW_DET)
    assert "not on torch_native" in det.why_not("torch_native")
