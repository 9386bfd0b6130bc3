"""The deterministic search over the oracle: the search space, the seed plan, the exhaustive sweep, the
robust pick, the user's pins and the knob-by-knob explanation of a winner.

Floor: imports the oracle and the ledger's records only; the run steps (`planner.run`), the MCP server
and the commands sit above it (tests/test_import_contracts.py)."""
