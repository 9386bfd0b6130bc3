"""One investigation round: dspy.ReAct (default) or dspy.RLM over the server's tools, through a gate."""

from __future__ import annotations

import functools
from collections.abc import Callable

import dspy
from dspy.primitives.code_interpreter import CodeInterpreter
from dspy.primitives.local_interpreter import LocalInterpreter

from ..llm.failures import one_line
from .mcp_client import ServerConnection
from .phase_types import InvestigatorOptions, RoundReport
from .react_loop import SteadyReAct
from .signatures import InvestigateRound
from .tool_gate import Progress, ToolGate

AGENT_TOOLS = ["evaluate_memory_only", "evaluate_simulate", "validate_config", "get_legal_axes", "get_history",
               "get_best", "get_budget_status", "note_to_scratchpad", "read_scratchpad"]
SUB_LM_TOOL = "query_llm"  # ReAct's tool-less sub-LM; RLM has its own llm_query on the client's LM
LOCAL_INTERPRETER_WARNING = ("WARNING: --allow-local-interpreter: dspy.RLM runs LLM-written Python unsandboxed on "
                             "this machine, with your files, environment (API keys included) and network")


class SandboxUnavailable(Exception):
    """The RLM loop has no code interpreter it may use."""


def interpreter_factory(options: InvestigatorOptions, timeout_s: float | None = None) -> Callable[[], CodeInterpreter]:
    """DSPy's Deno sandbox, or the unsandboxed local interpreter when the user opted in, whose every
    execution is bounded by `timeout_s` (a timeout kills the worker's process group)."""
    problem = options.sandbox_problem()
    if problem:
        raise SandboxUnavailable(problem)
    if options.allow_local_interpreter:
        return functools.partial(LocalInterpreter, execution_timeout=timeout_s)
    return dspy.PythonInterpreter


def make_agent(options: InvestigatorOptions, tools: list[dspy.Tool], lm: dspy.BaseLM) -> dspy.Module:
    """The round's agent; the gate caps its tool calls at calls_per_round (+1 step for ReAct's finish);
    RLM's code runs at most one LLM call's time per execution, its sub-LM at most calls_per_round calls."""
    if options.agent_loop == "react":
        return SteadyReAct(InvestigateRound, tools=tools, max_iters=options.calls_per_round + 1)
    bounds = getattr(lm, "bounds", None)
    timeout = bounds.call_timeout_s if bounds is not None else options.call_timeout_s
    return dspy.RLM(InvestigateRound, tools=[t for t in tools if t.name != SUB_LM_TOOL], sub_lm=lm,
                    max_iters=options.calls_per_round, max_llm_calls=options.calls_per_round,
                    interpreter_factory=interpreter_factory(options, timeout))


def run_round(server: ServerConnection, progress: Progress, options: InvestigatorOptions, lm: dspy.BaseLM,
              tool_names: list[str], number: int, inputs: dict[str, str]) -> RoundReport:
    """Run one round; a failure of the LM, its output or its code worker (a crash, a timeout) fails this
    round only: the next one starts a fresh worker."""
    gate = ToolGate(server, progress, origin=f"llm:round{number}", max_calls=options.calls_per_round)
    agent = make_agent(options, server.dspy_tools(tool_names, gate), lm)
    try:
        prediction = agent(**inputs)
    except Exception as exc:  # provider errors, malformed output, a dead code worker: the next round goes on
        return RoundReport(round=number, status="failed", error=one_line(exc), tool_calls=gate.calls,
                           simulate_calls=gate.simulated)
    return RoundReport(round=number, status="ok", findings=str(prediction.findings),
                       next_hypothesis=str(prediction.next_hypothesis), tool_calls=gate.calls,
                       simulate_calls=gate.simulated)


def round_note(report: RoundReport) -> str:
    """The scratchpad note of a round."""
    if report.status == "failed":
        return f"round {report.round} failed ({report.tool_calls} tool calls): {report.error}"
    return f"round {report.round}: {report.findings}\nnext: {report.next_hypothesis}"
