"""The facts `oracle.layout` decodes once from a layout's knobs, which memory and time both read.

Expected values are hand derivations written in each test, from the framework code each decoder cites:
megatron-core 0.16.1 transformer_block.py `_checkpointed_forward` (uniform: groups of recompute_num_layers
layers, one stored input per group; block: the first recompute_num_layers layers of each chunk, each
alone) and Primus fd1eeab recompute_layer_patches.py (the listed global layers, each alone)."""

from __future__ import annotations

from paratune.oracle.layout import (
    DISPATCH_KNOBS,
    NO_CHUNK_RECOMPUTE,
    TURBO_DEEPEP,
    ChunkRecompute,
    RecomputePlan,
    layout_facts,
)
from paratune.oracle.memory.estimate import estimate_memory
from paratune.oracle.performance.pipeline import chunks
from paratune.oracle.performance.simulate import simulate
from paratune.oracle.specs import TrialConfig

from .conftest import example

# kinds of six decoder layers (1 = MoE): dense, MoE, dense, MoE, MoE, dense
PATTERN = (0, 1, 0, 1, 1, 0)


def test_uniform_recomputes_every_layer_in_groups_storing_one_input_per_group():
    """Uniform, 2 layers a group, the chunk of layers 0-4 (2 dense, 3 MoE): all 5 redone; ceil(5/2) = 3 groups
    keep 3 inputs, spread 2:3 over the kinds (1.2 dense, 1.8 MoE); 2 layers recomputed at once."""
    plan = RecomputePlan(True, "uniform", 2, ())
    assert plan.chunk(PATTERN, 0, 5) == ChunkRecompute(2, 3, 3 * 2 / 5, 3 * 3 / 5, 2)


def test_block_recomputes_the_first_layers_of_the_chunk_each_alone():
    """Block of 2 on the chunk of layers 1-4 (MoE, dense, MoE, MoE): layers 1 and 2 redone, each its own
    checkpoint: 1 dense and 1 MoE, their 2 inputs stored, 1 layer at once."""
    plan = RecomputePlan(True, "block", 2, ())
    assert plan.chunk(PATTERN, 1, 4) == ChunkRecompute(1, 1, 1.0, 1.0, 1)


def test_primus_layer_ids_recompute_the_listed_layers_of_the_chunk():
    """ids {2, 4} on the chunk of layers 1-3: only layer 2 (dense) is in it."""
    plan = RecomputePlan(True, None, 1, (), frozenset({2, 4}))
    assert plan.chunk(PATTERN, 1, 3) == ChunkRecompute(1, 0, 1.0, 0.0, 1)
    assert not plan.recomputes_mtp(6) and RecomputePlan(True, None, 1, (), frozenset({6})).recomputes_mtp(6)


def test_block_of_zero_layers_recomputes_no_decoder_layer_but_the_mtp_block():
    """Primus's Mixtral recipe sets full / block / recompute_num_layers 0: the block loop checkpoints no
    decoder layer (time and memory both keep every layer whole); the MTP block recomputes under full
    granularity whatever the method."""
    plan = RecomputePlan(True, "block", 0, ())
    assert plan.chunk(PATTERN, 0, 6) == NO_CHUNK_RECOMPUTE and plan.recomputes_mtp(6)
    assert RecomputePlan(False, None, 0, ("core_attn",)).chunk(PATTERN, 0, 6) == NO_CHUNK_RECOMPUTE


def test_time_reads_the_same_recomputed_layers_as_memory():
    """Llama 3 8B (32 dense layers) PP 2, uniform full recompute: both chunks rerun all 16 layers in time."""
    w, c = example("llama8b")
    trial = TrialConfig(pp=2, vpp=1, pp_schedule="1f1b", recompute_granularity="full", recompute_method="uniform",
                        recompute_num_layers=4)
    cfg = w.effective(trial)
    facts = layout_facts(w.model, cfg, c.world_size)
    assert [(s.recompute_dense, s.recompute_moe) for s in chunks(w.model, facts)] == [(16, 0), (16, 0)]
    assert [facts.recompute.chunk(w.model.moe_layer_pattern, s.start, s.layers) for s in facts.chunks] == [
        ChunkRecompute(16, 0, 4.0, 0.0, 4)] * 2


