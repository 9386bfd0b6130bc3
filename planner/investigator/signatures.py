"""DSPy signatures of the planner and of one investigation round."""

from __future__ import annotations

from typing import Any

import dspy


class PlanLayouts(dspy.Signature):
    """You tune the parallel layout of a Megatron-style LLM training run for the highest tokens/s/GPU
    on the given cluster. The seed plan already varied one knob at a time around the baseline (see the
    history); propose combinations of several knobs it could not reach, e.g. a smaller micro-batch that
    frees the memory to drop recompute, or a cheaper MoE dispatch that pays for a larger model-parallel
    degree. Each candidate is a TrialConfig object of the knobs listed: absent knobs keep the
    workload's values. Use only legal values, respect TP*PP*CP*DP = world size, and keep per-GPU memory
    under the cluster's memory_cap_gb. Follow the user's guidance."""

    architecture: str = dspy.InputField(desc="the workload: model, training arguments and baseline layout (JSON)")
    cluster: str = dspy.InputField(desc="the target cluster with its usable memory per GPU and budget (JSON)")
    legal_axes: str = dspy.InputField(desc="the values each knob may take on its own (JSON)")
    knobs: str = dspy.InputField(desc="the TrialConfig knobs and the values each takes")
    incumbent: str = dspy.InputField(desc="the best layout so far")
    history: str = dspy.InputField(desc="trials so far, one line each")
    scratchpad: str = dspy.InputField(desc="notes from earlier rounds and sessions")
    guidance: str = dspy.InputField(desc="the user's guidance for this run (may be empty)")
    hypothesis: str = dspy.OutputField(desc="what limits throughput now and which cross-axis changes should help")
    # list[Any], not list[dict]: one malformed element (a JSON string, a sentence) must not lose the others;
    # each is parsed on its own (`planner_module.evaluate_candidate`); the request's schema types them
    # (`structured.plan_schema`)
    candidates: list[Any] = dspy.OutputField(
        desc="3 to 8 TrialConfig objects, highest expected tokens/s/GPU first")
    # last and optional: a small model spends its tokens on the answer first (Predict, not ChainOfThought)
    reasoning: str | None = dspy.OutputField(default=None, desc="optional: why these candidates")


class InvestigateRound(dspy.Signature):
    """You tune the parallel layout of a Megatron-style LLM training run for the highest tokens/s/GPU.
    Test the hypothesis with the paratune tools: read the scratchpad first, check a layout with
    evaluate_memory_only (free) before evaluate_simulate (spends budget; repeats are free), look at the
    history to avoid layouts already tried, and note_to_scratchpad what you ruled out and why. A config
    is an object of TrialConfig knobs; absent knobs keep the workload's values. Finish once the
    hypothesis is settled or the tools say to stop."""

    this_round: str = dspy.InputField(desc="this round and how many there are")
    hypothesis: str = dspy.InputField(desc="what this round should test")
    run: str = dspy.InputField(desc="the workload and cluster (JSON)")
    knobs: str = dspy.InputField(desc="the TrialConfig knobs and the values each takes")
    incumbent: str = dspy.InputField(desc="the best layout so far")
    budget: str = dspy.InputField(desc="simulate calls spent and left")
    history: str = dspy.InputField(desc="trials so far, one line each")
    scratchpad: str = dspy.InputField(desc="notes from earlier rounds and sessions")
    guidance: str = dspy.InputField(desc="the user's guidance for this run (may be empty)")
    findings: str = dspy.OutputField(desc="what this round learned: what helped, what was ruled out and why")
    next_hypothesis: str = dspy.OutputField(desc="the hypothesis the next round should test")
