"""Specs: the trusted fast path builds exactly what validation would, and keys are canonical."""

from __future__ import annotations

from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.specs import EffectiveConfig, EvalResult, TrialConfig

from .conftest import example


def test_resolved_config_equals_a_validated_one(shipped):
    w, _ = shipped
    for trial in (TrialConfig(), TrialConfig(tp=2, recompute_granularity="full", fp8="hybrid")):
        fast = w.effective(trial)
        assert fast == EffectiveConfig.model_validate(fast.model_dump())


def test_trusted_eval_result_round_trips_through_validation():
    w, c = example("llama70b")
    result = evaluate_simulate(w, c)
    again = EvalResult.model_validate_json(result.model_dump_json())
    assert again == result and again.config_key == w.effective().key


def test_key_depends_on_every_field_and_only_on_values():
    w, _ = example("llama8b")
    base = w.effective()
    assert len({base.key, w.effective(TrialConfig(mbs=1)).key, w.effective(TrialConfig(gbs=256)).key,
                w.effective(TrialConfig(fp8="hybrid")).key, w.effective(TrialConfig(use_turbo_deepep=False)).key}) == 4
    # use_turbo_deepep=False is the baseline's own value: same key
    assert w.effective(TrialConfig(use_turbo_deepep=False)).key == base.key
