"""The LLM phase of a run: the planner, then rounds until the incumbent stops improving or the budget
is spent, every LLM call handed to the usage sink and every step noted in the scratchpad; and the
stdio server it runs against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

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
from .signatures import PlanLayouts
from .tool_gate import Progress, ToolGate
from .usage import UsageSink, drain_usage

Note = Callable[[str], None]


def _scratch(server: ServerConnection, text: str, author: str, note: Note) -> None:
    """Append to the scratchpad; a refusal (e.g. key-like text) is told to the user, not fatal."""
    try:
        server.call("note_to_scratchpad", text=text[:8000], author=author)
    except ToolCallError as exc:
        note(f"scratchpad note by {author} refused: {exc}")


def _plan_step(server: ServerConnection, progress: Progress, run: dict[str, str], note: Note) -> PlanReport:
    """Ask the planner and evaluate its candidates; a failure is reported, and noted, not raised."""
    inputs = {**run, **describe_progress(server)}
    try:
        report = plan(ToolGate(server, progress, origin="llm:plan"), {k: inputs[k] for k in PlanLayouts.input_fields})
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
    llm_calls = failed_calls = cut = 0
    run = describe_run(server)
    has_gpu = server.call("get_cluster")["cluster"]["has_gpu"]
    tool_names = AGENT_TOOLS + (["evaluate_with_benchmark"] if has_gpu else []) + [SUB_LM_TOOL]
    progress = Progress.from_server(server, options.patience)
    start_best = progress.best
    total = options.rounds if options.rounds is not None else server.call("get_budget_status")["max_rounds"]
    report = PlanReport()
    rounds: list[RoundReport] = []
    halted: str | None = None
    with dspy.context(lm=lm, allow_tool_async_sync_conversion=True):
        if not progress.stop_reason:
            try:
                report = _plan_step(server, progress, run, note)
            finally:
                answered, failed, truncated = drain_usage(lm, sink)
                llm_calls, failed_calls, cut = llm_calls + answered, failed_calls + failed, cut + truncated
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
                answered, failed, truncated = drain_usage(lm, sink)
                llm_calls, failed_calls, cut = llm_calls + answered, failed_calls + failed, cut + truncated
            halted = getattr(lm, "stop_reason", None)
            rounds.append(done)
            _scratch(server, round_note(done), f"llm:round{number}", note)
            note(f"LLM round {number}: {done.status}, {done.tool_calls} tool calls, {done.simulate_calls} simulated"
                 + (f" ({done.error})" if done.error else ""))
            hypothesis = done.next_hypothesis or hypothesis
    stop = halted or progress.stop_reason or f"{total} round(s) done"
    return InvestigationReport(model=model, agent_loop=options.agent_loop, plan=report, rounds=rounds,
                               stop_reason=stop, llm_calls=llm_calls, failed_calls=failed_calls, truncated_calls=cut,
                               start_best=start_best, best_tokens_per_s_per_gpu=progress.best)


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
