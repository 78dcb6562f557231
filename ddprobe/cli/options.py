"""Every option more than one command takes, declared once: its flags, type, parser, choices
and help (issue 26.3). A command names the spec as its parameter's annotation and gives the
default (a spec never restates a number another module owns: ddprobe/defaults.py):

    def cmd(budgets: options.Budgets = None, as_json: options.Json = False) -> None: ...

Lists of integers are parsed here, at the flag, by ddprobe/intlist.py (one rule set for every
command and for the session logs); a bad value is click's usage error naming the flag (exit 2,
128 under --exit-protocol). Choices are enums whose values are the library's Literal
vocabularies (tests/test_cli_options.py holds them equal). Light on purpose: a TAB completion
imports this module, never the engine.
"""
from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional, cast

import typer

from ddprobe.defaults import MAX_OVERSIZE_FACTOR
from ddprobe.errors import UsageError
from ddprobe.intlist import DEFAULT_WORDS, IntListError, parse_ints, parse_ints_or_default

_SIGNED = re.compile(r"[+-]?[0-9]+")  # a task count (ids are names)

if TYPE_CHECKING:
    from ddprobe.bisect.ladder import Order as OrderName
    from ddprobe.bisect.sweep import GraphMode
    from ddprobe.bisect.verdicts import ExitProtocol as ProtocolName


class Ints(tuple[int, ...]):
    """A parsed integer list (`8,16,32`): positive values, in the order given."""


class IntsOrDefault(tuple[Optional[int], ...]):
    """A parsed integer list where `default` (None) stands for the host's own setting."""


def _ints(text: str) -> Ints:
    try:
        return Ints(parse_ints(text))
    except IntListError as e:
        raise typer.BadParameter(str(e)) from None


def _ints_or_default(text: str) -> IntsOrDefault:
    try:
        return IntsOrDefault(parse_ints_or_default(text))
    except IntListError as e:
        raise typer.BadParameter(str(e)) from None


class NamesOrDefault(tuple[Optional[str], ...]):
    """A comma list of names (a sweep's backends); None: the host's own setting."""


def _names_or_default(text: str) -> NamesOrDefault:
    names = [w.strip() for w in text.split(",")]
    return NamesOrDefault(None if not n or n.lower() in DEFAULT_WORDS else n for n in names)


class TaskWords(tuple[str, ...]):
    """--tasks as given: task ids, or one number N (the suite's first N); () for 'all'. The
    suite resolves them (probes.coding.Suite.select), before any restart."""


def _task_words(text: str) -> TaskWords:
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    if not words:
        raise typer.BadParameter("no task given (ids, a number N, or 'all')")
    if [w.lower() for w in words] == ["all"]:
        return TaskWords()
    if len(words) == 1 and _SIGNED.fullmatch(words[0]):
        try:
            parse_ints(words[0])  # the first N: N >= 1 (ddprobe/intlist.py)
        except IntListError as e:
            raise typer.BadParameter(str(e)) from None
    return TaskWords(words)


class OrderChoice(str, Enum):
    """--order: the values of bisect.ladder.Order."""

    auto = "auto"
    eager_first = "eager-first"
    graph_first = "graph-first"


class ExitProtocolChoice(str, Enum):
    """--exit-protocol: the values of bisect.verdicts.ExitProtocol."""

    bisect = "bisect"


class GraphChoice(str, Enum):
    """A sweep's --graph: the values of bisect.sweep.GraphMode."""

    both = "both"
    on = "on"
    off = "off"


# ----- hosts -----
HOSTS_HELP = "Host, group, or comma list (see `ddprobe hosts`)."
Hosts = Annotated[str, typer.Option("--host", "-H", help=HOSTS_HELP)]
HostsOrResume = Annotated[Optional[str], typer.Option(
    "--host", "-H", help="Host, group, or comma list (see `ddprobe hosts`); identical hosts "
                         "share the cells, differing ones run side by side (with --resume: "
                         "the run's hosts).")]
BreakLock = Annotated[bool, typer.Option("--break-lock", help="Take over a stale host lock.")]

# ----- the server's config -----
Budgets = Annotated[Optional[Ints], typer.Option(
    "--budgets", "-b", parser=_ints,
    help="Draft-tree budgets, e.g. 8,16,32,64 (positive integers; draft tokens = budget + 1).")]
MaxBs = Annotated[Optional[int], typer.Option(
    "--max-bs", min=1,
    help="The server's --cuda-graph-max-bs (default: the inventory's server.max_bs).")]
MaxBsList = Annotated[Optional[IntsOrDefault], typer.Option(
    "--max-bs", parser=_ints_or_default,
    help="--cuda-graph-max-bs values, e.g. 64,16 ('default': the host's server.max_bs).")]
Backend = Annotated[Optional[str], typer.Option(
    "--backend", help="The server's --attention-backend (default: the inventory's "
                      "server.backend).")]
BackendList = Annotated[Optional[NamesOrDefault], typer.Option(
    "--backend", parser=_names_or_default,
    help="--attention-backend values, a comma list ('default' or an empty item: the host's "
         "server.backend).")]
