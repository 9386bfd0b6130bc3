"""megatron-core 0.16.1 as the reference for paratune's pipeline split and parallel-grid rules.

Not a test module: `tests/test_megatron_differential.py` imports it. Everything here asks
megatron-core's own code (the pinned wheel, `megatron/core/...` below) and only fills in process
state that would otherwise come from `torch.distributed`.

Facts read in the megatron-core 0.16.1 source (paths under `megatron/core/`):

- `transformer/transformer_config.py` `TransformerConfig.__post_init__` refuses a layout together
  with first/last/account_for, first/last together with account_for, first/last <= 0 or not
  divisible by VPP, middle layers that do not divide over the middle ranks (or by VPP), and the
  account_for totals that do not divide by PP (and by VPP). It does NOT check the plain even split:
  `num_layers % pp` and the per-rank `% vpp` are asserts inside
  `transformer/transformer_block.py` `get_num_layers_to_build`, as is "not enough layers" when the
  embedding / loss take the last layer of a virtual stage.
- A layout string is parsed by `transformer/pipeline_parallel_layer_layout.py`
  (`parse_str_to_list`: commas dropped, one pass of `(...)*n`, then `x*n`; stages VPP-major) and
  checked by `validate_layer_layout`. Its VPP is `stages // pp`; an explicit VPP must equal it
  (an explicit VPP of 1 with one stage per rank is accepted and keeps VPP = 1; without an explicit
  VPP a detected 1 leaves VPP None). E and L positions are only validated (E first and L last of the
  flattened layout, so leading/trailing empty stages pass); nothing else in megatron-core reads them.
  On the layout path `transformer_block.get_num_layers_to_build` ignores its `pp_rank` argument and
  reads `parallel_state.get_pipeline_model_parallel_rank()`, so the rank is set there.
- MTP for the non-layout splits: `transformer/multi_token_prediction.py`
  `get_mtp_num_layers_to_build` (called by `models/gpt/gpt_layer_specs.py`
  `get_gpt_mtp_block_spec_for_backend`) builds all `mtp_num_layers` where
  `parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=...)`, i.e. the last PP rank
  in its last virtual stage, the stage with the loss; `mtp_on_this_rank` and `get_mtp_ranks` say
  the same ("we only support put all of MTP layers on the last pipeline stage"). With a layout the
  MTP count is the number of `m` in that stage. This module calls `get_mtp_num_layers_to_build`.
- Embedding / loss for the non-layout splits: `parallel_state.is_pipeline_first_stage` /
  `is_pipeline_last_stage(ignore_virtual=False, vp_stage)` (the `pre_process` / `post_process`
  that Megatron passes to `GPTModel`): (pp 0, vp 0) and (last pp, last vp).
- VPP without PP: `parallel_state.initialize_model_parallel` raises "pipeline-model-parallel size
  should be greater than 1 with interleaved schedule" whenever the VPP size is not None and PP <= 1,
  VPP = 1 included (the config itself accepts it, and `get_num_layers_to_build` then ignores VPP:
  every chunk would get all layers). Running it per case would need a process group, so
  `megatron_split` mirrors that one condition (`_VPP_NEEDS_PP`) and the test confirms the mirror by
  calling `initialize_model_parallel` on torch's "fake" backend (`initialize_refusal`). With
  PP > 1 an explicit VPP of 1 counts exactly like None.
- Quirk, reported not corrected: PP = 1 with both first and last set and first + last != num_layers
  is accepted by the config and the single rank builds `last` layers (the total differs from
  num_layers). The differential test counts these cases.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import torch
import torch.distributed as dist

with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed" on CPU
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.moe.token_dispatcher import MoEFlexTokenDispatcher
    from megatron.core.transformer.multi_token_prediction import get_mtp_num_layers_to_build
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

from paratune.oracle.specs import EffectiveConfig, ModelArch

MEGATRON_CORE_VERSION = "0.16.1"
StageTuple = tuple[int, bool, bool, int]  # (decoders, has_embedding, has_loss, mtp_layers)

_VPP_NEEDS_PP = ("initialize_model_parallel: pipeline-model-parallel size should be greater than 1 "
                 "with interleaved schedule")
# What megatron-core raises for a split it refuses (IndexError: an all-empty layout in
# validate_layer_layout; KeyError/NotImplementedError: defensive).
_REFUSALS = (ValueError, AssertionError, IndexError, KeyError, NotImplementedError)

for _name in ("megatron", "megatron.core"):
    logging.getLogger(_name).setLevel(logging.ERROR)


@contextlib.contextmanager
def _pipeline_state():
    """Save and restore the parallel_state globals this module sets (no process group is made)."""
    saved = (parallel_state._MPU_PIPELINE_MODEL_PARALLEL_RANK,
             parallel_state._MPU_PIPELINE_MODEL_PARALLEL_WORLD_SIZE,
             parallel_state._VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE)
    try:
        yield
    finally:
        parallel_state.set_pipeline_model_parallel_rank(saved[0])
        parallel_state.set_pipeline_model_parallel_world_size(saved[1])
        parallel_state.set_virtual_pipeline_model_parallel_world_size(saved[2])


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def build_config(num_layers: int, mtp_layers: int, pp: int, vpp: int | None, layout: str | None,
                 first: int | None, last: int | None, embedding: bool, loss: bool) -> TransformerConfig:
    """megatron-core's own TransformerConfig for these split arguments (raises where it refuses)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerConfig(
            num_layers=num_layers,
            hidden_size=64,
            num_attention_heads=4,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp,
            pipeline_dtype=torch.bfloat16 if pp > 1 else None,
            pipeline_model_parallel_layout=layout,
            num_layers_in_first_pipeline_stage=first,
            num_layers_in_last_pipeline_stage=last,
            account_for_embedding_in_pipeline_split=embedding,
            account_for_loss_in_pipeline_split=loss,
            mtp_num_layers=mtp_layers or None,
        )


