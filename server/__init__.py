"""MCP server: the oracle, the ledger and the deterministic search as a tool belt over stdio and HTTP."""
