"""Helpers the investigator tests share: small inputs, a real stdio server, scripted LM answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from dspy.utils import DummyLM

from paratune.ledger import Ledger
from paratune.planner.investigator.mcp_client import ServerConnection, stdio_server
from paratune.planner.investigator.phase import investigate
from paratune.planner.investigator.phase_types import InvestigationReport, InvestigatorOptions

from .test_server_common import small_inputs

# Layouts of the small run (Llama 3 8B, GBS 8, 4k sequence, 2 x H200): all legal and fitting.
FITS = [{"fp8": "hybrid"}, {"tp": 2, "fp8": "hybrid"}, {"tp": 2, "mbs": 2}, {"cp": 2}, {"pp": 2},
        {"recompute_granularity": "full"}]


def inputs(folder: Path, *, budget: int = 40, rounds: int = 2, extras: str = "",
           llm: str | None = None) -> tuple[Path, Path]:
    """The server tests' small run on 2 x H200 (the built-in GEMM model: no Origami start-up cost)."""
    workload, cluster = small_inputs(folder, max_perf_calls=budget, llm=llm)
    data = yaml.safe_load(cluster.read_text())
    data["target_cluster"]["gpu_arch"] = "h200"
    data["optimization"]["hbm_capacity_gb"] = 141
    data["optimization"]["budget"]["max_rounds"] = rounds
    data["agent"]["prompt_extras"] = extras
    data["search"] = {"allow": {"fp8": ["none", "hybrid"]}}  # the BF16 workload may try FP8: the user allows it
    cluster.write_text(yaml.safe_dump(data))
    return workload, cluster


@contextmanager
def served(root: Path, **kwargs: Any) -> Iterator[tuple[ServerConnection, Ledger, int]]:
    """`paratune serve` over stdio on a fresh ledger with the small run open, that ledger, the run id."""
    workload, cluster = inputs(root / "inputs", **kwargs)
    with ServerConnection(stdio_server(workload, cluster, root / "ledger.sqlite")) as server, \
            Ledger(root / "ledger.sqlite") as ledger:
        yield server, ledger, server.call("get_budget_status")["run_id"]


def investigate_with(server: ServerConnection, ledger: Ledger, run_id: int, lm: Any, notes: list[str] | None = None,
                     **options: Any) -> InvestigationReport:
    """The LLM phase on the served run, its LLM usage recorded in the ledger."""
    return investigate(server, lm, InvestigatorOptions(**options), model=str(lm.model),
                       sink=lambda usage: ledger.record_llm_call(run_id, **usage.model_dump()),
                       note=(notes if notes is not None else []).append)


def plan_answer(candidates: Any, hypothesis: str = "fp8 and a wider TP should pay") -> dict[str, Any]:
    return {"reasoning": "planning", "hypothesis": hypothesis, "candidates": candidates}


def step(tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ReAct step."""
    return {"next_thought": f"call {tool}", "next_tool_name": tool, "next_tool_args": args or {}}


def summary(findings: str, next_hypothesis: str) -> dict[str, Any]:
    """A round's closing answer (ReAct's extract)."""
    return {"reasoning": "summing up", "findings": findings, "next_hypothesis": next_hypothesis}


def origins(ledger: Ledger, run_id: int) -> dict[str, list[Any]]:
    """Trials by origin."""
    found: dict[str, list[Any]] = {}
    for t in ledger.trials(run_id):
        found.setdefault(t.origin, []).append(t)
    return found


class RecordingLM(DummyLM):
    """DummyLM that keeps the messages of every prompt it is sent (DSPy's history is drained per step)."""

    def __init__(self, answers: list[dict[str, Any]]):
        super().__init__(answers)
        self.prompts: list[list[dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.prompts.append(list(kwargs.get("messages") or []))
        return super().__call__(*args, **kwargs)
