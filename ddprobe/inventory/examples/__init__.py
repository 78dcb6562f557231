"""The documented inventories shipped with ddprobe (`ddprobe hosts --example gpu|testbed`)."""
from __future__ import annotations

from importlib import resources

from ddprobe.errors import UsageError

EXAMPLES = {"gpu": "hosts.example.yaml", "testbed": "testbed.example.yaml"}


def example_text(name: str) -> str:
    """The example inventory `name` (gpu: every key; testbed: the testbed on an SSH host)."""
    if name not in EXAMPLES:
        raise UsageError(f"--example: one of {', '.join(EXAMPLES)}, got {name!r}")
    return resources.files(__name__).joinpath(EXAMPLES[name]).read_text(encoding="utf-8")