def megatron_split(num_layers: int, mtp_layers: int, pp: int, vpp: int | None, layout: str | None,
                   first: int | None, last: int | None, embedding: bool,
                   loss: bool) -> tuple[StageTuple, ...] | str:
    """Every virtual stage in model order (index = vpp_rank * pp + pp_rank) as (decoders,
    has_embedding, has_loss, mtp_layers), as megatron-core builds them; or the reason it refuses."""
    try:
        config = build_config(num_layers, mtp_layers, pp, vpp, layout, first, last, embedding, loss)
    except _REFUSALS as exc:
        return "config: " + _reason(exc)
    v_size = config.virtual_pipeline_model_parallel_size  # a layout may have set it
    if v_size is not None and pp <= 1:
        return _VPP_NEEDS_PP
    chunks = v_size or 1
    table = config.pipeline_model_parallel_layout.layout if layout is not None else None
    stages: list[StageTuple] = []
    with _pipeline_state():
        parallel_state.set_pipeline_model_parallel_world_size(pp)
        parallel_state.set_virtual_pipeline_model_parallel_world_size(v_size)
        for vp in range(chunks):
            vp_stage = vp if v_size is not None else None
            for rank in range(pp):
                parallel_state.set_pipeline_model_parallel_rank(rank)
                try:
                    decoders = get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=rank)
                    mtp = get_mtp_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=rank)
                except _REFUSALS as exc:
                    return f"get_num_layers_to_build(pp_rank={rank}, vp_stage={vp_stage}): " + _reason(exc)
                if decoders < 0:
                    return f"get_num_layers_to_build(pp_rank={rank}, vp_stage={vp_stage}) = {decoders} < 0"
                if table is not None:
                    cell = table[rank][vp]
                    emb, los = LayerType.embedding in cell, LayerType.loss in cell
                else:
                    emb = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
                    los = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
                stages.append((int(decoders), bool(emb), bool(los), int(mtp)))
    return tuple(stages)


@contextlib.contextmanager
def _fake_world(world: int):
    """A one-process torch.distributed "fake" backend (torch's own test backend: collectives are
    no-ops, groups are bookkeeping) of `world` ranks, so that `initialize_model_parallel` runs on a
    CPU with no GPU and no peers. Refuses to replace a process group someone else made."""
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers backend "fake"

    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialised; not replacing it")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def initialize_refusal(world: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, etp: int | None = None,
                       vpp: int | None = None) -> str | None:
    """Run megatron-core's own `parallel_state.initialize_model_parallel` on a fake world of
    `world` ranks (rank 0); None when it lays the grid out, else its RuntimeError / assertion text."""
    with _fake_world(world), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp, context_parallel_size=cp,
                expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                create_gloo_process_groups=False)
        except (RuntimeError, AssertionError, ValueError) as exc:
            return _reason(exc)
    return None


def megatron_grid_ok(world: int, tp: int, pp: int, cp: int, ep: int, etp: int) -> bool:
    """Whether megatron-core lays out this (world, TP, PP, CP, EP, ETP) grid. The decider is
    megatron-core's `parallel_state.initialize_model_parallel` itself (parallel_state.py), run here
    on torch's one-process "fake" backend: it raises RuntimeError unless world % (tp*pp*cp) == 0
    (the dense grid; data parallel is the quotient) and world % (etp*ep*pp) == 0 (the expert grid),
    then builds one `RankGenerator` per grid (order "tp-cp-ep-dp-pp") and asserts that both give
    the same pipeline groups, and creates every group."""
    if min(world, tp, pp, cp, ep, etp) <= 0:
        return False
    return initialize_refusal(world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp) is None


