"""Launch artifacts per stack: only arguments the stack defines, every knob explicit.

Megatron-LM flags are checked against the fields of megatron-core's config classes (the PyPI
wheel, 0.16.1: Megatron-LM's arguments.py generates a `--field-name` flag per field) or, for the
flags arguments.py defines by hand, the written-down list below. Primus keys are checked against the
written-down list of the Primus YAML each is defined in (AMD-AGI/Primus fd1eeab)."""

from __future__ import annotations

import ast
import dataclasses
import shlex
from functools import cache

import yaml

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.legality import validate
from paratune.oracle.specs import TrialConfig
from paratune.oracle.specs.knobs import KNOB_SPECS, knob_available
from paratune.planner.launch import launch_plan
from paratune.planner.launch.bridge import hydra_overrides
from paratune.planner.launch.megatron_lm import layout_flags, model_flags
from paratune.planner.launch.primus import overrides

from .conftest import EXAMPLES, example


@cache
def core_fields() -> frozenset[str]:
    """The fields of megatron-core's config classes (imported on first use: megatron-core loads torch)."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.optimizer_config import OptimizerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    return frozenset(f.name for cls in (TransformerConfig, MLATransformerConfig, OptimizerConfig,
                                        DistributedDataParallelConfig) for f in dataclasses.fields(cls))


# Flags Megatron-LM's arguments.py (core_v0.16.1) adds by hand, not from a config field.
MLM_HAND_FLAGS = {
    "--num-virtual-stages-per-pipeline-rank": "_add_distributed_args",
    "--decoder-first-pipeline-num-layers": "_add_distributed_args",
    "--decoder-last-pipeline-num-layers": "_add_distributed_args",
    "--micro-batch-size": "_add_training_args", "--global-batch-size": "_add_training_args",
    "--seq-length": "_add_network_size_args", "--vocab-size": "_add_tokenizer_args",
    "--max-position-embeddings": "_add_network_size_args",
    "--group-query-attention": "_add_network_size_args", "--swiglu": "_add_network_size_args",
    "--untie-embeddings-and-output-weights": "_add_network_size_args",
    "--disable-bias-linear": "_add_network_size_args (dest add_bias_linear)",
    "--position-embedding-type": "_add_network_size_args",
    "--norm-epsilon": "TransformerConfig.layernorm_epsilon (argparse_meta arg_names)",
    "--fp8-format": "_add_transformer_engine_args (dest fp8)",
    "--grad-reduce-in-bf16": "_add_mixed_precision_args", "--bf16": "_add_mixed_precision_args",
    "--fp16": "_add_mixed_precision_args", "--use-torch-fsdp2": "_add_distributed_args",
    "--no-gradient-accumulation-fusion": "_add_training_args (dest gradient_accumulation_fusion)",
    "--num-experts": "_add_moe_args (TransformerConfig.num_moe_experts)",
    "--microbatch-group-size-per-virtual-pipeline-stage": "_add_distributed_args (microbatch_group_size_per_vp_stage)",
}
# Primus keys (AMD-AGI/Primus fd1eeab) the overlay may write, with the file that defines each.
LM, TB, PT = ("primus/configs/models/megatron/language_model.yaml", "primus/configs/modules/megatron/trainer_base.yaml",
              "primus/configs/modules/megatron/pre_trainer.yaml")
TU, ZB = "primus/configs/modules/megatron/primus_turbo.yaml", "primus/configs/modules/megatron/zero_bubble.yaml"
PRIMUS_KEYS = {
    **dict.fromkeys(("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                     "expert_model_parallel_size", "expert_tensor_parallel_size",
                     "num_virtual_stages_per_pipeline_rank",
                     "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
                     "decoder_last_pipeline_num_layers", "sequence_parallel", "cross_entropy_loss_fusion",
                     "gradient_accumulation_fusion", "moe_token_dispatcher_type", "moe_router_dtype",
                     "moe_use_legacy_grouped_gemm", "moe_shared_expert_overlap", "tp_comm_overlap", "moe_grouped_gemm",
                     "microbatch_group_size_per_vp_stage", "group_query_attention"), LM),
    **dict.fromkeys(("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                     "micro_batch_size", "recompute_granularity", "recompute_method", "recompute_num_layers", "fp8",
                     "fp8_param_gather", "grad_reduce_in_bf16", "use_torch_fsdp2", "use_megatron_fsdp",
                     "data_parallel_sharding_strategy", "overlap_grad_reduce", "optimizer_cpu_offload",
                     "overlap_moe_expert_parallel_comm", "use_precision_aware_optimizer", "main_grads_dtype",
                     "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"), TB),
    **dict.fromkeys(("global_batch_size", "use_distributed_optimizer", "seq_length"), PT),
    **dict.fromkeys(("enable_primus_turbo", "use_turbo_grouped_gemm", "use_turbo_deepep", "turbo_sync_free_moe_stage"),
                    TU),
    **dict.fromkeys(("patch_zero_bubble", "zero_bubble_v_schedule"), ZB),
    # not in a Primus YAML: Megatron's own argument, kept by MegatronArgBuilder (argument_builder.py)
    "recompute_modules": "Megatron-LM arguments.py (third_party/Megatron-LM d3528a2)",
}


def _flag_ok(flag: str) -> bool:
    return flag in MLM_HAND_FLAGS or flag[2:].replace("-", "_") in core_fields()


def _flags(text: str) -> list[str]:
    return [t for t in shlex.split(text, comments=True) if t.startswith("--")]


def test_megatron_lm_command_uses_only_megatron_flags_and_names_every_knob():
    w, c = example("deepseek")  # H100: Megatron-LM by default
    assert c.stack == "megatron-lm" and c.stack_is_default
    for trial in (TrialConfig(), TrialConfig(moe_token_dispatcher_type="flex", overlap_moe_expert_parallel_comm=True,
                                             vpp=2, pp_layout="none", pp_last_layers=5, tp_comm_overlap=True),
                  TrialConfig(recompute_granularity="selective", recompute_modules=["mla_up_proj", "mlp"])):
        cfg = w.effective(trial)
        plan = launch_plan(cfg, w, c, "w.yaml")
        body, _, off_line = plan.command.partition("# off")
        flags = _flags(body)
        # TP 2 needs CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args), except beside the MoE EP overlap
        env = "" if cfg.overlap_moe_expert_parallel_comm else "CUDA_DEVICE_MAX_CONNECTIONS=1 "
        assert body.startswith(f"{env}torchrun --nnodes 32 --nproc-per-node 8") and "pretrain_gpt.py" in body
        assert [f for f in flags if not f.startswith(("--nnodes", "--nproc", "--node-rank", "--master"))
                and not _flag_ok(f)] == []
        on, off = layout_flags(cfg, w, "nvidia")
        stated = {f.split()[0] for f in on} | set(off)
        for name, spec in KNOB_SPECS.items():  # every knob Megatron-LM has is either set or named as off
            if spec.megatron_lm and knob_available(name, "megatron-lm", "nvidia"):
                assert spec.megatron_lm in stated, name
        assert set(off) <= set(_flags(off_line))
        if trial.vpp == 2:
            assert "--num-virtual-stages-per-pipeline-rank 2" in body and "--decoder-last-pipeline-num-layers 5" in body
        if trial.recompute_modules:
            assert "--recompute-modules mla_up_proj mlp" in body
    assert all(_flag_ok(f.split()[0]) for f in model_flags(w.model, 4096))
    dense, _ = example("llama70b")
    assert "--moe-router-topk" not in " ".join(model_flags(dense.model, 8192))  # no MoE flags for a dense model


def test_attention_patterns_become_flags_megatron_parses():
    """Windows, sinks, Q/K norms and per-layer lists as arguments.py reads them (`tuple_type`: "a,b";
    `moe_freq_type` / `no_rope_freq_type`: a Python list expression)."""
    hf = EXAMPLES.parent / "tests" / "fixtures" / "hf"
    oss = load_workload(hf / "gpt-oss-20b").model
    flags = model_flags(oss, 4096)
    assert all(_flag_ok(f.split()[0]) for f in flags)
    assert {"--window-size 127,0", "--softmax-type learnable", "--add-qkv-bias"} <= set(flags)
    skip = next(f for f in flags if f.startswith("--window-attn-skip-freq")).split(" ", 1)[1]
    assert ast.literal_eval(shlex.split(skip)[0]) == oss.window_attn_skip_freq
    scout = load_workload(hf / "llama-4-scout-17b-16e")
    flags = model_flags(scout.model, 8192)
    assert all(_flag_ok(f.split()[0]) for f in flags) and {"--qk-l2-norm", "--no-rope-freq 4"} <= set(flags)
    c = load_cluster(EXAMPLES / "clusters" / "h100-8n.yaml")
    cfg = scout.effective(TrialConfig(ep=16))
    assert "# not a Megatron-LM argument: attention_chunk_size 8192" in launch_plan(cfg, scout, c, "w.yaml").command
    ds = load_workload(hf / "deepseek-v2").model
    freq = next(f for f in model_flags(ds, 4096) if f.startswith("--moe-layer-freq")).split(" ", 1)[1]
    assert ast.literal_eval(shlex.split(freq)[0]) == list(ds.moe_layer_freq)


def test_megatron_lm_split_and_vpp_flags():
    w, c = example("deepseek")
    text = launch_plan(w.effective(), w, c, "w.yaml").command
    assert "--decoder-last-pipeline-num-layers 5" in text
    layout = launch_plan(w.effective(TrialConfig(pp_layout="Et|(tt|)*30mL")), w, c, "w.yaml").command.split("# off")[0]
    assert "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'" in layout
    assert "--decoder-last-pipeline-num-layers 5" not in layout
    assert "--num-virtual-stages-per-pipeline-rank" not in layout
    assert "--virtual-pipeline-model-parallel-size" not in layout  # not a Megatron-LM flag


def test_primus_overlay_loads_as_an_experiment_with_every_knob():
    w = load_workload(EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml")
    c = load_cluster(EXAMPLES / "clusters" / "mi355x-4n.yaml")
    assert c.stack == "primus"
    stage2 = TrialConfig(use_turbo_deepep=True, sync_free_stage=2)
    # the recipe runs the legacy grouped GEMM, which stage 2's Turbo grouped GEMM refuses (rocm_arg_validation.py)
    assert "legacy_gg_turbo" in {v.code for v in validate(w.model, w.effective(stage2), c)}
    w = w.model_copy(update={"training": w.training.model_copy(update={"moe_use_legacy_grouped_gemm": False})})
    cfg = w.effective(stage2)
    plan = launch_plan(cfg, w, c, str(EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml"))
    assert plan.where == "a Primus checkout"
    # EXP is the overlay beside launch.sh, run_pretrain.sh the checkout's: no path into paratune's clone
    assert 'EXP="$HERE/winner.primus.yaml" NNODES=4 GPUS_PER_NODE=8' in plan.command
    assert plan.command.endswith('bash examples/run_pretrain.sh "$@"')
    doc = yaml.safe_load(plan.files["winner.primus.yaml"])
    # the parser's required experiment keys (primus/core/launcher/parser.py)
    assert {"work_group", "user_name", "exp_name", "workspace"} <= set(doc)
    assert not any("${" in str(doc[k]) for k in ("work_group", "user_name", "exp_name", "workspace"))  # literal
    trainer = doc["modules"]["pre_trainer"]
    assert trainer["framework"] == "megatron" and trainer["model"] and trainer["config"]
    assert "extends" not in doc and str(EXAMPLES.parent) not in plan.files["winner.primus.yaml"]  # self-contained
    # the example's model file is paratune's own, not a Primus preset: its keys ride over Primus's base preset
    assert trainer["model"] == "language_model.yaml" and trainer["overrides"]["num_layers"] == 56
    o = trainer["overrides"]
    assert set(overrides(cfg, w, c)) <= set(PRIMUS_KEYS), set(overrides(cfg, w, c)) - set(PRIMUS_KEYS)
    for name, spec in KNOB_SPECS.items():  # every knob Primus has on MI355X is written, off ones too
        if spec.primus and knob_available(name, "primus", "amd") and name != "pp_schedule":
            assert spec.primus in o, name
    # Primus's validation (rocm_arg_validation.py): stage 2 needs Turbo on and its grouped GEMM set explicitly
    assert o["turbo_sync_free_moe_stage"] == 2 and o["enable_primus_turbo"] and o["use_turbo_grouped_gemm"]
    assert o["moe_use_legacy_grouped_gemm"] is False and o["moe_router_dtype"] == "fp32"
    assert o["num_virtual_stages_per_pipeline_rank"] == 2 and o["patch_zero_bubble"] is False
    assert o["tp_comm_overlap"] is False and o["overlap_moe_expert_parallel_comm"] is False  # off, yet written
    zbv = overrides(w.effective(TrialConfig(pp_schedule="zbv", vpp=2, recompute_granularity="none")), w, c)
    assert zbv["patch_zero_bubble"] and zbv["zero_bubble_v_schedule"]
    assert zbv["num_virtual_stages_per_pipeline_rank"] == 2


def test_primus_overlay_of_a_native_workload_carries_the_architecture():
    w, c = example("llama8b")  # native workload on MI300X: Primus
    doc = yaml.safe_load(launch_plan(w.effective(), w, c, str(EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml"))
                         .files["winner.primus.yaml"])
    o = doc["modules"]["pre_trainer"]["overrides"]
    assert "extends" not in doc and doc["modules"]["pre_trainer"]["model"] == "language_model.yaml"
    assert o["num_layers"] == w.model.num_layers and o["hidden_size"] == w.model.hidden_size
    assert o["group_query_attention"] is True and o["num_query_groups"] == w.model.num_query_groups


def test_bridge_overrides_are_config_container_paths():
    w, c = example("llama70b")
    c = c.model_copy(update={"stack": "megatron-bridge", "stack_is_default": False})
    vocabulary = {line.strip() for line in (EXAMPLES.parent / "oracle" / "inputs" / "vocabulary" /
                                            "megatron_bridge.txt").read_text().splitlines() if not line.startswith("#")}
    cfg = w.effective(TrialConfig(tp_comm_overlap=True))
    overrides_ = hydra_overrides(cfg, w, c)
    assert [o for o in overrides_ if o.split("=")[0] not in vocabulary] == []
    assert "comm_overlap.tp_comm_overlap=true" in overrides_ and "mixed_precision.fp8=null" in overrides_
    assert "ddp.use_distributed_optimizer=true" in overrides_
    assert "optimizer.use_distributed_optimizer=true" in overrides_
    assert "scripts/training/run_recipe.py" in launch_plan(cfg, w, c, "w.yaml").command
    layout = hydra_overrides(w.effective(TrialConfig(pp_layout="Et|(t*10|)*7t*9L", vpp=1)), w, c)
    assert 'model.pipeline_model_parallel_layout="Et|(t*10|)*7t*9L"' in layout  # quoted: |*() are Hydra grammar
