"""Playbooks: YAML steps that chain ddprobe's library calls on one host.

    pb = load_playbook("playbooks/ddtree-graph-buffers.yaml", host, overrides={"budgets": "8,16"})
    result = run_playbook(pb, host, keep_patches=False, on_event=print_progress)

`load_playbook` checks everything (keys, actions, arguments, variables, conditions, whether each
action's library function exists) and raises ConfigError with file:line before anything runs.
"""
from __future__ import annotations

from ddprobe.playbook.actions import (
                                      ActionRegistry,
                                      ActionResult,
                                      ActionSpec,
                                      ActionUnavailable,
                                      Arg,
)
from ddprobe.playbook.builtin import StepFailed, builtin_registry
from ddprobe.playbook.runner import PlaybookResult, StepEvent, StepOutcome, run_playbook
from ddprobe.playbook.schema import Playbook, StepSpec, Template, load_playbook, parse_var_overrides

__all__ = ["ActionRegistry", "ActionResult", "ActionSpec", "ActionUnavailable", "Arg",
           "Playbook", "PlaybookResult", "StepEvent", "StepFailed", "StepOutcome", "StepSpec",
           "Template", "builtin_registry", "load_playbook", "parse_var_overrides",
           "run_playbook"]
