"""Read-only resources: the ledger's runs, a run's trials and scratchpad, the model and GPU catalogs."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from oracle import catalog
from oracle.errors import InputError
from oracle.performance.calibration import calibrated

from .session import Session


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=str)


def register(server: MCPServer, session: Session) -> None:
    """Add the paratune:// resources to `server`."""
    ledger = session.ledger

    def known_run(run_id: int) -> int:
        try:
            return ledger.run(run_id).id
        except InputError:
            raise ResourceNotFoundError(f"no run {run_id} in this ledger; paratune://runs lists them") from None

    @server.resource("paratune://runs", name="runs", mime_type="application/json",
                     description="Every run in the ledger: id, status, workload, cluster, budget.")
    def runs() -> str:
        return _json([r.model_dump(mode="json") for r in ledger.runs()])

    @server.resource("paratune://runs/{run_id}/trials", name="run_trials", mime_type="application/json",
                     description="Every trial of one run, oldest first, with its canonical config and result.")
    def trials(run_id: int) -> str:
        return _json([t.model_dump(mode="json") for t in ledger.trials(known_run(run_id))])

    @server.resource("paratune://runs/{run_id}/scratchpad", name="run_scratchpad", mime_type="application/json",
                     description="The notes of one run, oldest first.")
    def scratchpad(run_id: int) -> str:
        return _json([n.model_dump(mode="json") for n in ledger.notes(known_run(run_id))])

    @server.resource("paratune://catalog/models", name="model_catalog", mime_type="application/json",
                     description="Built-in model cards (Megatron argument names) that a workload can extend.")
    def models() -> str:
        return _json({name: catalog.model_card(name) for name in catalog.model_names()})

    @server.resource("paratune://catalog/gpus", name="gpu_catalog", mime_type="application/json",
                     description="Built-in GPUs: dense peaks, HBM, links, whether published rows calibrate "
                                 "it, and the other names a cluster's gpu_arch may use for it.")
    def gpus() -> str:
        aliases = catalog.aliases_of()
        return _json({name: {**catalog.gpu_card(name), "aliases": aliases.get(name, []),
                             "calibrated": calibrated(catalog.gpu(name))} for name in catalog.gpu_names()})
