"""A tuning run on the ledger, shared by the MCP server and the `paratune` commands: scoring a layout
through the ledger's dedupe and budget (`steps`), the user's measurements (`measurements`), the run's
verdict (`verdict`) and the files written for the team (`exports`: trials.jsonl, summary.json, trial
overlays; `plots`: trials.png, breakdown.png).

Floor: above the search and the ledger, below the server (tests/test_import_contracts.py)."""