def test_the_knobs_the_search_writes_for_each_backend_read_back_as_that_backend():
    """Each backend's knobs (DISPATCH_KNOBS), applied to Mixtral 8x22B at EP 8, decode to that backend; Primus's
    turbo_sync_free_moe_stage 2 turns Turbo DeepEP on (rocm_arg_validation.py), so it decodes as Turbo DeepEP too."""
    w, c = example("mixtral")
    for backend, knobs in DISPATCH_KNOBS.items():
        cfg = w.effective(TrialConfig(ep=8, **knobs))
        assert layout_facts(w.model, cfg, c.world_size).dispatch == backend
    cfg = w.effective(TrialConfig(ep=8, moe_token_dispatcher_type="alltoall", sync_free_stage=2))
    assert layout_facts(w.model, cfg, c.world_size).dispatch == TURBO_DEEPEP


def _with_strategy(workload, strategy):
    """The workload with Megatron-FSDP's data_parallel_sharding_strategy set (a workload setting, not a knob)."""
    training = workload.training.model_copy(update={"data_parallel_sharding_strategy": strategy})
    return workload.model_copy(update={"training": training})


def test_sharding_follows_the_zero_stage_each_setting_names():
    """megatron-core 0.16.1 distributed_data_parallel_config.py: Megatron-FSDP's data_parallel_sharding_strategy
    no_shard / optim / optim_grads / optim_grads_params shard nothing / the optimizer state / and the gradients /
    and the weights (ZeRO 0-3); torch FSDP2 shards all three; the distributed optimizer alone the optimizer state."""
    w, c = example("llama8b")

    def sharding(strategy="no_shard", **knobs):
        cfg = _with_strategy(w, strategy).effective(TrialConfig(**knobs))
        return tuple(layout_facts(w.model, cfg, c.world_size).sharding)

    assert sharding(use_torch_fsdp2=True, use_distributed_optimizer=False) == (True, True, True)
    assert sharding(use_torch_fsdp2=False, use_distributed_optimizer=True) == (False, False, True)
    assert sharding(use_torch_fsdp2=False, use_distributed_optimizer=False) == (False, False, False)
    expected = {"no_shard": (False, False, False), "optim": (False, False, True), "optim_grads": (False, True, True),
                "optim_grads_params": (True, True, True)}
    for strategy, flags in expected.items():
        assert sharding(strategy, use_torch_fsdp2=False, use_megatron_fsdp=True,
                        use_distributed_optimizer=True) == flags


def test_megatron_fsdp_without_sharding_is_plain_ddp_in_memory_and_time():
    """Megatron-FSDP with no_shard keeps whole copies and all-reduces the gradients whatever
    use_distributed_optimizer says: memory and time both read the one sharding fact, so the layout projects
    exactly as plain DDP does."""
    w, c = example("llama8b")
    plain = w.effective(TrialConfig(use_torch_fsdp2=False, use_distributed_optimizer=False))
    no_shard = _with_strategy(w, "no_shard").effective(TrialConfig(use_torch_fsdp2=False, use_megatron_fsdp=True,
                                                                   use_distributed_optimizer=True))
    assert estimate_memory(w.model, no_shard, c).total_gb == estimate_memory(w.model, plain, c).total_gb
    assert simulate(w.model, no_shard, c).iteration_ms == simulate(w.model, plain, c).iteration_ms


def test_an_overlap_is_in_effect_only_where_its_traffic_exists():
    """TP overlap needs TP > 1, EP overlap EP > 1, and the shared-expert overlap is the all-to-all dispatcher's
    (megatron-core 0.16.1 transformer_config.py: "moe_shared_expert_overlap only works with alltoall token
    dispatcher"); overlap_grad_reduce is read as set."""
    w, c = example("mixtral")

    def overlaps(**knobs):
        return layout_facts(w.model, w.effective(TrialConfig(**knobs)), c.world_size).overlaps

    on = dict(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True, overlap_grad_reduce=False)
    assert overlaps(tp=1, ep=1, **on)[:2] == (False, False)
    assert overlaps(tp=2, ep=8, **on)[:2] == (True, True) and not overlaps(tp=2, ep=8, **on).grad_reduce
    shared = w.model_copy(update={"training": w.training.model_copy(update={"moe_shared_expert_overlap": True})})
    for backend, knobs in DISPATCH_KNOBS.items():
        cfg = shared.effective(TrialConfig(ep=8, **knobs))
        assert layout_facts(w.model, cfg, c.world_size).overlaps.shared_experts == (backend == "alltoall")
