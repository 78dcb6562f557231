"""The shared server-test helpers (tests/server_util.py) checked themselves."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from server_util import TIME_SCALE, inventory_text, procs_with


def test_procs_with_finds_a_process_by_its_environment() -> None:
    """A child started with a unique variable is found, and nothing else is (the old form looked
    for sys.executable, which is not in the command line when pytest runs as `python -m`)."""
    import uuid
    needle = f"DDPROBE_TEST_NEEDLE={uuid.uuid4().hex}"
    child = subprocess.Popen(["sleep", "30"], env={**os.environ, needle.split("=")[0]:
                                                  needle.split("=")[1]})
    try:
        assert procs_with(needle) == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert procs_with(needle) == []
    assert procs_with("no-such-needle-4f1c2a") == []


def test_inventory_text_parses(tmp_path: Path) -> None:
    from ddprobe.inventory import load_inventory
    p = tmp_path / "hosts.yaml"
    p.write_text(inventory_text("gpu-a", tmp_path, 1234, tmp_path / "w", scenario="hang"))
    h = load_inventory(str(p)).get("gpu")
    assert h.package == "ddtestbed" and h.server.port == 1234
    assert h.server.args == ("--testbed-scenario", "hang") and h.server.budget_flag == "ddtree"
    assert h.env_dict["DDTESTBED_TIME_SCALE"] == TIME_SCALE
