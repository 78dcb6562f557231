"""`ddprobe testbed install|serve` through typer's CliRunner, on a Typer app that registers it."""
from __future__ import annotations

from pathlib import Path

import typer
from testbed_util import write_fixture_suite
from typer.testing import CliRunner

from ddprobe.cli.testbed import register
from ddprobe.errors import ConfigError


def app() -> typer.Typer:
    main = typer.Typer()

    @main.callback()
    def root() -> None:
        """ddprobe"""

    register(main)
    return main


def test_install_then_up_to_date_then_kept_patch(tmp_path: Path) -> None:
    suite = write_fixture_suite(tmp_path / "coding.json")
    args = ["testbed", "install", "--prefix", str(tmp_path / "p"), "--suite", str(suite)]
    first = CliRunner().invoke(app(), args, catch_exceptions=False)
    assert first.exit_code == 0 and "installed " in first.output
    assert (tmp_path / "p/ddtestbed/launch_server.py").is_file()
    assert "up to date: " in CliRunner().invoke(app(), args, catch_exceptions=False).output
    linear = tmp_path / "p/ddtestbed/srt/layers/linear.py"
    linear.write_text(linear.read_text() + "# patched\n")
    kept = CliRunner().invoke(app(), args, catch_exceptions=False)
    assert "kept locally modified file ddtestbed/srt/layers/linear.py" in kept.output
    forced = CliRunner().invoke(app(), args + ["--force"], catch_exceptions=False)
    assert forced.exit_code == 0 and "# patched" not in linear.read_text()


def test_install_with_a_missing_suite_is_a_config_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app(), ["testbed", "install", "--prefix", str(tmp_path),
                                     "--suite", str(tmp_path / "nope.json")])
    assert isinstance(res.exception, ConfigError)
    assert "coding suite not found" in str(res.exception)


def test_serve_passes_flags_to_the_server_and_exits_2_on_unknown_ones() -> None:
    res = CliRunner().invoke(app(), ["testbed", "serve", "--model-path", "m", "--no-such-flag"])
    assert res.exit_code == 2
    assert "unrecognized arguments: --no-such-flag" in res.output
