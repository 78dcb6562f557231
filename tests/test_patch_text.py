"""The pure patch engine: parse, apply with exact context, reverse, make; bad input."""
from __future__ import annotations

import zipfile

import pytest
from conftest import _wheel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddprobe.errors import PatchError
from ddprobe.hostside.patchtext import (
    Patch,
    PatchTextError,
    apply_file,
    apply_patch,
    file_state,
    format_patch,
    make_file_patch,
    parse_patch,
    sha256_text,
)
from ddprobe.sources.patches import list_patches, load_patch

TRITON = "srt/layers/attention/triton_backend.py"


@pytest.fixture(scope="module")
def triton_0510() -> str:
    with zipfile.ZipFile(_wheel("0.5.10")) as z:
        return z.read("sglang/" + TRITON).decode("utf-8")


def test_shipped_patch_parses_applies_and_reverses_on_real_file(triton_0510: str) -> None:
    p = load_patch("sglang-0.5.10-triton-custom-mask")
    assert p.id == "sglang-0.5.10-triton-custom-mask" and p.package == "sglang"
    assert p.versions == ("0.5.10",) and p.paths == (TRITON,)
    assert p.expected_sha(TRITON) == sha256_text(triton_0510)
    out = apply_patch(p, {TRITON: triton_0510})[TRITON]
    assert "mask_numel = max_num_tokens * self.max_context_len" in out
    assert "(max_num_tokens * self.max_context_len),\n                dtype=torch.uint8" \
        not in out
    assert apply_patch(p, {TRITON: out}, reverse=True)[TRITON] == triton_0510
    assert file_state(p.files[0], triton_0510) == "original"
    assert file_state(p.files[0], out) == "patched"
    assert file_state(p.files[0], out.replace("mask_numel,", "mask_numel ,")) == "neither"
    assert p.applies_to_version("0.5.10") and not p.applies_to_version("0.5.2")
    assert any(x.id == p.id for x in list_patches())


def test_hunks_move_with_offset_but_never_fuzz(triton_0510: str) -> None:
    p = load_patch("sglang-0.5.10-triton-custom-mask")
    shifted = "# one\n# two\n" + triton_0510
    out = apply_patch(p, {TRITON: shifted})[TRITON]
    assert out.startswith("# one\n# two\n") and "mask_numel" in out
    edited = triton_0510.replace("            self.cuda_graph_custom_mask = torch.zeros(\n"
                                 "                (max_num_tokens * self.max_context_len),",
                                 "            self.cuda_graph_custom_mask = torch.zeros(\n"
                                 "                (max_num_tokens * self.max_context_len * 2),")
    with pytest.raises(PatchTextError) as ei:
        apply_patch(p, {TRITON: edited})
    e = ei.value
    assert e.hunk == 1 and e.path == TRITON
    assert "hunk 1 (@@ -476,8 +476,22 @@) does not apply: context mismatch" in str(e)
    assert isinstance(e, PatchError) and e.exit_code == 13


@pytest.mark.parametrize("text,match", [
    ("# id: x\n--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n",
     r"hunk 1 \(@@ -1,3 \+1,3 @@\) has 2 old / 2 new lines, its header says 3 / 3"),
    ("# id: x\n--- a/f.py\n@@ -1 +1 @@\n-a\n+b\n", "must be followed by a '\\+\\+\\+ ' line"),
    ("# id: x\n--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
     "unsafe or empty path"),
    ("# id: x\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+a\n", "not supported"),
    ("# id: x\n--- a/f.py\n+++ b/f.py\n", "no hunks"),
    ("# id: x\nhello\n", "unexpected text before the diff"),
    ("# id: x\n", "no diff found"),
    ("--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a\n+b\n", "missing or invalid patch id"),
    ("# id: x\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @ nope\n-a\n+b\n", "malformed hunk header"),
    ("# id: x\n# sha256: f.py 123\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a\n+b\n",
     "bad sha256 header"),
])
def test_malformed_patches_are_one_clear_error(text: str, match: str) -> None:
    with pytest.raises(PatchTextError, match=match):
        parse_patch(text, source="bad.patch")


def test_error_names_the_patch_file_and_line() -> None:
    with pytest.raises(PatchTextError) as ei:
        parse_patch("# id: x\n--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,3 @@\n a\n", source="p.patch")
    assert str(ei.value).startswith("p.patch:4: ") and ei.value.line == 4


def test_missing_file_in_this_install() -> None:
    p = parse_patch("# id: x\n--- a/gone.py\n+++ b/gone.py\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchTextError, match="gone.py: file not found in this install"):
        apply_patch(p, {"other.py": "a\n"})


def test_no_newline_at_eof_and_crlf_round_trip() -> None:
    for old, new in [("a\nb", "a\nc\n"), ("a\r\nb\r\n", "a\r\nB\r\nc\r\n"), ("", "x\n"),
                     ("x\n", "")]:
        fp = make_file_patch("f", old, new)
        assert fp is not None
        p = parse_patch(format_patch(Patch("t", (fp,))))
        assert apply_file(old, p.files[0]) == new
        assert apply_file(new, p.files[0].reversed()) == old
    assert make_file_patch("f", "same\n", "same\n") is None


lines = st.lists(st.sampled_from(["a", "b", "def f():", "    return 1", "", "x = [1]",
                                  "# c", "\tz"]), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=lines, b=lines, trail_a=st.booleans(), trail_b=st.booleans())
def test_property_make_format_parse_apply_reverse(a: list[str], b: list[str], trail_a: bool,
                                                  trail_b: bool) -> None:
    old = "\n".join(a) + ("\n" if trail_a and a else "")
    new = "\n".join(b) + ("\n" if trail_b and b else "")
    fp = make_file_patch("m.py", old, new, context=2)
    if old == new:
        assert fp is None
        return
    assert fp is not None
    p = parse_patch(format_patch(Patch("prop", (fp,))))
    assert apply_patch(p, {"m.py": old})["m.py"] == new
    assert apply_patch(p, {"m.py": new}, reverse=True)["m.py"] == old


def test_a_zero_line_hunk_followed_by_no_newline_is_a_patch_text_error() -> None:
    """Expected: `@@ -1,0 +1,0 @@` then `\\ No newline at end of file` (the marker has no line
    to belong to) is PatchTextError naming the file, hunk and line, never an IndexError."""
    text = ("# id: zero-hunk\n--- a/srt/x.py\n+++ b/srt/x.py\n@@ -1,0 +1,0 @@\n"
            "\\ No newline at end of file\n")
    with pytest.raises(PatchTextError, match=r"srt/x\.py: hunk 1 .*No newline") as e:
        parse_patch(text, source="zero.patch")
    assert e.value.line == 5
