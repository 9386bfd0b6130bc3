"""SQLite ledger of tuning runs: trials, scratchpad notes, budget spend, LLM calls, sweep summaries."""

from .history import history_lines, trial_line
from .models import (
    FIDELITIES,
    BudgetLine,
    Calibrated,
    Factors,
    Fidelity,
    LLMCall,
    Measurement,
    Note,
    RunInfo,
    RunStatus,
    SweepSummary,
    TrialRecord,
)
from .schema import APPLICATION_ID
from .store import BudgetExhausted, Ledger

__all__ = [
    "APPLICATION_ID",
    "FIDELITIES",
    "BudgetExhausted",
    "BudgetLine",
    "Calibrated",
    "Factors",
    "Fidelity",
    "LLMCall",
    "Ledger",
    "Measurement",
    "Note",
    "RunInfo",
    "RunStatus",
    "SweepSummary",
    "TrialRecord",
    "history_lines",
    "trial_line",
]
