"""One investigation round: dspy.ReAct (default) or dspy.RLM over the server's tools, through a gate."""

from __future__ import annotations

import os
from collections.abc import Callable

import dspy
from dspy.primitives.code_interpreter import CodeInterpreter
from dspy.primitives.local_interpreter import LocalInterpreter

from .gate import Progress, ToolGate
from .mcp_client import ServerConnection
from .models import InvestigatorOptions, RoundReport
from .signatures import InvestigateRound

AGENT_TOOLS = ["evaluate_memory_only", "evaluate_simulate", "validate_config", "get_legal_axes", "get_history",
               "get_best", "get_budget_status", "note_to_scratchpad", "read_scratchpad"]
SUB_LM_TOOL = "query_llm"  # ReAct's tool-less sub-LM; RLM has its own llm_query on the client's LM
LOCAL_INTERPRETER_WARNING = ("WARNING: --allow-local-interpreter: dspy.RLM runs LLM-written Python unsandboxed on "
                             "this machine, with your files, environment (API keys included) and network")


class SandboxUnavailable(Exception):
    """The RLM loop has no code interpreter it may use."""


def one_line(exc: BaseException) -> str:
    """An exception as one short line for the scratchpad and the report, with the value of any key or
    token variable in this environment blanked out (provider errors may quote what they were sent)."""
    text = " ".join(str(exc).split())
    for name, value in os.environ.items():
        if name.endswith(("_KEY", "_TOKEN")) and len(value) >= 8:
            text = text.replace(value, "***")
    return f"{type(exc).__name__}: {text[:300]}"


def interpreter_factory(options: InvestigatorOptions) -> Callable[[], CodeInterpreter]:
    """DSPy's Deno sandbox, or the unsandboxed local interpreter when the user opted in."""
    problem = options.sandbox_problem()
    if problem:
        raise SandboxUnavailable(problem)
    return LocalInterpreter if options.allow_local_interpreter else dspy.PythonInterpreter


def make_agent(options: InvestigatorOptions, tools: list[dspy.Tool], lm: dspy.BaseLM) -> dspy.Module:
    """The round's agent; the gate caps its tool calls at calls_per_round (+1 step for ReAct's finish)."""
    if options.agent_loop == "react":
        return dspy.ReAct(InvestigateRound, tools=tools, max_iters=options.calls_per_round + 1)
    return dspy.RLM(InvestigateRound, tools=[t for t in tools if t.name != SUB_LM_TOOL], sub_lm=lm,
                    max_iters=options.calls_per_round, interpreter_factory=interpreter_factory(options))


def run_round(server: ServerConnection, progress: Progress, options: InvestigatorOptions, lm: dspy.BaseLM,
              tool_names: list[str], number: int, inputs: dict[str, str]) -> RoundReport:
    """Run one round; a failure of the LM or its output is reported, not raised (a broken code sandbox is:
    every later round would fail the same way)."""
    gate = ToolGate(server, progress, origin=f"llm:round{number}", max_calls=options.calls_per_round)
    agent = make_agent(options, server.dspy_tools(tool_names, gate), lm)
    try:
        prediction = agent(**inputs)
    except dspy.CodeInterpreterError:
        raise
    except Exception as exc:  # provider errors, malformed output: the next round goes on
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
