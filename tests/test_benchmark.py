"""Benchmark mode on the CPU path: layer modules, tiny shapes, anchoring, caching, gating, ledger cache, CLI."""

from __future__ import annotations

import importlib.util
import json
import sqlite3

import pytest

from paratune.ledger import Ledger
from paratune.ledger import schema as ledger_schema
from paratune.oracle.benchmark import (
    BenchmarkUnavailable,
    LedgerCache,
    MemoryCache,
    evaluate_with_benchmark,
)
from paratune.oracle.benchmark.collectives import measure_collectives, parse_args
from paratune.oracle.benchmark.shapes import layer_kinds, layer_shape, tiny_layout
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.memory import NON_GIB_KEYS
from paratune.oracle.performance import simulate
from paratune.oracle.specs import TrialConfig
from paratune.oracle.specs.search import SearchConstraints
from paratune.planner.cli import main as cli_main

from .conftest import EXAMPLES, example

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed: pip install 'paratune[benchmark]'")


class SpyCache(MemoryCache):
    """An in-memory cache that counts its puts."""

    def __init__(self):
        super().__init__()
        self.puts: list[str] = []

    def put(self, key, data):
        self.puts.append(key)
        super().put(key, data)


@pytest.fixture
def measure_calls(monkeypatch):
    """Every layer shape the benchmark actually measures (cache misses), in order."""
    from paratune.oracle.benchmark import timing

    calls = []
    real = timing.measure_layer

    def spy(shape, device):
        calls.append(shape)
        return real(shape, device)

    monkeypatch.setattr(timing, "measure_layer", spy)
    return calls


def tiny_shape(name: str, moe: bool, **knobs):
    workload, _ = example(name)
    model, cfg = tiny_layout(workload.model, workload.effective(TrialConfig(**knobs)))
    return layer_shape(model, cfg, moe)


