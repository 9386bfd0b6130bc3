"""`paratune tune --dry-run` shows the loop working on every shipped example: the scripted planner's layouts
come from the run's own legal axes and incumbent (`investigator/dry.py`), so at least one is legal, fits
and is simulated as an LLM trial. Small: a 2-call seed plan and the planner only (no rounds)."""

from __future__ import annotations

import pytest

from paratune.ledger import Ledger
from paratune.planner.investigator.dry import DryRunLM
from paratune.planner.investigator.mcp_client import ServerConnection, stdio_server

from .conftest import EXAMPLE_PAIRS, EXAMPLES
from .test_investigator_common import investigate_with


@pytest.mark.parametrize("name", sorted(EXAMPLE_PAIRS))
def test_a_dry_run_simulates_llm_trials_on_every_shipped_example(name, tmp_path):
    workload_file, cluster_file = EXAMPLE_PAIRS[name]
    workload, cluster = EXAMPLES / "workloads" / workload_file, EXAMPLES / "clusters" / cluster_file
    with ServerConnection(stdio_server(workload, cluster, tmp_path / "ledger.sqlite")) as server, \
            Ledger(tmp_path / "ledger.sqlite") as ledger:
        run_id = server.call("run_seed_plan", budget=2)["run_id"]
        report = investigate_with(server, ledger, run_id, DryRunLM("dry-run/scripted"), rounds=0)
        planned = [t for t in ledger.trials(run_id) if t.origin == "llm:plan" and t.fidelity == "simulate"]
    assert report.llm_trials >= 1 and planned, report.plan
    assert report.plan.candidates[-1].status == "rejected"  # the scripted illegal one, with its reasons
    assert report.llm_calls == 1 and not report.failed
