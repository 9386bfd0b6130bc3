"""What the LLM investigator and the MCP server's `query_llm` share: which LLM is configured and whether
its key is present (`selection`), the `.env` file reader (`env_file`), the bounds of the LLM phase
(`bounds`) and the class of a failed call (`failures`). Below both in the import order; no DSPy import."""
