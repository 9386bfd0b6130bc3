"""The software stacks a cluster runs and, for every search knob, the stacks that have it.

A knob names its argument in each stack that defines it (Megatron-LM: the `pretrain_gpt.py` flag of
`megatron/training/arguments.py`; Primus: the key of `primus/configs/modules/megatron/*.yaml`;
Megatron-Bridge: the `ConfigContainer` path of `src/megatron/bridge/training/config.py`, taking the
`comm_overlap` / `mixed_precision` section where Bridge's `runtime_config_update` rewrites the
model/ddp field from it), the GPU
vendors it runs on, and where its effect on time and on memory comes from. A knob (or value) the
cluster's stack lacks is outside the search and a `stack_knob` violation when a trial sets it.
Revisions: megatron-core 0.16.1 (`pipeline_split.MEGATRON_CORE_VERSION`), Primus fd1eeab,
Megatron-Bridge 067f987 (the vocabulary files in `oracle/inputs/vocabulary/` list every name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Stack = Literal["megatron-lm", "megatron-bridge", "primus"]
STACKS: tuple[Stack, ...] = ("megatron-lm", "megatron-bridge", "primus")
# A cluster that names no stack runs its vendor's: Primus is AMD's Megatron stack (ROCm), Megatron-LM
# NVIDIA's reference trainer.
DEFAULT_STACK: dict[str, Stack] = {"amd": "primus", "nvidia": "megatron-lm"}
ALL = frozenset(STACKS)
BOTH_VENDORS = frozenset({"nvidia", "amd"})


@dataclass(frozen=True)
class Knob:
    """One search knob: its name in each stack that has it, where it runs, and its sourced effects."""

    name: str  # TrialConfig field
    megatron_lm: str | None  # pretrain_gpt.py flag (None: Megatron-LM lacks it)
    primus: str | None  # Primus YAML key
    bridge: str | None  # Megatron-Bridge ConfigContainer path
    time: str  # the effect on time, with its source
    memory: str  # the effect on memory, with its source
    off: object = None  # the value that leaves the feature off (any stack accepts it)
    vendors: frozenset[str] = BOTH_VENDORS
    # values only some stacks have (e.g. the zero-bubble schedules are Primus patches)
    value_stacks: dict[object, frozenset[str]] = field(default_factory=dict)

    def arg(self, stack: Stack) -> str | None:
        """This knob's argument name in `stack`, None where the stack lacks it."""
        return {"megatron-lm": self.megatron_lm, "primus": self.primus, "megatron-bridge": self.bridge}[stack]

    def stacks(self) -> frozenset[str]:
        return frozenset(s for s in STACKS if self.arg(s) is not None)


_SPLIT_TIME = "per-stage layers set each stage's compute (oracle.pipeline_split, megatron-core 0.16.1)"
_SPLIT_MEM = "per-stage layers set each stage's weights and stored activations (oracle.memory.inflight)"