ContextLen = Annotated[Optional[int], typer.Option(
    "--context-len", min=1, help="Context length for sizing buffers (default: what the "
                                 "host's SGLang resolves).")]
KeepServer = Annotated[bool, typer.Option("--keep-server",
                                          help="Leave the last cell's server running.")]

Budget = Annotated[Optional[int], typer.Option(
    "--budget", "-b", min=1, help="Draft-tree budget (default: the inventory's server.budget).")]
Graph = Annotated[bool, typer.Option("--graph/--no-graph",
                                     help="CUDA graphs on (default) or off.")]
Extra = Annotated[Optional[list[str]], typer.Option(
    "--extra", help="Extra launch flags (shell words), e.g. --extra '--mem-fraction-static "
                    "0.8'. Repeatable.")]
Env = Annotated[Optional[list[str]], typer.Option(
    "--env", help="KEY=VALUE for the server's environment. Repeatable.")]
HealthTimeout = Annotated[Optional[float], typer.Option(
    "--health-timeout", help="Seconds to wait for /health_generate (default: the inventory's "
                             "server.health_timeout).")]

# ----- probes -----
TASKS_HELP = "Probe these coding tasks (comma-separated ids), the first N (a number), or 'all'"
Tasks = Annotated[Optional[TaskWords], typer.Option("--tasks", parser=_task_words,
                                                    help=TASKS_HELP + " (default: all).")]
BisectTasks = Annotated[Optional[TaskWords], typer.Option(
    "--tasks", parser=_task_words, help=TASKS_HELP + " (default: 8, one wave of probes).")]

Suite = Annotated[str, typer.Option("--suite",
                                    help="Probe suite: a bundled suite's name or a .json file.")]
Concurrency = Annotated[int, typer.Option("--concurrency", "-c", min=1, max=256,
                                          help="Probe tasks in flight at once (each sends two "
                                               "requests: its chat answer and /generate).")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", min=1,
                                        help="Max new tokens per coding answer.")]

# ----- a bisect's or sweep's plan -----
Repeat = Annotated[int, typer.Option("--repeat", min=1,
                                     help="Run each cell N times; disagreeing repeats = flaky.")]
Order = Annotated[Optional[OrderChoice], typer.Option(
    "--order", case_sensitive=False,
    help="Order of each failure mode's experiments: auto (the default: by expected time to a "
         "decision), eager-first (the eager control first: the textbook order, more restarts) "
         "or graph-first (oversize and max bs before the eager control). --graph-first and "
         "--eager-first are accepted for --order graph-first / eager-first.")]
GraphFirst = Annotated[bool, typer.Option("--graph-first", hidden=True,
                                          help="The same as --order graph-first.")]
EagerFirst = Annotated[bool, typer.Option("--eager-first", hidden=True,
                                          help="The same as --order eager-first.")]
OversizeFactor = Annotated[int, typer.Option(
    "--oversize-factor", min=2, max=MAX_OVERSIZE_FACTOR,
    help="Enlarge the suspect buffers by this factor first (escalated to cover the static "
         "shortfall, or x16, when it does not cure).")]
Resume = Annotated[Optional[str], typer.Option(
    "--resume", help="Continue an interrupted run (RUN_ID): its options and hosts.")]
NoParallel = Annotated[bool, typer.Option("--no-parallel",
                                          help="Never share cells between hosts.")]
ExitProtocolOpt = Annotated[Optional[ExitProtocolChoice], typer.Option(
    "--exit-protocol", case_sensitive=False,
    help="'bisect': exit 0 good, 1 bad, 125 skip, 128 abort (for `git bisect run`).")]

SweepGraph = Annotated[GraphChoice, typer.Option(
    "--graph", case_sensitive=False,
    help="Cells with CUDA graphs and without (both), with only (on) or without only (off).")]

# ----- output -----
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
Events = Annotated[Optional[str], typer.Option(
    "--events", metavar="FILE|-",
    help="Write the run as it happens, one JSON object a line (NDJSON): each cell, each "
         "verdict the moment it is final (verdict_final), and last the --json document "
         "(result) or the error; '-' is stdout.")]
Runs = Annotated[Optional[Path], typer.Option("--runs", envvar="DDPROBE_RUNS",
                                              help="The runs directory (default ./runs).")]


def order_of(order: OrderChoice | None, *, graph_first: bool = False,
             eager_first: bool = False) -> OrderName:
    """--order, or its older spellings --graph-first / --eager-first (not two that differ)."""
    given = [(f"--order {order.value}", order)] if order is not None else []
    given += [("--graph-first", OrderChoice.graph_first)] if graph_first else []
    given += [("--eager-first", OrderChoice.eager_first)] if eager_first else []
    if len({choice for _, choice in given}) > 1:
        raise UsageError(f"{' and '.join(flag for flag, _ in given)} exclude each other")
    return given[0][1].value if given else OrderChoice.auto.value


def protocol_of(choice: ExitProtocolChoice | None) -> ProtocolName | None:
    return None if choice is None else cast("ProtocolName", choice.value)


def graph_of(choice: GraphChoice) -> GraphMode:
    return choice.value
