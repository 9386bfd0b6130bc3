"""The LLM phase of a run: the planner, then rounds until the incumbent stops improving or the budget
is spent, every LLM call handed to the usage sink and every step noted in the scratchpad; and the
stdio server it runs against."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dspy

from ..llm.failures import one_line
from .mcp_client import ServerConnection, ToolCallError, stdio_server
from .phase_types import InvestigationReport, InvestigatorOptions, PlanReport, RoundReport
from .planner_module import plan, plan_note
from .prompt_context import describe_progress, describe_run
from .rounds import (
    AGENT_TOOLS,
    LOCAL_INTERPRETER_WARNING,
    SUB_LM_TOOL,
    interpreter_factory,
    round_note,
    run_round,
)
from .signatures import InvestigateRound, PlanLayouts
from .structured import Structured, adapter_for, example_candidate, plan_schema, step_schema, summary_schema
from .tool_gate import Progress, ToolGate
from .usage import Drained, UsageSink, drain_usage

Note = Callable[[str], None]


def _scratch(server: ServerConnection, text: str, author: str, note: Note) -> None:
    """Append to the scratchpad; a refusal (e.g. key-like text) is told to the user, not fatal."""
    try:
        server.call("note_to_scratchpad", text=text[:8000], author=author)
    except ToolCallError as exc:
        note(f"scratchpad note by {author} refused: {exc}")


class PhaseInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during the phase, carrying the report of what it did until then."""

    def __init__(self, report: InvestigationReport):
        super().__init__("interrupted")
        self.report = report


def typed_adapter(server: ServerConnection, mode: Structured, tool_names: list[str],
                  legal_axes: dict[str, Any]) -> dspy.Adapter:
    """The adapter every call of the phase goes through, with the schemas of the planner's answer, a ReAct
    step over `tool_names` (and ReAct's finish) and a round's summary (`structured`)."""
    by_name = {t.name: t.input_schema for t in server.tools}
    tools = {name: by_name[name] for name in tool_names if name in by_name} | {"finish": {}}
    step = frozenset(("next_thought", "next_tool_name", "next_tool_args"))
    summary = frozenset([*InvestigateRound.output_fields, "reasoning"])
    return adapter_for(mode, {frozenset(PlanLayouts.output_fields): plan_schema(legal_axes),
                              step: step_schema(tools, legal_axes), summary: summary_schema(InvestigateRound)})


def _plan_step(server: ServerConnection, progress: Progress, run: dict[str, str], note: Note) -> PlanReport:
    """Ask the planner and evaluate its candidates; a failure is reported, and noted, not raised."""
    inputs = {**run, **describe_progress(server)}
    example = example_candidate(json.loads(run["legal_axes"]), json.loads(run["architecture"]).get("baseline", {}))
    try:
        report = plan(ToolGate(server, progress, origin="llm:plan"), {k: inputs[k] for k in PlanLayouts.input_fields},
                      example)
    except Exception as exc:  # provider error or malformed output: the rounds still run
        report = PlanReport(error=one_line(exc))
    _scratch(server, plan_note(report) if report.error is None else f"plan failed: {report.error}", "llm:plan", note)
    note(f"LLM plan: {sum(c.status == 'simulated' for c in report.candidates)} of {len(report.candidates)} "
         f"candidates simulated" + (f" ({report.error})" if report.error else ""))
    return report


def investigate(server: ServerConnection, lm: dspy.BaseLM, options: InvestigatorOptions, *, model: str,
                sink: UsageSink, note: Note = print) -> InvestigationReport:
    """Plan, then investigate in rounds, over a connected server's active run."""
    if options.agent_loop == "rlm":
        interpreter_factory(options)  # a missing sandbox is a setup error: say so before any LLM call
        if options.allow_local_interpreter:
            note(LOCAL_INTERPRETER_WARNING)
    drained = Drained()
    run = describe_run(server)
    has_gpu = server.call("get_cluster")["cluster"]["has_gpu"]
    tool_names = AGENT_TOOLS + (["evaluate_with_benchmark"] if has_gpu else []) + [SUB_LM_TOOL]
    adapter = typed_adapter(server, getattr(lm, "structured", "markers"), tool_names, json.loads(run["legal_axes"]))
    progress = Progress.from_server(server, options.patience)
    start_best = progress.best
    total = options.rounds if options.rounds is not None else server.call("get_budget_status")["max_rounds"]
    report = PlanReport()
    rounds: list[RoundReport] = []
    halted: str | None = None

    def so_far(stop: str) -> InvestigationReport:
        return InvestigationReport(model=model, agent_loop=options.agent_loop, plan=report, rounds=rounds,
                                   stop_reason=stop, llm_calls=drained.parsed,
                                   failed_calls=sum(drained.failures.values()), failures=dict(drained.failures),
                                   truncated_calls=drained.truncated, start_best=start_best,
                                   best_tokens_per_s_per_gpu=progress.best)

    with dspy.context(lm=lm, adapter=adapter, allow_tool_async_sync_conversion=True):
        try:
            if not progress.stop_reason:
                try:
                    report = _plan_step(server, progress, run, note)
                finally:
                    drained += drain_usage(lm, sink)
                halted = getattr(lm, "stop_reason", None)
            hypothesis = report.hypothesis or "find cross-axis layouts that beat the incumbent"
            for number in range(1, total + 1):
                if progress.stop_reason or halted:
                    break
                inputs = {"this_round": f"round {number} of {total}", "hypothesis": hypothesis,
                          "run": f"{run['architecture']}\n{run['cluster']}", "knobs": run["knobs"],
                          "guidance": run["guidance"], **describe_progress(server)}
                try:
                    done = run_round(server, progress, options, lm, tool_names, number, inputs)
                finally:
                    drained += drain_usage(lm, sink)
                halted = getattr(lm, "stop_reason", None)
                rounds.append(done)
                _scratch(server, round_note(done), f"llm:round{number}", note)
                note(f"LLM round {number}: {done.status}, {done.tool_calls} tool calls, {done.simulate_calls} "
                     "simulated" + (f" ({done.error})" if done.error else ""))
                hypothesis = done.next_hypothesis or hypothesis
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the caller closes the run, with what the phase did
            raise PhaseInterrupted(so_far("interrupted (Ctrl-C or SIGTERM)")) from None
    return so_far(halted or progress.stop_reason or f"{total} round(s) done")


@contextmanager
def serve_run(workload_file: str | Path, cluster_file: str | Path, ledger: Path, run_id: int,
              extra: tuple[str, ...] = ()) -> Iterator[ServerConnection]:
    """`paratune serve` over stdio on the run's ledger (with the `extra` search flags), checked to have
    opened run `run_id`."""
    with ServerConnection(stdio_server(workload_file, cluster_file, ledger, extra)) as server:
        served = server.call("get_budget_status")["run_id"]
        if served != run_id:
            raise ToolCallError(f"the server opened run {served}, not run {run_id}")
        yield server