# The Transformer Engine release NVIDIA's MoE recipes build (Megatron-LM examples/moe_recipes/*/*.yaml
# Dockerfile: TE_TAG=release_v2.14); megatron-core asks for TE's version in its MoE/FP8 checks.
RECIPE_TE_VERSION = "2.14.0"


@contextlib.contextmanager
def _te_release(version: str):
    """Answer megatron-core's `get_te_version()` with `version` (a CPU machine has no Transformer Engine:
    an installation fact, not a layout rule), restoring its cache after."""
    from megatron.core import utils
    from packaging.version import Version

    saved = utils._te_version
    utils._te_version = Version(version)
    try:
        yield
    finally:
        utils._te_version = saved


def moe_refusal(model: ModelArch, cfg: EffectiveConfig, world: int) -> str | None:
    """Whether megatron-core accepts an MoE layout: its own `TransformerConfig.__post_init__` on the
    model and layout's MoE, recompute, FP8, CUDA-graph and pipeline arguments, then, on a fake world of
    `world` ranks, `initialize_model_parallel` and (flex dispatcher) `MoEFlexTokenDispatcher.__init__`,
    which asserts TP x EP > 1 (token_dispatcher.py). None when accepted, else megatron-core's reason.
    Transformer Engine's version is answered with the recipes' release (`_te_release`);
    `moe_permute_fusion` is passed off: its check imports TE's fused kernels, which a CPU machine lacks
    (an installation, not a layout rule); past the TP x EP assert, the dispatcher's ImportError of the
    DeepEP / HybridEP package is the same kind of absence and counts as accepted."""
    kwargs = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups, kv_channels=model.kv_channels, ffn_hidden_size=model.ffn_hidden_size,
        num_moe_experts=model.num_experts, moe_router_topk=model.moe_router_topk,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size, mtp_num_layers=model.mtp_num_layers or None,
        add_bias_linear=model.add_bias_linear,  # the card's (TransformerConfig defaults to True)
        tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp,
        virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None, context_parallel_size=cfg.cp,
        expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=cfg.etp, sequence_parallel=cfg.sequence_parallel,
        pipeline_dtype=torch.bfloat16 if cfg.pp > 1 else None, bf16=True, params_dtype=torch.bfloat16,
        pipeline_model_parallel_layout=cfg.pp_layout, num_layers_in_first_pipeline_stage=cfg.pp_first_layers,
        num_layers_in_last_pipeline_stage=cfg.pp_last_layers,
        account_for_embedding_in_pipeline_split=cfg.pp_embedding_in_split,
        account_for_loss_in_pipeline_split=cfg.pp_loss_in_split,
        moe_token_dispatcher_type=cfg.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=cfg.moe_flex_dispatcher_backend,
        moe_grouped_gemm=cfg.moe_grouped_gemm, moe_permute_fusion=False,
        moe_shared_expert_overlap=cfg.moe_shared_expert_overlap,
        overlap_moe_expert_parallel_comm=cfg.overlap_moe_expert_parallel_comm,
        recompute_granularity=cfg.recompute_granularity, recompute_method=cfg.recompute_method,
        recompute_num_layers=cfg.recompute_num_layers, recompute_modules=list(cfg.recompute_modules or ()) or None,
        fp8=cfg.fp8, fp8_recipe=cfg.fp8_recipe if cfg.fp8 else "delayed", fp8_param=cfg.fp8_param_gather,
        cuda_graph_impl=cfg.cuda_graph_impl, cuda_graph_scope=list(cfg.cuda_graph_scope or ()),
    )
    with warnings.catch_warnings(), _te_release(RECIPE_TE_VERSION):
        warnings.simplefilter("ignore")
        try:
            stated = {k: v for k, v in kwargs.items() if v is not None or k.startswith("recompute")}
            config = TransformerConfig(**stated)
        except _REFUSALS as exc:
            return "config: " + _reason(exc)
        if cfg.moe_token_dispatcher_type != "flex":
            return None
        with _fake_world(world):
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp, context_parallel_size=cfg.cp,
                expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=cfg.etp,
                create_gloo_process_groups=False)
            local = model.num_experts // cfg.ep
            try:
                MoEFlexTokenDispatcher(local, list(range(local)), config,
                                       pg_collection=ProcessGroupCollection.use_mpu_process_groups())
            except ImportError:
                return None  # the kernel package, after every layout check
            except (AssertionError, ValueError) as exc:
                return "dispatcher: " + _reason(exc)
    return None
