"""The bundled DSPy client: an LLM planner and tool-using rounds that drive the paratune MCP server.

It reaches the oracle only through the server's tools (never by import), so it sees exactly what an
external assistant sees. Submodules are imported on use; `phase.serve_run` and `phase.investigate`
are the entry points.
"""
