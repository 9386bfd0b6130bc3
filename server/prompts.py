"""The `tune_workload` prompt: walks a chat user through one tuning session."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

_STEPS = """\
You are helping me choose the parallel layout of a large training run with the paratune tools.
{opening}
1. Call get_architecture, get_cluster and get_legal_axes; tell me in a few lines what the model is,
   what the cluster offers (world size, usable memory per GPU) and which knobs have room to move.
2. Call run_seed_plan, then get_history and get_best; summarise the incumbent (tokens/s/GPU, memory,
   the knobs that differ from the baseline) and what the seed plan ruled out.
3. Propose a few cross-axis layouts the seed plan did not try (e.g. TP x PP x EP together with
   recompute and micro-batch), each with a one-line reason. Check each with validate_config or
   evaluate_memory_only (free), then score the promising ones with evaluate_simulate; watch
   get_budget_status, since every new simulate call spends budget. Record hypotheses and results with
   note_to_scratchpad. Stop when two rounds in a row do not improve the incumbent or the budget is spent.
4. Call export_best with out_dir "{out_dir}" and show me the winner, its stack and its launch
   command, and how it compares with the baseline.
Ask me before anything that spends more than a handful of simulate calls at once."""


def register(server: MCPServer) -> None:
    """Add the `tune_workload` prompt to `server`."""

    @server.prompt(name="tune_workload", title="Tune a training layout",
                   description="A guided session: legal axes, seed plan, cross-axis proposals, export.")
    def tune_workload(workload: str = "", cluster: str = "", out_dir: str = "paratune-out") -> str:
        if workload and cluster:
            opening = f'First call open_run with workload "{workload}" and cluster "{cluster}".'
        else:
            opening = "If no run is open yet, ask me for the workload and cluster files and call open_run."
        return _STEPS.format(opening=opening, out_dir=out_dir)
