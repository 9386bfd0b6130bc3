"""`Ctx`: the hashable facts one rank's per-layer work depends on (model shape, sharding, hardware)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

from ..layout import DEEPEP, HYBRIDEP
from ..model_shape import ModelShape
from ..specs import GPUSpec
from .attention_rates import fp8_speedup, window_rates
from .calibration import Constants
from .comm import Net
from .constants import FLOPS_PER_EXP
from .gemm import GemmBackend, gemm_backend

HALF = "bf16"  # the non-FP8 GEMM precision (FP16 peaks equal BF16 peaks on every catalog GPU)


@dataclass(frozen=True)
class Ctx:
    shape: ModelShape
    mbs: int
    seq: int
    tokens: int  # tokens of one micro-batch on this rank (the layout facts': MBS·seq / CP)
    tp: int
    cp: int
    ep: int
    etp: int
    sp: bool
    fp8: bool
    mxfp8: bool  # fp8_recipe mxfp8: the linears' GEMMs block-scaled (`gemm.MXFP8_OVER_FP8`)
    dpa: str  # the attention core's dtype: bf16, or fp8 / mxfp8 under fp8_dot_product_attention (`dpa_dtype`)
    flash: bool
    ce_fusion: bool
    dispatch: str  # MoE dispatch backend (`LayoutFacts.dispatch`): allgather, alltoall, deepep, ...
    deepep_sms: int | None  # moe_deepep_num_sms: the SMs DeepEP's kernels run on (None: DeepEP's own count)
    hybridep_sms: int | None  # moe_hybridep_num_sms: the SMs HybridEP's dispatch and combine run on
    grouped_gemm: bool  # one grouped launch for the local experts' GEMMs (else one GEMM each)
    legacy_grouped: bool  # the legacy GroupedMLP (`moe_use_legacy_grouped_gemm`): BF16 expert GEMMs
    permute_fusion: bool  # moe_permute_fusion: TE's fused permute/unpermute kernels
    op_fuser: bool  # use_transformer_engine_op_fuser: the routed experts' MLP as TE's fused op sequence
    shared_overlap: bool  # moe_shared_expert_overlap with the all-to-all dispatcher: shared experts beside the exchange
    sync_free: bool  # Primus's sync-free MoE stages (turbo_sync_free_moe_stage >= 1): no host syncs
    graphed: frozenset[str]  # layer scopes CUDA graphs replay (`host_issue.captured`)
    tp_overlap: bool  # tp_comm_overlap: TP collectives pipelined with their GEMMs (TE userbuffers)
    ep_overlap: bool  # overlap_moe_expert_parallel_comm: EP dispatch/combine behind another micro-batch
    fsdp: int  # FSDP group of the dense weights (the DP·CP ranks sharing them, stride TP); 0 without FSDP
    fsdp_expert: int  # FSDP group of the expert weights (expert-DP, stride ETP·EP); 0 without FSDP
    grad_bytes: int  # bytes per gradient element reduced over DP: 4 (fp32) or 2 (bf16)
    gpu: GPUSpec
    gpus_per_node: int
    c: Constants

    @property
    def sp_tokens(self) -> float:
        """Tokens per rank outside the TP region (sharded over TP under sequence parallelism)."""
        return self.tokens / self.tp if self.sp else float(self.tokens)

    def replaced(self, **changes: object) -> Ctx:
        """`dataclasses.replace(self, **changes)`, built by copying the fields (no cached value) instead of running the
        frozen `__init__` over thirty of them: 9 µs a copy, and the search's bound takes three per knob variant
        of a context (`bound._fastest_times`, the views below); tests/test_hot_path.py checks the two agree."""
        if not _FIELD_SET.issuperset(changes):
            raise TypeError(f"Ctx has no field {sorted(set(changes) - _FIELD_SET)}")
        new = object.__new__(Ctx)
        new.__dict__.update({name: self.__dict__[name] for name in _FIELDS}, **changes)
        return new

    @cached_property
    def dense_view(self) -> Ctx:
        """This context with its MoE-only knobs (dispatch, grouped and legacy GEMMs, permute fusion, op fuser,
        shared-expert and EP overlap, sync-free stages) at one setting: a dense layer, the embedding and the
        output head read none of them, so contexts that differ in those alone time these blocks once
        (`layers.transformer_layer`, `embedding`, `output_head`; tests/test_hot_path.py)."""
        return self.replaced(dispatch="alltoall", deepep_sms=None, hybridep_sms=None, grouped_gemm=True,
                             legacy_grouped=False, permute_fusion=False, op_fuser=False, shared_overlap=False,
                             sync_free=False, ep_overlap=False)

    @property
    def dispatch_sms(self) -> int | None:
        """The SMs the dispatch backend in use runs on (megatron-core 0.16.1 token_dispatcher.py passes
        `moe_deepep_num_sms` to DeepEP's `Buffer.set_num_sms` and `moe_hybridep_num_sms` to HybridEP's dispatch
        and combine); None for the other dispatchers."""
        return {DEEPEP: self.deepep_sms, HYBRIDEP: self.hybridep_sms}.get(self.dispatch)

    @cached_property
    def overlap_free(self) -> Ctx:
        """This context with the TP and EP communication overlaps off: a MoE layer's attention, experts and shared
        experts read neither (only its TP collectives and the EP overlap's pairing do), so the overlap settings
        share them (`layers._moe_body`; tests/test_hot_path.py)."""
        return self.replaced(tp_overlap=False, ep_overlap=False)

    @cached_property
    def gemm(self) -> GemmBackend:
        return gemm_backend(self.gpu, self.c)

    @cached_property
    def net(self) -> Net:
        return Net.of(self.gpu, self.gpus_per_node, self.c)

    @cached_property
    def hbm(self) -> float:
        """Effective HBM bandwidth, bytes per ms."""
        return self.gpu.hbm_tb_s * 1e9 * self.c.hbm_eff

    @cached_property
    def launch_us(self) -> float:
        """Host time per kernel launch on this GPU's host CPU (`GPUSpec.host_cpu`): PyTorch's and Transformer
        Engine's Python runs slower per op on Grace than on the Xeon hosts of HGX/DGX boards (TransformerEngine
        issue #2053: a torch Linear forward's CPU time 37.1 us on GB200 against 13.5 us on a DGX H100), so a
        Grace host has its own constant, fitted on the GB200/GB300 rows."""
        return self.c.grace_launch_us if self.gpu.host_cpu == "grace" else self.c.launch_us

    @cached_property
    def attn_rate(self) -> float:
        """Flash-attention FLOPs per ms."""
        return self.gpu.bf16_tflops * 1e9 * self.c.attn_eff

    @cached_property
    def attn_rates(self) -> tuple[float, float]:
        """(forward, backward) full-attention FLOPs per ms: `attn_rate` at FP8 attention's measured speed-up
        (`attention_rates.fp8_speedup`)."""
        f, b = fp8_speedup(self.gpu.family, self.dpa)
        return self.attn_rate * f, self.attn_rate * b

    @cached_property
    def window_rates(self) -> tuple[float, float] | None:
        """(forward, backward) FLOPs per ms of sliding-window attention where cuDNN publishes it."""
        return window_rates(self.gpu.family, self.dpa)

    @cached_property
    def exp_ms(self) -> float:
        """ms of the special function units' time per softmax exponential (`constants.FLOPS_PER_EXP`: the dense
        BF16 peak over the family's tensor FLOPs per exponential); 0 where no rate is published."""
        per = FLOPS_PER_EXP.get(self.gpu.family)
        return per / (self.gpu.bf16_tflops * 1e9) if per else 0.0

    @property
    def unfused_expert_bias(self) -> bool:
        """Whether the experts' fc2 bias runs as megatron-core's own per-expert passes (`EXPERT_BIAS_BYTES`,
        and their launches in `host_issue`): TE's GroupedLinear with a bias outside the op fuser (megatron-core
        2edffadb52 transformer/moe/experts.py `TEGroupedMLP._apply_bias`). Under
        `use_transformer_engine_op_fuser` the fused op sequence adds it, scaled by the probs, in fc2's grouped
        GEMM (TransformerEngine v2.17.1 pytorch/ops/fused/grouped_mlp.py: `bias`, `bias_scale` of
        `general_grouped_gemm_for_grouped_tensor`; its gradient in the dGLU kernel's dbias and
        `compute_grouped_dbias_dscales`), not costed. The legacy GroupedMLP refuses a bias (`legality`);
        SequentialMLP's experts are plain MLPs."""
        return self.shape.bias and self.grouped_gemm and not self.legacy_grouped and not self.op_fuser

    def linear_dtype(self) -> str:
        return ("mxfp8" if self.mxfp8 else "fp8") if self.fp8 else HALF

    def expert_dtype(self) -> str:
        """The routed experts' GEMM precision: the legacy GroupedMLP's `gg.ops.gmm` (the grouped_gemm package)
        runs BF16 whatever `fp8` says; TE's grouped and sequential linears take FP8 (megatron-core 0.16.1
        transformer/moe/experts.py)."""
        return HALF if self.legacy_grouped else self.linear_dtype()


_FIELDS = tuple(f.name for f in fields(Ctx))
_FIELD_SET = frozenset(_FIELDS)
