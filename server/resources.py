"""Read-only resources: the ledger's runs, a run's trials and scratchpad, the model and GPU catalogs."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from paratune.ledger import Ledger
from paratune.oracle import catalog
from paratune.oracle.errors import InputError, clip
from paratune.oracle.performance.calibration import calibrated

from .schemas import SHARED_URI
from .session import Session

PAGE = 200  # trials per page of the trials resource


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=str)


def _known_run(ledger: Ledger, run_id: str) -> int:
    if not run_id.isdigit():
        raise ResourceNotFoundError(f"run id {clip(run_id)!r} is not a number; paratune://runs lists them")
    try:
        return ledger.run(int(run_id)).id
    except InputError:
        raise ResourceNotFoundError(f"no run {run_id} in this ledger; paratune://runs lists them") from None


def _page_of(ledger: Ledger, run_id: str, page: str) -> str:
    """One page of a run's trials, as the trials resources serve it."""
    if not page.isdigit() or int(page) < 1:
        raise ResourceNotFoundError(f"page {clip(page)!r} is not a page number (1, 2, ...)")
    run, number = _known_run(ledger, run_id), int(page)
    total = ledger.trial_count(run)
    pages = max(1, -(-total // PAGE))
    if number > pages:
        raise ResourceNotFoundError(f"run {run} has {pages} page(s) of {PAGE} trials")
    rows = ledger.trials_page(run, (number - 1) * PAGE, PAGE)
    return _json({"run_id": run, "page": number, "pages": pages, "per_page": PAGE, "trials_total": total,
                  "next": f"paratune://runs/{run}/trials/page/{number + 1}" if number < pages else None,
                  "trials": [t.model_dump(mode="json") for t in rows]})


def register(server: MCPServer, session: Session, shared_schemas: dict[str, Any]) -> None:
    """Add the paratune:// resources to `server`; `shared_schemas` is the tools' whole output schemas, each model
    once (`schemas.shared`)."""
    ledger = session.ledger

    @server.resource("paratune://runs", name="runs", mime_type="application/json",
                     description="Every run in the ledger: id, status, workload, cluster, budget.")
    def runs() -> str:
        return _json([r.model_dump(mode="json") for r in ledger.runs()])

    @server.resource("paratune://runs/{run_id}/trials", name="run_trials", mime_type="application/json",
                     description=f"The first page ({PAGE} trials, oldest first, each with its canonical config and "
                                 "result) of one run; `next` names the following page.")
    def trials(run_id: str) -> str:
        return _page_of(ledger, run_id, "1")

    @server.resource("paratune://runs/{run_id}/trials/page/{page}", name="run_trials_page",
                     mime_type="application/json", description=f"Page `page` ({PAGE} trials) of one run's trials.")
    def trials_page(run_id: str, page: str) -> str:
        return _page_of(ledger, run_id, page)

    @server.resource("paratune://runs/{run_id}/scratchpad", name="run_scratchpad", mime_type="application/json",
                     description="The notes of one run, oldest first.")
    def scratchpad(run_id: str) -> str:
        return _json([n.model_dump(mode="json") for n in ledger.notes(_known_run(ledger, run_id))])

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


    @server.resource(SHARED_URI, name="schemas", mime_type="application/schema+json",
                     description="The tools' whole output schemas: `tools.<name>` per tool, each model they name "
                                 "once in `$defs`.")
    def whole_schemas() -> str:
        return _json(shared_schemas)