KNOBS: tuple[Knob, ...] = (
    Knob("tp", "--tensor-model-parallel-size", "tensor_model_parallel_size", "model.tensor_model_parallel_size",
         "GEMMs sharded over TP, TP/SP collectives per region (oracle.performance.layers)",
         "weights / TP, activations / TP under SP (Korthikanti 2022 §4)", off=1),
    Knob("pp", "--pipeline-model-parallel-size", "pipeline_model_parallel_size", "model.pipeline_model_parallel_size",
         "pipeline schedule with its bubble (oracle.performance.schedule)",
         "layers per stage; in-flight micro-batches per schedule (oracle.memory.inflight)", off=1),
    Knob("cp", "--context-parallel-size", "context_parallel_size", "model.context_parallel_size",
         "attention K/V ring over CP (oracle.performance.layers._cp_ring)", "tokens per rank / CP", off=1),
    Knob("ep", "--expert-model-parallel-size", "expert_model_parallel_size", "model.expert_model_parallel_size",
         "token dispatch/combine over EP (oracle.performance.comm)", "experts per rank / EP", off=1),
    Knob("etp", "--expert-tensor-parallel-size", "expert_tensor_parallel_size", "model.expert_tensor_parallel_size",
         "expert GEMMs sharded over ETP with a reduce-scatter", "expert weights / ETP"),
    Knob("vpp", "--num-virtual-stages-per-pipeline-rank", "num_virtual_stages_per_pipeline_rank",
         "model.virtual_pipeline_model_parallel_size", "bubble / VPP, VPP x the P2P (Narayanan 2021 §2.2)",
         "warm-up chunk-forwards (PP-r-1)*2 + (VPP-1)*N (megatron-core schedules.py)", off=1),
    Knob("mbs", "--micro-batch-size", "micro_batch_size", "train.micro_batch_size",
         "GEMM shapes and micro-batch count", "activations x MBS"),
    Knob("gbs", "--global-batch-size", "global_batch_size", "train.global_batch_size",
         "micro-batches per iteration", "none beyond the micro-batch count"),
    # no argument of its own: VPP sets Megatron's schedule; Primus's zero-bubble patches set ZB-H1 / ZB-V
    # (patch_zero_bubble, zero_bubble_v_schedule: planner.launch.settings.primus_extras)
    Knob("pp_schedule", None, None, None,
         "1F1B / interleaved (Megatron), ZB-H1 and ZB-V (Qi 2023; Primus's zero-bubble patches)",
         "in-flight micro-batches per schedule (oracle.memory.inflight)", off="1f1b",
         value_stacks={"1f1b": ALL, "interleaved": ALL, "zb": frozenset({"primus"}), "zbv": frozenset({"primus"})}),
    Knob("recompute_granularity", "--recompute-granularity", "recompute_granularity", "model.recompute_granularity",
         "re-runs the recomputed forward in the backward",
         "drops the recomputed activations (megatron-core recompute)"),
    Knob("recompute_method", "--recompute-method", "recompute_method", "model.recompute_method",
         "which layers full recompute re-runs", "which layers keep only their input"),
    Knob("recompute_num_layers", "--recompute-num-layers", "recompute_num_layers", "model.recompute_num_layers",
         "layers per recompute group (uniform) or per chunk (block)", "stored layer inputs per group"),
    Knob("recompute_modules", "--recompute-modules", "recompute_modules", "model.recompute_modules",
         "each module's forward re-run (oracle.performance.work.RECOMPUTE_MODULES)",
         "each module's discarded tensors (megatron-core transformer_config.py)"),
    Knob("fp8", "--fp8-format", "fp8", "mixed_precision.fp8",
         "FP8 GEMMs at the FP8 peak plus casts (oracle.performance.layers._linear)",
         "FP8 weight cache and FP8 GEMM inputs (Transformer Engine)"),
    Knob("fp8_param_gather", "--fp8-param-gather", "fp8_param_gather", "mixed_precision.fp8_param_gather",
         "FP8 weight all-gather", "no BF16 weight copy beside the FP8 one", off=False),
    Knob("use_distributed_optimizer", "--use-distributed-optimizer", "use_distributed_optimizer",
         "ddp.use_distributed_optimizer", "reduce-scatter grads, all-gather weights over DP (ZeRO-1)",
         "optimizer state / DP (megatron-core distrib_optimizer.py)", off=False),
    Knob("use_torch_fsdp2", "--use-torch-fsdp2", "use_torch_fsdp2", "dist.use_torch_fsdp2",
         "per-layer weight all-gather and grad reduce-scatter over DP·CP (torch FSDP2)",
         "weights, grads and optimizer state / DP·CP", off=False),
    Knob("use_megatron_fsdp", "--use-megatron-fsdp", "use_megatron_fsdp", "ddp.use_megatron_fsdp",
         "per its data_parallel_sharding_strategy (megatron-core distributed_data_parallel_config.py)",
         "per its sharding strategy", off=False),
    Knob("optimizer_cpu_offload", "--optimizer-cpu-offload", "optimizer_cpu_offload", "optimizer.optimizer_cpu_offload",
         "not modelled (the optimizer step on the host)", "optimizer state moved to the host (HybridDeviceOptimizer)",
         off=False),
    Knob("overlap_grad_reduce", "--overlap-grad-reduce", "overlap_grad_reduce", "comm_overlap.overlap_grad_reduce",
         "grad buckets reduced during the last backward (megatron-core DDP)", "none modelled", off=False),
    Knob("cross_entropy_loss_fusion", "--cross-entropy-loss-fusion", "cross_entropy_loss_fusion",
         "model.cross_entropy_loss_fusion", "fused loss traffic (oracle.performance.constants.LOSS_BYTES)",
         "no fp32 logits copy", off=False),
    Knob("grad_reduce_in_fp32", "--grad-reduce-in-bf16", "grad_reduce_in_bf16", "mixed_precision.grad_reduce_in_fp32",
         "gradient bytes reduced over DP (4 or 2)", "gradient buffer bytes (4 or 2)"),
    Knob("pp_layout", "--pipeline-model-parallel-layout", "pipeline_model_parallel_layout",
         "model.pipeline_model_parallel_layout", _SPLIT_TIME, _SPLIT_MEM),
    Knob("pp_first_layers", "--decoder-first-pipeline-num-layers", "decoder_first_pipeline_num_layers",
         "model.num_layers_in_first_pipeline_stage", _SPLIT_TIME, _SPLIT_MEM),
    Knob("pp_last_layers", "--decoder-last-pipeline-num-layers", "decoder_last_pipeline_num_layers",
         "model.num_layers_in_last_pipeline_stage", _SPLIT_TIME, _SPLIT_MEM),
    Knob("pp_embedding_in_split", "--account-for-embedding-in-pipeline-split",
         "account_for_embedding_in_pipeline_split", "model.account_for_embedding_in_pipeline_split",
         _SPLIT_TIME, _SPLIT_MEM, off=False),
    Knob("pp_loss_in_split", "--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split",
         "model.account_for_loss_in_pipeline_split", _SPLIT_TIME, _SPLIT_MEM, off=False),
    Knob("moe_token_dispatcher_type", "--moe-token-dispatcher-type", "moe_token_dispatcher_type",
         "model.moe_token_dispatcher_type", "allgather / NCCL all-to-all / flex (DeepEP, HybridEP) dispatch "
         "(oracle.performance.comm)", "NCCL all-to-all / allgather buffers and DeepEP's NVLink/RDMA buffers "
         "(oracle.memory.overheads)", off="allgather"),
    Knob("moe_flex_dispatcher_backend", "--moe-flex-dispatcher-backend", None, "model.moe_flex_dispatcher_backend",
         "DeepEP's / HybridEP's dispatch at their published rates (oracle.performance.moe_layer, ep_bandwidth)",
         "DeepEP's buffers (oracle.memory.overheads.deepep_buffers); HybridEP's worst-case buffers are not "
         "modelled", off="deepep", vendors=frozenset({"nvidia"})),
    Knob("moe_grouped_gemm", "--moe-grouped-gemm", "moe_grouped_gemm", "model.moe_grouped_gemm",
         "one grouped launch for the local experts' GEMMs, or one GEMM per expert (SequentialMLP) "
         "(oracle.performance.moe_layer.expert_mlps)", "none modelled", off=False),
    Knob("tp_comm_overlap", "--tp-comm-overlap", "tp_comm_overlap", "comm_overlap.tp_comm_overlap",
         "TP all-gather / reduce-scatter pipelined with the GEMMs they feed (Transformer Engine userbuffers; "
         "on ROCm Primus's re-implementation, te_patches/tp_overlap_patches.py)",
         "userbuffers workspace not modelled", off=False),
    Knob("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm",
         "comm_overlap.overlap_moe_expert_parallel_comm",
         "EP dispatch/combine of one micro-batch hidden behind another's compute (megatron-core "
         "combined_1f1b.py)", "one more warm-up micro-batch under interleaving (megatron-core schedules.py)",
         off=False),
    Knob("cuda_graph_impl", "--cuda-graph-impl", "cuda_graph_impl", "model.cuda_graph_impl",
         "not modelled (launch overhead kept)", "static inputs and masks per stored layer sample "
         "(oracle.memory.overheads.cuda_graph_buffers; megatron-core cuda_graphs.py)",
         off="none", vendors=frozenset({"nvidia"})),  # on ROCm Primus documents graphs only for MegaMoE (mega-moe.md)
    Knob("use_turbo_deepep", None, "use_turbo_deepep", None,
         "Primus-Turbo DeepEP dispatch, which sets the flex dispatcher (patches/turbo/moe_dispatcher_patches.py; "
         "costed by oracle.performance.moe_layer.dispatch_combine)",
         "DeepEP's buffers (oracle.memory.overheads.deepep_buffers)",
         off=False,
         vendors=frozenset({"amd"})),
    Knob("sync_free_stage", None, "turbo_sync_free_moe_stage", None,
         "not modelled: the stages remove host syncs (rocm_arg_validation.py _get_sync_free_moe_options) and no "
         "measured speedup is published, so the knob is accepted, reported and never searched",
         "not modelled (stage 3 sizes permute buffers for the worst case, primus_turbo moe_permute.py)", off=0,
         vendors=frozenset({"amd"})),
)
KNOB_SPECS: dict[str, Knob] = {k.name: k for k in KNOBS}


def default_stack(vendor: str) -> Stack:
    """The stack a cluster of this GPU vendor runs when its file names none."""
    return DEFAULT_STACK[vendor]


def knob_available(knob: str, stack: str, vendor: str) -> bool:
    """Whether `stack` on `vendor` GPUs has this knob (a knob without a registry entry is everyone's)."""
    spec = KNOB_SPECS.get(knob)
    if spec is None:
        return True
    if spec.name == "pp_schedule":
        return True  # its values are restricted, not the knob
    return stack in spec.stacks() and vendor in spec.vendors


def value_available(knob: str, value: object, stack: str, vendor: str) -> bool:
    """Whether `stack` on `vendor` GPUs can run `knob` at `value` (the off value runs everywhere)."""
    spec = KNOB_SPECS.get(knob)
    if spec is None or value == spec.off or value is None:
        return True
    if not knob_available(knob, stack, vendor):
        return False
    allowed = spec.value_stacks.get(value)
    return allowed is None or stack in allowed
