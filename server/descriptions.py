"""What the assistant reads: the server's instructions and each tool's description."""

INSTRUCTIONS = """\
paratune projects per-GPU memory and training throughput (tokens/s/GPU) of Megatron-style LLM
training layouts (TP, PP, EP, CP, VPP, micro-batch, recompute, FP8, pipeline schedule, optimizer
sharding, MoE dispatcher, TP/EP communication overlap) on a target cluster running Primus, Megatron-LM
or Megatron-Bridge, and records every trial in a ledger. The cluster's stack and the user's search
constraints (pinned knobs, allowed values, the workload's precision) bind every tool: a proposal that
breaks one comes back illegal with the constraint's code.
A session: open_run (unless the server already has one) -> get_architecture, get_cluster,
get_legal_axes -> run_seed_plan -> propose cross-axis configs, check them with
evaluate_memory_only (free) and score them with evaluate_simulate (budgeted) -> keep notes with
note_to_scratchpad -> export_best. A config is an object of knobs; an absent knob keeps the
workload's own value. Identical layouts are answered from the ledger without spending budget."""

_CONFIG = ("`config` is an object of TrialConfig knobs (tp, pp, ep, cp, etp, vpp, mbs, gbs, pp_schedule, "
           "recompute_granularity, recompute_method, recompute_num_layers, fp8, use_distributed_optimizer, "
           "use_torch_fsdp2, use_megatron_fsdp, moe_token_dispatcher_type, moe_flex_dispatcher_backend, "
           "use_turbo_deepep, sync_free_stage, tp_comm_overlap, overlap_moe_expert_parallel_comm, cuda_graph_impl, "
           "overlap_grad_reduce, cross_entropy_loss_fusion, the pipeline split knobs, recompute_modules, "
           "grad_reduce_in_fp32, fp8_param_gather, optimizer_cpu_offload); "
           "absent knobs keep the workload's values, {} is the baseline.")

_ILLEGAL = ("An illegal layout is not an error: it comes back with legal=false and every violated rule "
            "(stable codes), is recorded, and spends no budget.")

