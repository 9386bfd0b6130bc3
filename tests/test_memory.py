"""Per-GPU memory model (oracle.memory): published figures, Megatron's formula, and properties.

Every expected number below comes from a source outside this code base and is derived in the test.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.memory import NON_GIB_KEYS, MemoryEstimate, estimate_memory
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, TrialConfig, resolve

GIB = 2**30
MEMORY_CSV = Path(__file__).resolve().parents[1] / "calibration" / "data" / "memory.csv"


def model(name: str) -> ModelArch:
    return ModelArch(**model_card(name))


def cluster(gpus: int, gpu_name: str = "h100-sxm", per_node: int = 8) -> ClusterSpec:
    per_node = min(per_node, gpus)
    return ClusterSpec(
        name="test", num_nodes=gpus // per_node, gpus_per_node=per_node, gpu=gpu(gpu_name), hbm_capacity_gb=80
    )


def estimate(name: str, gpus: int, **args) -> MemoryEstimate:
    m = model(name)
    cfg = resolve(TrainingArgs(**args), TrialConfig(), is_moe=m.is_moe)
    return estimate_memory(m, cfg, cluster(gpus))


def param_count(est: MemoryEstimate) -> float:
    return est.breakdown["mem_params_dense_count"] + est.breakdown["mem_params_expert_count"]


# ---------------------------------------------------------------------------------------------------
# 1. Korthikanti et al. 2022, Fig. 1 (calibration/data/memory.csv)
# ---------------------------------------------------------------------------------------------------
# Table 5 of the paper: global batch size per model (DP = 1, so GBS / MBS micro-batches per iteration).
KORTHIKANTI_GBS = {"gpt-22b-kor": 4, "gpt3-175b": 64, "mt-nlg-530b": 280, "gpt-1t-kor": 512}


def _memory_rows() -> list[dict[str, str]]:
    if not MEMORY_CSV.exists():
        return []
    with MEMORY_CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _paper_formulas(row: dict[str, str], arch: ModelArch) -> tuple[float, float]:
    """(param+optimizer GiB, activation GiB) from the paper's own formulas, to show what Fig. 1 counts.

    Parameters: only the transformer layers of the first stage, 12 h^2 per layer (QKV 3h^2 + proj h^2 +
      MLP 8h^2), L/PP layers, split TP ways, 18 bytes each (fp16 weight 2 + fp32 grad 4 + fp32 master and
      Adam m, v 12). E.g. 22B: 12 * 6144^2 * 48 / 8 * 18 B = 45.56 GiB. The embedding is NOT in Fig. 1:
      22B and 175B both print 45.56 although their first stages hold different embedding shares.
    Activations (Table 2): per layer s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes with TP and no SP, or
      s*b*h*(34 + 5*a*s/h)/t with TP + SP, the 5as/h term gone under selective recompute; the first stage
      holds L/PP layers for PP micro-batches, times (1 + (PP-1)/(PP*VPP)) with interleaving (§4.2.3),
      i.e. L layers' worth x the interleaving factor. Embedding and logits are not in Fig. 1.
    """
    tp, pp, vpp = int(row["tp"]), int(row["pp"]), int(row["vpp"])
    s, b = int(row["seq"]), int(row["mbs"])
    h, a, L = arch.hidden_size, arch.num_attention_heads, arch.num_layers
    params = 12 * h * h * (L / pp) / tp * 18 / GIB
    score = 0.0 if row["recompute"] == "selective" else 5 * a * s / h
    if row["sequence_parallel"] == "true":
        per_layer = s * b * h * (34 + score) / tp
    else:
        per_layer = s * b * h * (10 + 24 / tp + score / tp)
    interleave = 1 + (pp - 1) / (pp * vpp) if vpp > 1 else 1.0
    return params, per_layer * L * interleave / GIB


@pytest.mark.skipif(not MEMORY_CSV.exists(), reason=f"calibration data not found at {MEMORY_CSV}")
@pytest.mark.parametrize("row", _memory_rows(), ids=lambda r: r["id"])
def test_korthikanti_fig1(row: dict[str, str]) -> None:
    arch = model(row["model"])
    tp, pp, vpp = int(row["tp"]), int(row["pp"]), int(row["vpp"])
    args = TrainingArgs(
        seq_length=int(row["seq"]),
        micro_batch_size=int(row["mbs"]),
        global_batch_size=KORTHIKANTI_GBS[row["model"]],
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        sequence_parallel=row["sequence_parallel"] == "true",
        use_flash_attn=row["use_flash_attn"] == "true",
        recompute_granularity=None if row["recompute"] == "none" else row["recompute"],
        fp16=True,
        bf16=False,
        use_distributed_optimizer=False,
    )
    cfg = resolve(args, TrialConfig(), is_moe=False)
    assert cfg.use_flash_attn is False and cfg.vpp == vpp
    est = estimate_memory(arch, cfg, cluster(int(row["gpus"]), row["gpu"]))
    published_po, published_act = float(row["param_optimizer_gib"]), float(row["activation_gib"])

    # The paper's formulas reproduce the published bars (so we know what Fig. 1 counts).
    paper_po, paper_act = _paper_formulas(row, arch)
    assert paper_po == pytest.approx(published_po, rel=0.005)
    assert paper_act == pytest.approx(published_act, rel=0.005)

    # First pipeline stage is the most loaded one.
    assert est.breakdown["mem_stage"] == 0

    # Parameters + optimizer: Fig. 1 counts the transformer layers only. With 18 B for every parameter,
    # the layer share of our figure is param_optimizer x (layer params / all params on the stage).
    b = est.breakdown
    layers_share = (b["mem_params_dense_count"] - b["mem_params_embedding_count"]) / b["mem_params_dense_count"]
    assert est.param_optimizer_gb * layers_share == pytest.approx(published_po, rel=0.04)
    # ... and the whole first stage is that plus the embedding: vocabulary-parallel word embedding V*h/TP
    # plus the learned position embedding s*h (not TP-sharded), 18 B each.
    embedding_gib = (arch.vocab_size * arch.hidden_size / tp + int(row["seq"]) * arch.hidden_size) * 18 / GIB
    assert est.param_optimizer_gb == pytest.approx(published_po + embedding_gib, rel=0.04)

    # Activations: ours also holds the embedding ids/dropout mask and, with PP = 1, the logits and loss;
    # the layer terms dominate and the total stays within 5 % of the published bar.
    assert est.activation_gb == pytest.approx(published_act, rel=0.05)
    print(
        f"{row['id']}: param+opt {est.param_optimizer_gb:.2f} GiB (layers {est.param_optimizer_gb * layers_share:.2f})"
        f" vs {published_po}; activations {est.activation_gb:.2f} vs {published_act}"
        f" ({100 * (est.activation_gb / published_act - 1):+.1f}%)"
    )


def test_korthikanti_rows_present() -> None:
    if not MEMORY_CSV.exists():
        pytest.skip(f"calibration data not found at {MEMORY_CSV}")
    assert len(_memory_rows()) == 8


# ---------------------------------------------------------------------------------------------------
# 2. Megatron-LM theoretical_memory_usage.py: bytes per parameter 18, or 6 + 12/DP with distopt
# ---------------------------------------------------------------------------------------------------
def _bytes_per_param(est: MemoryEstimate) -> float:
    b = est.breakdown
    return (b["mem_weights"] + b["mem_grads"] + b["mem_optimizer"]) * GIB / param_count(est)


@pytest.mark.parametrize("dp", [1, 2, 8])
def test_distributed_optimizer_bytes_per_param(dp: int) -> None:
    # llama3-8b with TP2 PP2, world = 4 * DP
    common = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, global_batch_size=8 * dp)
    with_dist = estimate("llama3-8b", 4 * dp, use_distributed_optimizer=True, **common)
    without = estimate("llama3-8b", 4 * dp, use_distributed_optimizer=False, **common)
    assert _bytes_per_param(with_dist) == pytest.approx(6 + 12 / dp, rel=1e-12)
    assert _bytes_per_param(without) == pytest.approx(18, rel=1e-12)
    assert with_dist.breakdown["mem_fp8_weight_copies"] == 0


def test_distributed_optimizer_shards_over_dp_times_cp() -> None:
    # Megatron's distributed optimizer uses the data-parallel group *with* context parallel: 8 GPUs,
    # TP1 CP2 -> DP 4, optimizer state split 8 ways (Megatron's formula writes DP assuming CP = 1).
    est = estimate("llama3-8b", 8, context_parallel_size=2, use_distributed_optimizer=True, global_batch_size=8)
    assert _bytes_per_param(est) == pytest.approx(6 + 12 / 8, rel=1e-12)


def test_expert_optimizer_shards_over_expert_dp() -> None:
    # mixtral-8x7b on 16 GPUs, EP 8: dense DP = 16, expert DP = 16 / 8 = 2.
    est = estimate(
        "mixtral-8x7b", 16, expert_model_parallel_size=8, use_distributed_optimizer=True, global_batch_size=32
    )
    b = est.breakdown
    expected = 12 * (b["mem_params_dense_count"] / 16 + b["mem_params_expert_count"] / 2)
    assert b["mem_optimizer"] * GIB == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------------------------------
# Parameter counts against published model sizes (model cards / papers)
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, published_billion",
    [
        ("llama3-8b", 8.03),  # Meta Llama 3 8B model card
        ("llama3-70b", 70.6),  # Meta Llama 3 70B model card
        ("mixtral-8x7b", 46.7),  # Mistral AI, "Mixtral of Experts" (2024)
        ("deepseek-v2-lite", 15.7),  # DeepSeek-V2 paper, DeepSeek-V2-Lite: 15.7B total
        ("deepseek-v3", 671 + 14),  # DeepSeek-V3 report: 671B main model + 14B MTP module (HF: 685B)
    ],
)
def test_total_parameters_match_published(name: str, published_billion: float) -> None:
    est = estimate(name, 1, global_batch_size=1)  # one GPU holds everything
    assert param_count(est) / 1e9 == pytest.approx(published_billion, rel=0.01)


# ---------------------------------------------------------------------------------------------------
# 3. Properties
# ---------------------------------------------------------------------------------------------------
def test_breakdown_sums_to_total() -> None:
    for est in (
        estimate("llama3-8b", 8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, global_batch_size=16),
        estimate(
            "deepseek-v2-lite", 16, pipeline_model_parallel_size=2, expert_model_parallel_size=8,
            use_turbo_deepep=True, fp8="hybrid", global_batch_size=32,
        ),
        estimate("mixtral-8x7b", 8, expert_model_parallel_size=8, use_torch_fsdp2=True, global_batch_size=8),
    ):
        gib = sum(v for k, v in est.breakdown.items() if k not in NON_GIB_KEYS)
        assert gib == pytest.approx(est.total_gb, rel=1e-12)
        assert est.param_optimizer_gb == pytest.approx(
            sum(est.breakdown[k] for k in ("mem_weights", "mem_grads", "mem_optimizer", "mem_fp8_weight_copies")),
            rel=1e-12,
        )
        assert est.activation_gb == pytest.approx(
            sum(v for k, v in est.breakdown.items() if k.startswith("mem_act_")), rel=1e-12
        )
        assert all(v >= 0 for v in est.breakdown.values())


def test_more_tp_lowers_memory() -> None:
    totals = [
        estimate("llama3-70b", 64, tensor_model_parallel_size=tp, pipeline_model_parallel_size=4,
                 global_batch_size=64).total_gb
        for tp in (1, 2, 4, 8)
    ]
    assert totals == sorted(totals, reverse=True) and totals[0] > 2 * totals[-1]


def test_recompute_lowers_activations() -> None:
    common = dict(tensor_model_parallel_size=4, pipeline_model_parallel_size=2, global_batch_size=16)
    # Without flash attention the stored scores dominate: selective recompute removes them.
    none = estimate("llama3-8b", 8, use_flash_attn=False, **common)
    selective = estimate("llama3-8b", 8, use_flash_attn=False, recompute_granularity="selective", **common)
    full = estimate("llama3-8b", 8, use_flash_attn=False, recompute_granularity="full", **common)
    assert none.activation_gb > 1.5 * selective.activation_gb
    assert full.activation_gb < 0.5 * selective.activation_gb
    # With flash attention selective only drops the softmax statistics: lower, but only just.
    none_f = estimate("llama3-8b", 8, **common)
    selective_f = estimate("llama3-8b", 8, recompute_granularity="selective", **common)
    assert selective_f.activation_gb < none_f.activation_gb < 1.05 * selective_f.activation_gb
    # Block recompute of some layers per stage sits between none and full.
    block = estimate("llama3-8b", 8, recompute_granularity="full", recompute_method="block",
                     recompute_num_layers=8, **common)
    assert full.activation_gb < block.activation_gb < none_f.activation_gb
    assert full.breakdown["mem_act_recompute_transient"] > 0


def test_full_recompute_keeps_layer_inputs() -> None:
    # GPT-3 175B, TP8 + SP, PP8, uniform full recompute of every layer: stage 0 keeps, per micro-batch in
    # flight (PP = 8) and per layer (12), only the layer input 2*s*b*h/t bytes (Korthikanti §4.1).
    est = estimate("gpt3-175b", 64, seq_length=2048, tensor_model_parallel_size=8,
                   pipeline_model_parallel_size=8, global_batch_size=64, recompute_granularity="full")
    expected = 8 * 12 * 2 * 2048 * 12288 / 8 / GIB
    assert est.breakdown["mem_act_dense_layers"] == pytest.approx(expected, rel=1e-9)


def test_inflight_microbatches_per_schedule() -> None:
    common = dict(tensor_model_parallel_size=1, global_batch_size=64)
    # 1F1B: stage 0 holds min(PP, micro-batches) micro-batches.
    for pp in (1, 2, 4, 8):
        est = estimate("llama3-8b", pp, pipeline_model_parallel_size=pp, **common)
        assert est.breakdown["mem_stage"] == 0
        assert est.breakdown["mem_inflight_microbatches"] == pp
    few = estimate("llama3-8b", 8, pipeline_model_parallel_size=8, tensor_model_parallel_size=1, global_batch_size=4)
    assert few.breakdown["mem_inflight_microbatches"] == 4
    # Interleaved: (1 + (PP-1)/(PP*VPP)) * PP (Narayanan 2021; Megatron theoretical_memory_usage.py).
    est = estimate("llama3-8b", 4, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2, **common)
    assert est.breakdown["mem_inflight_microbatches"] == pytest.approx((1 + 3 / 8) * 4)
    # More micro-batches in flight -> more activation memory per layer held on stage 0.
    per_layer = []
    for pp in (1, 2, 4):
        e = estimate("llama3-8b", pp, pipeline_model_parallel_size=pp, **common)
        per_layer.append(e.breakdown["mem_act_dense_layers"] / (32 / pp))
    assert per_layer[0] < per_layer[1] < per_layer[2]
    assert per_layer[2] == pytest.approx(4 * per_layer[0], rel=1e-9)


def test_zero_bubble_schedules() -> None:
    common = dict(pipeline_model_parallel_size=4, global_batch_size=64)
    one_f = estimate("llama3-8b", 4, **common)
    zb = estimate("llama3-8b", 4, pp_schedule="zb", **common)
    assert zb.breakdown["mem_act_wgrad_stash"] > 0
    assert zb.activation_gb > one_f.activation_gb
    # ZB-V: two chunks per GPU, PP chunk-micro-batches each -> 2*PP chunk-mbs = PP stage-mbs, balanced.
    zbv = estimate("llama3-8b", 4, pp_schedule="zbv", virtual_pipeline_model_parallel_size=2, **common)
    assert zbv.breakdown["mem_inflight_microbatches"] == pytest.approx(4)
    assert zbv.breakdown["mem_stage"] == 0  # GPU 0 holds the first and the last chunk (embedding + output)


def test_fsdp_lowers_parameter_memory() -> None:
    common = dict(global_batch_size=8)
    ddp = estimate("llama3-8b", 8, **common)
    distopt = estimate("llama3-8b", 8, use_distributed_optimizer=True, **common)
    fsdp = estimate("llama3-8b", 8, use_torch_fsdp2=True, **common)
    assert fsdp.param_optimizer_gb < distopt.param_optimizer_gb < ddp.param_optimizer_gb
    # 8-way sharded 18 B/param plus the unsharded working layers: far below 1/4 of DDP's
    assert fsdp.param_optimizer_gb < ddp.param_optimizer_gb / 4


def test_expert_params_shrink_with_ep() -> None:
    counts = [
        estimate("mixtral-8x7b", ep, expert_model_parallel_size=ep, global_batch_size=8).breakdown[
            "mem_params_expert_count"
        ]
        for ep in (1, 2, 4, 8)
    ]
    assert counts[0] == pytest.approx(2 * counts[1]) and counts[1] == pytest.approx(2 * counts[2])
    assert counts[2] == pytest.approx(2 * counts[3])
    # Mixtral 8x7B experts: 32 layers x 8 experts x 3 x 4096 x 14336 (SwiGLU w1, w2, w3) = 45.1B
    assert counts[0] == pytest.approx(32 * 8 * 3 * 4096 * 14336)


def test_mla_model_evaluates() -> None:
    est = estimate(
        "deepseek-v2-lite", 16, pipeline_model_parallel_size=2, expert_model_parallel_size=8,
        use_distributed_optimizer=True, global_batch_size=32,
    )
    b = est.breakdown
    for key in ("mem_weights", "mem_grads", "mem_optimizer", "mem_act_dense_layers", "mem_act_moe_layers",
                "mem_act_embedding",
                "mem_comm_buffers", "mem_allocator_overhead", "mem_params_dense_count", "mem_params_expert_count"):
        assert b[key] > 0, key
    assert est.total_gb > est.param_optimizer_gb + est.activation_gb
    assert math.isfinite(est.total_gb)


def test_mtp_and_uneven_stages() -> None:
    # DeepSeek-V3, PP8: 61 layers -> 8 x7 + 5, 3 dense layers first, MTP on the last stage.
    common = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=8, expert_model_parallel_size=32,
                  expert_tensor_parallel_size=1, use_distributed_optimizer=True, recompute_granularity="full",
                  global_batch_size=1024)
    last5 = estimate("deepseek-v3", 256, decoder_last_pipeline_num_layers=5, **common)
    # The same placement written as a layout string is the same memory, term by term.
    layout = estimate("deepseek-v3", 256, pipeline_model_parallel_layout="Et*8|(t*8|)*6,t*5mL", **common)
    assert layout.breakdown == last5.breakdown
    assert 0 < last5.total_gb < 200
    # Stage 0 holds 3 dense + 5 MoE layers, stage 1 eight MoE layers: stage 1 is the most loaded.
    assert last5.breakdown["mem_stage"] == 1
    # Moving one decoder to the last stage (6 + MTP + loss) makes it the most loaded, with more weights.
    heavy = estimate("deepseek-v3", 256, pipeline_model_parallel_layout="Et*7|(t*8|)*6,t*6mL", **common)
    assert heavy.breakdown["mem_stage"] == 7 and heavy.breakdown["mem_weights"] > last5.breakdown["mem_weights"]


def test_fp8_and_deepep_add_memory() -> None:
    common = dict(expert_model_parallel_size=8, pipeline_model_parallel_size=2, global_batch_size=32)
    base = estimate("deepseek-v2-lite", 16, **common)
    fp8 = estimate("deepseek-v2-lite", 16, fp8="hybrid", **common)
    assert fp8.breakdown["mem_fp8_weight_copies"] > 0 and fp8.param_optimizer_gb > base.param_optimizer_gb
    deepep = estimate("deepseek-v2-lite", 16, use_turbo_deepep=True, **common)
    assert deepep.breakdown["mem_deepep_buffers"] > 0 and base.breakdown["mem_deepep_buffers"] == 0


def test_cross_entropy_fusion_shrinks_logits() -> None:
    plain = estimate("llama3-8b", 8, global_batch_size=8)
    fused = estimate("llama3-8b", 8, global_batch_size=8, cross_entropy_loss_fusion=True)
    # 6 B -> 2 B per vocabulary entry per token (see activations.edge_acts)
    assert fused.breakdown["mem_act_logits_loss"] < plain.breakdown["mem_act_logits_loss"] / 2


def test_illegal_layout_stays_finite() -> None:
    # TP 3 does not divide 8 GPUs (DP helper gives 0) and PP 5 does not divide 32 layers.
    m = model("llama3-8b")
    cfg = resolve(
        TrainingArgs(tensor_model_parallel_size=3, pipeline_model_parallel_size=5, global_batch_size=7),
        TrialConfig(), is_moe=False,
    )
    est = estimate_memory(m, cfg, cluster(8))
    assert math.isfinite(est.total_gb) and est.total_gb > 0
