"""What the assistant reads besides each tool's docstring (its description): the server's instructions, and
each tool's title and behaviour hints."""

# The knob groups the instructions name, each with the registry knobs (oracle/specs/knobs.py) it stands for;
# tests/test_knob_registry.py checks every searched knob (`Knob.axis`) is in a group and every name is a knob.
KNOB_GROUPS: dict[str, tuple[str, ...]] = {
    "TP": ("tp",),
    "PP": ("pp",),
    "EP": ("ep", "etp"),
    "CP": ("cp",),
    "VPP": ("vpp",),
    "pipeline split": ("pp_layout", "pp_first_layers", "pp_last_layers", "pp_embedding_in_split", "pp_loss_in_split"),
    "micro-batch": ("mbs",),
    "recompute": ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules"),
    "FP8": ("fp8",),
    "pipeline schedule": ("pp_schedule",),
    "optimizer sharding": ("use_distributed_optimizer", "use_torch_fsdp2", "use_megatron_fsdp"),
    "MoE dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "use_turbo_deepep"),
    "sync-free MoE stages": ("sync_free_stage",),
    "TP/EP communication overlap": ("tp_comm_overlap", "overlap_moe_expert_parallel_comm"),
}

INSTRUCTIONS = f"""\
paratune projects per-GPU memory and training throughput (tokens/s/GPU) of Megatron-style LLM
training layouts ({", ".join(KNOB_GROUPS)}) on a target cluster running Primus, Megatron-LM
or Megatron-Bridge, and records every trial in a ledger. The cluster's stack and the user's search
constraints (pinned knobs, allowed values, the workload's precision) bind every tool: a proposal that
breaks one comes back illegal with the constraint's code.
A session: open_run (unless the server already has one) -> get_architecture, get_cluster,
get_legal_axes -> run_seed_plan -> propose cross-axis configs, check them with
evaluate_memory_only (free) and score them with evaluate_simulate (budgeted) -> keep notes with
note_to_scratchpad -> export_best. A config is an object of knobs; an absent knob keeps the
workload's own value. Identical layouts are answered from the ledger without spending budget.
Output schemas name the models they hold (EvalResult, ...); the resource paratune://schemas has them whole."""

# title, then MCP's behaviour hints (read_only, destructive, idempotent, open_world) per tool. "Read-only"
# tools record nothing; the evaluate tools record a trial but answer a repeat from the ledger (idempotent);
# export_best overwrites the artifacts in its folder (destructive); query_llm reaches a provider (open world).
HINTS: dict[str, tuple[str, bool, bool, bool, bool]] = {
    "evaluate_memory_only": ("Project memory of a layout", False, False, True, False),
    "evaluate_simulate": ("Project throughput of a layout", False, False, True, False),
    "evaluate_with_benchmark": ("Benchmark a layout on the local GPU", False, False, True, False),
    "validate_config": ("Check a layout's legality", True, False, True, False),
    "explain": ("Explain why a layout wins", True, False, True, False),
    "get_legal_axes": ("Legal values per knob", True, False, True, False),
    "get_history": ("Latest trials", True, False, True, False),
    "get_best": ("Best trial and its launch", True, False, True, False),
    "record_measurement": ("Record a measured trial", False, False, False, False),
    "get_architecture": ("The workload", True, False, True, False),
    "get_cluster": ("The target cluster", True, False, True, False),
    "get_budget_status": ("Budget spent and left", True, False, True, False),
    "note_to_scratchpad": ("Add a note", False, False, False, False),
    "read_scratchpad": ("Read the notes", True, False, True, False),
    "query_llm": ("Ask the configured LLM", False, False, False, True),
    "run_seed_plan": ("Score the seed plan", False, False, True, False),
    "sweep": ("Sweep the whole legal space", False, False, False, False),
    "open_run": ("Open a run", False, False, True, False),
    "export_best": ("Write the run's artifacts", False, True, True, False),
}