TOOLS: dict[str, str] = {
    "evaluate_memory_only": (
        "Legality and projected per-GPU memory (GiB, most-loaded pipeline stage, with a breakdown) of one "
        "layout. Free: spends no budget, takes about a millisecond. Call it before evaluate_simulate when "
        f"unsure a layout fits (fits=false means it would run out of memory). {_CONFIG} {_ILLEGAL} Returns the "
        "trial id, whether the ledger already had it (cached), the memory_only budget line and the EvalResult."
    ),
    "evaluate_simulate": (
        "Legality, memory and projected throughput of one layout: iteration_ms, tokens_per_s_per_gpu (the "
        "objective, higher is better), TFLOP/s per GPU, MFU and a time breakdown. Costs one call of the run's "
        "simulate budget (max_perf_calls) unless the same layout was simulated before (cached=true, free); "
        f"when the budget is spent the call fails and says so. {_CONFIG} {_ILLEGAL} Returns the trial id, cached, "
        "the simulate budget line after the call and the EvalResult."
    ),
    "evaluate_with_benchmark": (
        "Measure one layout on the GPU at hand (one layer of each type timed with torch, the rest "
        "extrapolated). Costs one call of the benchmark budget and needs a GPU (cluster has_gpu) and a build "
        "with benchmark mode; otherwise it fails with the reason, and evaluate_simulate is the tool to use. "
        f"{_CONFIG} Returns the same shape as evaluate_simulate."
    ),
    "validate_config": (
        "Check one layout against every legality rule and search constraint (stack_knob, stack_value, "
        "constraint_precision, constraint_fix, constraint_allow, constraint_exclude) without evaluating or "
        "recording it. Free and instant. "
        f"{_CONFIG} Returns legal, the violations (code and sentence), the resolved effective config with its "
        "canonical key, and the derived data-parallel size."
    ),
    "explain": (
        "Why one layout beats another: from_config (default {}, the workload's own layout) to to_config "
        "(default: the run's pick, as export_best picks). Returns both EvalResults, the path of single-knob "
        "changes between "
        "them (a knob with the knobs that only qualify it; two knobs when only legal together), each "
        "re-projected with its tokens/s/GPU and memory delta and the same change's gain on the baseline "
        "alone (knobs interact: the order matters, and `order` says how it was chosen), and the "
        "term-by-term difference of the two time breakdowns (ms/iteration: compute, recompute, TP/CP/EP/FSDP "
        "communication, exposed DP communication, pipeline bubble, optimizer) and memory breakdowns (GiB: "
        "weights, grads, optimizer, activations, buffers). Free and not recorded; takes a second or two."
    ),
    "get_legal_axes": (
        "The values each knob may take on its own for this model on this cluster (divisibility of heads, "
        "layers, experts, sequence, world size), limited to what the cluster's stack has and the search "
        "constraints allow (a knob the stack lacks shows only its off value), plus the world size. Free. "
        "Call it first when proposing "
        "layouts; cross-axis rules (TP*PP*CP*DP = world, GBS divisible by MBS*DP, ...) are checked by "
        "validate_config and the evaluate tools."
    ),
    "get_history": (
        "The run's latest k trials, oldest first, one line each: trial id, fidelity, origin, the knobs that "
        "differ from the baseline, then legality, fit, memory and tokens/s/GPU (raw; then calibrated and "
        "measured where the run has measurements). Free. Call it to see what "
        "has been tried before proposing more."
    ),
    "get_best": (
        "The incumbent: the legal, fitting trial with the highest raw projected tokens/s/GPU (optionally at one "
        "fidelity), with its calibrated projection and measurements when the run has them, the cluster's stack "
        "and its launch (command and the files it reads). Free. found=false when nothing has been simulated yet."
    ),
    "record_measurement": (
        "Record what the user's cluster measured for a trial of the active run (trial_id from an evaluation "
        "or get_history): tokens_per_s_per_gpu, optionally peak_memory_gib per GPU. Stored in the ledger "
        "(source measured); the run's correction factors are refitted from all its measurements (one time "
        "factor, or two: compute and communication/bubble/optimizer, when the measured layouts differ in "
        "that mix; one activation-memory factor from measured peaks) and every projection of the run "
        "then carries `calibrated` beside its raw value. Returns the measurement, the factors with how "
        "they were fitted, and the trial raw and calibrated."
    ),
    "get_architecture": (
        "The workload: model architecture in Megatron argument names (layers, hidden size, heads, query "
        "groups, experts, top-k, MLA ranks, ...), its training arguments and the baseline layout they give. "
        "Free."
    ),
    "get_cluster": (
        "The target cluster: nodes, GPUs per node, the GPU's peak figures and links, usable memory per GPU "
        "after the safety margin, the budget, whether a GPU is present for benchmarks and the configured "
        "LLM. Free."
    ),
    "get_budget_status": (
        "Calls spent, limit and left per fidelity (dry, memory_only, simulate, benchmark) for the run; "
        "limit null means unlimited. Free. Check it before a batch of evaluate_simulate calls."
    ),
    "note_to_scratchpad": (
        "Append a note to the run's scratchpad (kept in the ledger, survives restarts): hypotheses, what "
        "was ruled out and why, the plan for the next round. Free. Never put secrets in notes; text that "
        "looks like an API key is refused. Returns the stored note."
    ),
    "read_scratchpad": (
        "Every note in the run's scratchpad (id, author, text, time), oldest first. Free. Read it at the "
        "start of a round to recall the hypotheses and what was already ruled out."
    ),
    "query_llm": (
        "Ask the run's configured LLM (env LLM_MODEL or the cluster's agent.llm.model, through LiteLLM) one "
        "question; tokens and cost are recorded in the ledger. Costs money at the provider. Fails with the "
        "reason when no LLM is configured or LiteLLM is missing. Returns the answer text and its usage."
    ),
    "run_seed_plan": (
        "Score the deterministic seed plan: single-axis sweeps around the baseline (recompute, MoE dispatcher "
        "and EP overlap, TP overlap, FP8 where allowed, schedules, neighbours, DP sharding, a coarse "
        "parallelism grid), only what the cluster's stack and the search constraints allow. Each candidate gets a free "
        "memory check and, when it fits, one simulate call of budget (at most `budget` calls, default the "
        "run's max_perf_calls); already-scored candidates are free. Takes seconds; reports progress. Returns "
        "the counts, whether the budget ran out and the incumbent."
    ),
    "sweep": (
        "Score the whole legal space of the run with the oracle (memory pre-filter, then simulate) and "
        "record the top_k layouts as trials; this is the reference optimum and spends no budget. CPU-heavy: "
        "seconds to minutes depending on the space; reports progress; `jobs` worker processes (default 1). "
        "Returns the space size, how many fit, the wall time and the top layouts, best first."
    ),
    "open_run": (
        "Load a workload YAML (native or Primus experiment) and a target-cluster YAML and make their run "
        "the current one, resuming the latest run for exactly these inputs unless resume=false. Paths are "
        "relative to the server's first allowed root and must stay under the allowed roots. Free. Returns "
        "the run id, names, world size, budget and how many trials it already has."
    ),
    "export_best": (
        "Write the run's artifacts to out_dir (under the allowed roots; created if missing): trials.jsonl, "
        "summary.json, trials.png, trials/<id>.yaml (re-runnable workload overlays) and, when there is a "
        "winner, launch.sh and the files its command reads (Primus: winner.primus.yaml). The winner is the "
        "robust pick by default (of the layouts within the oracle's stated error of the best, the one with the "
        "most memory headroom, then fewer stack-specific knobs); pick=argmax takes the highest projection. "
        "Free. Returns the files, the winner, the pick and why, the stack and its launch."
    ),
}

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