# ---- per-rank shapes (no torch) ------------------------------------------------------------------
def test_per_rank_shapes_follow_the_sharding():
    workload, _ = example("llama70b")  # TP4 CP2 with SP, seq 8192, MBS 1
    s = layer_shape(workload.model, workload.effective(TrialConfig(tp=8)), False)
    assert (s.heads, s.groups, s.ffn, s.sp, s.seq, s.tokens) == (8, 1, 28672 // 8, 8, 4096, 4096)
    mixtral, _ = example("mixtral")  # EP8, TP1, MBS 2
    m = layer_shape(mixtral.model, mixtral.effective(), True)
    assert (m.local_experts, m.topk, m.expert_ffn, m.etp, m.tokens) == (1, 2, 16384, 1, 2 * 8192)
    deepseek, _ = example("deepseek")
    assert layer_kinds(deepseek.model) == (False, True) and layer_kinds(mixtral.model) == (True,)
    d = layer_shape(deepseek.model, deepseek.effective(), True)
    widths = (d.heads, d.q_lora_rank, d.kv_lora_rank, d.qk_head_dim, d.qk_pos_dim, d.v_head_dim)
    assert d.mla and widths == (64, 1536, 512, 128, 64, 128)
    assert d.local_experts == 256 // 32 and d.ffn == 2048 // 2  # shared expert over TP2


@pytest.mark.parametrize("name, knobs", [("llama70b", {}), ("llama70b", {"tp": 8, "cp": 4}),
                                         ("mixtral", {"tp": 2, "etp": 2}), ("deepseek", {"cp": 2})])
def test_tiny_rule_keeps_the_parallel_sizes_and_every_division(name, knobs):
    workload, _ = example(name)
    cfg = workload.effective(TrialConfig(**knobs))
    model, tiny = tiny_layout(workload.model, cfg)
    assert (tiny.tp, tiny.cp, tiny.ep, tiny.etp, tiny.sequence_parallel) == (cfg.tp, cfg.cp, cfg.ep, cfg.etp,
                                                                              cfg.sequence_parallel)
    for moe in layer_kinds(workload.model):
        s = layer_shape(model, tiny, moe)
        assert s.h == 64 and 1 <= s.heads <= 2 and s.heads % s.groups == 0
        assert s.tokens % s.sp == 0 and s.seq % 2 == 0 and s.tokens <= 16 * max(4, cfg.tp)
        assert not moe or (1 <= s.local_experts <= 2 and s.experts == s.local_experts * cfg.ep)


# ---- the torch modules ---------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name, moe, knobs", [
    ("llama70b", False, {}),                          # GQA, TP4 + SP, CP2 ring stand-in
    ("mixtral", True, {"tp": 2, "etp": 2}),           # MoE, ETP gather/scatter
    ("deepseek", False, {}),                          # MLA with q_lora, dense MLP
    ("deepseek", True, {"cp": 2}),                    # MLA + MoE with a shared expert
])
def test_layers_run_forward_and_backward_with_gradients_everywhere(name, moe, knobs):
    import torch

    from paratune.oracle.benchmark.torch_layers import build_layer

    s = tiny_shape(name, moe, **knobs)
    torch.manual_seed(0)
    layer, x = build_layer(s, "cpu")
    out = layer(x)
    assert out.shape == x.shape == (s.tokens // s.sp, s.h) and out.dtype == torch.bfloat16
    out.float().square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for pname, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


@needs_torch
@pytest.mark.parametrize("fp8", [None, "hybrid", "e4m3"])
def test_linear_gathers_sp_tokens_and_fp8_tracks_bf16(fp8):
    import torch

    from paratune.oracle.benchmark.ops import linear

    torch.manual_seed(0)
    x = torch.randn(32, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(48, 64, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(64, 48, dtype=torch.bfloat16)
    try:
        linear(x, w, 2, fp8).backward(g)
    except RuntimeError as exc:  # torch builds without a CPU torch._scaled_mm
        pytest.skip(f"torch._scaled_mm unavailable on CPU here: {exc}")
    ref_x, ref_w = x.detach().float(), w.detach().float()
    tol = 0.02 if fp8 is None else 0.12

    def close(a, b):
        return ((a.float() - b).norm() / b.norm()).item() < tol

    assert close(x.grad, g[:32].float() @ ref_w)  # reduce-scatter stand-in: this rank's rows
    assert close(w.grad, g.float().t() @ ref_x.repeat(2, 1))
    assert close(linear(x, w, 2, fp8), ref_x.repeat(2, 1) @ ref_w.t())


# ---- anchoring, end to end on CPU ----------------------------------------------------------------
@needs_torch
def test_cpu_smoke_run_flows_into_the_result_and_caches_per_shape(measure_calls):
    workload, cluster = example("deepseek")  # dense + MoE layers, MLA attention
    cache, progress = SpyCache(), []
    result = evaluate_with_benchmark(workload, cluster, allow_cpu=True, cache=cache,
                                     progress=lambda d, t, m: progress.append((d, t, m)))
    plain = evaluate_simulate(workload, cluster)
    assert result.legal and result.source == "benchmark" and "CPU smoke" in result.reason
    b = result.breakdown
    for kind in ("dense", "moe"):
        for key in ("fwd_ms", "bwd_ms", "act_mib"):
            assert b[f"bench_{kind}_{key}"] > 0 and b[f"analytic_{kind}_{key}"] > 0
    assert b["bench_cpu_smoke"] == 1.0 and b["analytic_iteration_ms"] == plain.iteration_ms
    assert result.iteration_ms != plain.iteration_ms and result.tokens_per_s_per_gpu != plain.tokens_per_s_per_gpu
    assert result.activation_gb != plain.activation_gb
    gib = sum(v for k, v in b.items() if k.startswith("mem_") and k not in NON_GIB_KEYS)
    assert gib == pytest.approx(result.memory_per_gpu_gb)
    assert len(cache.puts) == len(set(cache.puts)) == 2 and len(measure_calls) == 2
    assert [p[:2] for p in progress] == [(1, 2), (2, 2)] and "dense layer" in progress[0][2]

    # same per-rank shapes (PP and the optimizer do not change a layer): nothing is measured again
    again = evaluate_with_benchmark(workload, cluster,
                                    TrialConfig(pp=4, pp_first_layers=16, use_distributed_optimizer=False),
                                    allow_cpu=True, cache=cache)
    assert again.legal and len(cache.puts) == 2 and len(measure_calls) == 2
    assert again.breakdown["bench_moe_fwd_ms"] == b["bench_moe_fwd_ms"]


@needs_torch
def test_fp8_is_skipped_on_cpu_with_a_reason():
    workload, cluster = example("llama70b")
    cluster = cluster.model_copy(update={"search": SearchConstraints(allow={"fp8": ("none", "hybrid")})})
    result = evaluate_with_benchmark(workload, cluster, TrialConfig(fp8="hybrid"), allow_cpu=True, cache=MemoryCache())
    assert "FP8 skipped on CPU" in result.reason and result.breakdown["bench_fp8"] == 0.0
    assert result.config["fp8"] == "hybrid"  # the target layout keeps FP8; only the measurement is BF16


def test_compute_scale_default_is_unchanged_and_scales_only_compute():
    workload, cluster = example("llama70b")
    cfg = workload.effective()
    base = simulate(workload.model, cfg, cluster)
    ones = simulate(workload.model, cfg, cluster, compute_scale=((1.0, 1.0), (1.0, 1.0)))
    assert ones.iteration_ms == base.iteration_ms and ones.breakdown == base.breakdown
    slow = simulate(workload.model, cfg, cluster, compute_scale=((2.0, 3.0), (2.0, 3.0)))
    assert slow.breakdown["compute"] > 2 * base.breakdown["compute"] * 0.9 and slow.iteration_ms > base.iteration_ms
    for comm in ("tp_comm", "cp_comm", "ep_comm", "optimizer"):
        assert slow.breakdown[comm] == base.breakdown[comm]


# ---- gating and legality -------------------------------------------------------------------------
def test_no_gpu_without_allow_cpu_is_a_clear_error(measure_calls):
    workload, cluster = example("llama70b")  # has_gpu: false
    with pytest.raises(BenchmarkUnavailable, match="has_gpu: false|torch is not installed"):
        evaluate_with_benchmark(workload, cluster)
    assert measure_calls == []


@needs_torch
def test_gpu_cluster_without_a_gpu_visible_to_torch_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    workload, cluster = example("llama70b")
    with pytest.raises(BenchmarkUnavailable, match="sees no GPU"):
        evaluate_with_benchmark(workload, cluster.model_copy(update={"has_gpu": True}))


def test_missing_torch_is_a_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    workload, cluster = example("llama70b")
    with pytest.raises(BenchmarkUnavailable, match="torch is not installed"):
        evaluate_with_benchmark(workload, cluster, allow_cpu=True)


def test_illegal_layout_is_legal_false_and_measures_nothing(measure_calls):
    workload, cluster = example("llama70b")
    result = evaluate_with_benchmark(workload, cluster, TrialConfig(tp=3), cache=MemoryCache())
    assert result.legal is False and result.source == "benchmark" and result.violations
    assert measure_calls == []


# ---- ledger cache --------------------------------------------------------------------------------
def test_ledger_cache_round_trips_across_reopen(tmp_path):
    path = tmp_path / "ledger.sqlite"
    data = {"fwd_ms": 1.5, "bwd_ms": 3.0, "act_bytes": 1024.0, "peak_bytes": None, "device": "cpu"}
    with Ledger(path) as led:
        cache = LedgerCache(led)
        assert cache.get("k1") is None
        cache.put("k1", data)
        cache.put("k1", {**data, "fwd_ms": 9.0})  # the first record of a shape wins
    with Ledger(path) as led:
        assert LedgerCache(led).get("k1") == data and led.benchmark_measurement("k2") is None
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(ledger_schema.MIGRATIONS) == 4
    raw.close()


def test_v1_ledger_gains_the_measurement_table(tmp_path, monkeypatch):
    path = tmp_path / "old.sqlite"
    monkeypatch.setattr(ledger_schema, "MIGRATIONS", ledger_schema.MIGRATIONS[:1])
    Ledger(path).close()
    monkeypatch.undo()
    with Ledger(path) as led:
        led.record_benchmark_measurement("k", {"fwd_ms": 1.0})
        assert led.benchmark_measurement("k") == {"fwd_ms": 1.0}


@needs_torch
def test_measurements_in_the_ledger_survive_the_process(tmp_path, measure_calls):
    workload, cluster = example("llama70b")
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        first = evaluate_with_benchmark(workload, cluster, allow_cpu=True, cache=LedgerCache(led))
    with Ledger(path) as led:
        second = evaluate_with_benchmark(workload, cluster, allow_cpu=True, cache=LedgerCache(led))
    assert len(measure_calls) == 1 and second.breakdown == first.breakdown


# ---- CLI and the collectives module --------------------------------------------------------------
LLAMA70B = ["--workload", str(EXAMPLES / "workloads" / "llama3-70b-h100.yaml"),
            "--target-cluster", str(EXAMPLES / "clusters" / "h100-8n.yaml")]


def test_cli_without_gpu_is_one_line_and_exit_2(capsys):
    assert cli_main(["project", "benchmark", *LLAMA70B]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("paratune: benchmark unavailable:")


@needs_torch
def test_cli_allow_cpu_prints_one_eval_result_and_progress(capsys):
    assert cli_main(["project", "benchmark", *LLAMA70B, "--allow-cpu", "--set", "tp=8", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["source"] == "benchmark" and result["config"]["tp"] == 8
    assert "[1/1] dense layer" in captured.err


def test_collectives_arguments():
    args = parse_args(["--bytes", "4096", "--backend", "gloo"])
    assert (args.bytes, args.iters, args.warmup, args.backend) == (4096, 20, 5, "gloo")
    with pytest.raises(SystemExit):
        parse_args(["--bytes", "1"])


@needs_torch
def test_collectives_run_under_torchrun_with_gloo():
    out = measure_collectives(2, 4096, backend="gloo")
    assert (out["world"], out["backend"], out["bytes"]) == (2, "gloo", 4096)
    assert out["all_gather_ms"] > 0 and out["reduce_scatter_ms"] > 0
