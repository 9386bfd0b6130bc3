"""Everything above the oracle and the ledger that finds, explains and launches a layout, by floor
(lowest first; each floor imports only those below it, tests/test_import_contracts.py):

- `llm/`: which LLM is configured, its keys, the LLM phase's bounds, failure classes (nothing of ours).
- `search/`: the deterministic search: space, seed plan, sweep, pick, pins, explanation.
- `launch/`: a layout as each stack's launch command and files.
- `run/`: a tuning run on the ledger (scoring with dedupe and budget, measurements, verdict, the run's
  files and plots), shared by the MCP server (`paratune.server`, the next floor up) and the commands.
- `investigator/`: the DSPy client; it reaches the oracle only through the server's MCP tools.
- `cli/`: the `paratune` commands and the `tune` orchestration: the only code that starts the server.
"""
