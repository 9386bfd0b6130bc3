"""Prompts that fit small models: the knob schema stated once (not in every tool), tool observations
without the term breakdown, history and notes capped; measured on the real planner and ReAct step over a
real server, with an 8k-token model in mind. A prompt that cannot fit the configured window ends the
phase before the call, saying what to change."""

from __future__ import annotations

import pytest

from paratune.planner.investigator.bounded_lm import BoundedLM, PhaseStop, prompt_tokens
from paratune.planner.llm.bounds import LLMBounds

from .test_investigator_common import (
    FITS,
    RecordingLM,
    investigate_with,
    plan_answer,
    served,
    step,
    summary,
)

WINDOW = 8192  # an 8k-context model
MAX_TOKENS = 1024  # its completion cap
TOOL_CALLS = 4


def test_the_planner_and_a_react_round_fit_an_8k_model_with_room_for_four_tool_calls(tmp_path, capsys):
    answers = [plan_answer(FITS[:1]), step("evaluate_simulate", {"config": FITS[1]}), step("get_history", {"k": 12}),
               step("evaluate_memory_only", {"config": FITS[2]}), step("evaluate_simulate", {"config": FITS[3]}),
               step("finish"), summary("cp=2 helps", "more cp")]
    lm = RecordingLM(answers)
    with served(tmp_path, rounds=1) as (server, ledger, run_id):
        for i in range(30):  # a history and a scratchpad as a real run has them
            server.call("evaluate_memory_only", config={"mbs": 1 + i % 4, "tp": 1 + i % 2, "cp": 1 + (i // 8) % 2})
            server.call("note_to_scratchpad", text=f"seed note {i}: " + "tp and cp trade-offs " * 20)
        report = investigate_with(server, ledger, run_id, lm, calls_per_round=TOOL_CALLS)
    assert report.rounds[0].status == "ok" and report.rounds[0].tool_calls == TOOL_CALLS
    # counted as the phase counts a model LiteLLM has no tokenizer for: chars/4 with its 1.5 margin (a real
    # small model's tokenizer counted 37 % above chars/4, issue 28)
    planner, first, *steps = [prompt_tokens("openai/small-local", m)[0] for m in lm.prompts]
    after_four = steps[TOOL_CALLS - 1]  # the prompt once four tool calls are in the trajectory
    with capsys.disabled():
        print(f"\nprompt tokens (chars/4 x 1.5): planner {planner}, first ReAct step {first}, after {TOOL_CALLS} "
              f"tool calls {after_four}; window {WINDOW}, max_tokens {MAX_TOKENS}")
    assert planner <= 4000
    assert after_four + MAX_TOKENS <= WINDOW


def test_a_prompt_past_the_window_ends_the_phase_before_the_call():
    lm = BoundedLM("openai/small", LLMBounds(call_timeout_s=5, max_tokens=512, retries=0, phase_timeout_s=60,
                                             context_window=1000))
    with pytest.raises(PhaseStop, match="exceeds openai/small's context of 1,000 tokens; lower --llm-max-tokens"):
        lm(messages=[{"role": "user", "content": "x" * 4000}])
    assert lm.stop_reason and not lm.failures  # refused before any request: nothing sent, nothing failed
