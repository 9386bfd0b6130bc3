"""What paratune reads and writes, checked by the real stacks' own code (tests/stack_snapshots.py).

Each test names the artifacts it had a stack parse (the snapshot's commit and the file, or the launch it
built), in its parameter ids or its assertion messages. Expected values come from the stacks' parsers:
PrimusParser's merged trainer arguments, Megatron-LM's parsed and validated `args`, Bridge's
ConfigContainer dataclasses.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_memory_only
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.inputs.primus_tree import PRIMUS_ROOT_ENV
from paratune.oracle.inputs.yaml_io import read_mapping
from paratune.oracle.specs import ClusterSpec, TrialConfig, Workload
from paratune.oracle.specs.knobs import KNOB_SPECS
from paratune.planner.launch import launch_plan
from paratune.planner.launch.bridge import hydra_overrides

from .stack_snapshots import ROOT, artifact, conformance_root, launch_argv, megatron_validate, primus_parse, snapshot

EXAMPLES = ROOT / "examples"
CLUSTERS = EXAMPLES / "clusters"
GPU_CLUSTERS = {"MI300X": "mi300x-1n.yaml", "MI355X": "mi355x-4n.yaml"}
# Data, tokenizer and optimizer arguments a user passes in the launch's "$@" (Megatron needs some to parse).
USER_ARGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "32000", "--lr", "1e-4",
             "--train-iters", "10"]


def _published(kind: str) -> list[Path]:
    """The snapshot's published MI300X/MI355X Megatron experiments of one trainer module (`pre_trainer` or
    `post_trainer`), the folders Primus's examples/megatron/configs/<GPU>/ (collected without the snapshot:
    an empty list, and the test that needs it skips)."""
    root = conformance_root()
    if root is None:
        return []
    out = []
    for gpu in GPU_CLUSTERS:
        for path in sorted((root / "primus" / "examples" / "megatron" / "configs" / gpu).glob("*.yaml")):
            modules = read_mapping(path).get("modules") or {}  # libyaml's parser: 192 files at collection
            if kind in modules:
                out.append(path)
    return out


PRETRAINING = _published("pre_trainer")


@pytest.fixture
def primus_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    root = snapshot("primus")
    monkeypatch.setenv(PRIMUS_ROOT_ENV, str(root))
    return root


@pytest.mark.parametrize("experiment", PRETRAINING, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_published_pretraining_experiment_gets_a_verdict(experiment: Path, primus_root: Path) -> None:
    """Read as Primus reads it (its tree's module defaults, experiment extends, its value spellings) and
    judged: legal, or illegal with Megatron's reasons; never refused at input (Done-when of issue 24) -- except
    a LoRA fine-tune that a published file runs under `pre_trainer` (llama2_70B-FP8-sft-packed-perf.yaml),
    refused naming its key, as every LoRA experiment is."""
    name = artifact("primus", experiment)
    trainer = yaml.safe_load(experiment.read_text())["modules"]["pre_trainer"]
    if ((trainer.get("overrides") or {}).get("lora") or {}).get("enabled"):
        with pytest.raises(InputError, match=r"modules\.pre_trainer\.lora\.enabled"):
            load_workload(experiment)
        return
    workload = load_workload(experiment)
    cluster = load_cluster(CLUSTERS / GPU_CLUSTERS[experiment.parent.name])
    result = evaluate_memory_only(workload, cluster, TrialConfig())
    assert result.legal or result.violations, name
    assert all(v.message for v in result.violations), name


def test_the_published_set_is_the_one_counted() -> None:
    snapshot("primus")
    assert len(PRETRAINING) == 172, [p.name for p in PRETRAINING]


def test_full_sft_reads_and_lora_is_refused_by_key(primus_root: Path, tmp_path: Path) -> None:
    """Every published SFT experiment enables LoRA: each is refused naming the key. The same experiment
    with LoRA off (an experiment extending it, as Primus follows `extends:`) reads as full SFT."""
    published = primus_root / "examples" / "megatron" / "configs" / "MI355X" / "llama3_8B-BF16-sft.yaml"
    with pytest.raises(InputError, match=r"modules\.post_trainer\.lora\.enabled"):
        load_workload(published)
    full = tmp_path / "llama3_8B-full-sft.yaml"
    full.write_text(yaml.safe_dump({"extends": [str(published)],
                                    "modules": {"post_trainer": {"overrides": {"lora": {"enabled": False}}}}}))
    [parsed] = primus_parse([full], module="post_trainer")
    assert parsed["ok"] and parsed["args"]["lora"]["enabled"] is False, artifact("primus", published)
    sft = load_workload(full)
    assert sft.stack == "primus" and sft.model.num_layers == parsed["args"]["num_layers"]
    assert sft.effective().mbs == parsed["args"]["micro_batch_size"]


def _diffusion() -> list[Path]:
    """The snapshot's published Flux experiments (examples/megatron/configs/<GPU>/diffusion/)."""
    root = conformance_root()
    return [] if root is None else sorted(
        p for gpu in GPU_CLUSTERS for p in (root / "primus" / "examples" / "megatron" / "configs" / gpu /
                                            "diffusion").glob("*.yaml"))


DIFFUSION = _diffusion()


def test_published_flux_experiments_are_refused_as_not_gpt(primus_root: Path) -> None:
    """Primus's own parser gives each Flux experiment (its `extends:` followed) its own trainer
    (`trainer_class`) and a diffusion `model_type`: paratune refuses each naming the file, that key and both
    values, rather than giving it a GPT verdict."""
    assert DIFFUSION
    for experiment, parsed in zip(DIFFUSION, primus_parse(DIFFUSION), strict=True):
        name = artifact("primus", experiment)
        assert parsed["ok"], f"{name}: {parsed['error']}"
        own, kind = parsed["args"]["trainer_class"], parsed["args"]["model_type"]
        with pytest.raises(InputError) as refused:
            load_workload(experiment)
        assert (refused.value.file, refused.value.key) == (str(experiment), "modules.pre_trainer.trainer_class"), name
        assert repr(own) in refused.value.message and repr(kind) in refused.value.message, name


def test_the_published_flux_set_is_the_one_counted() -> None:
    snapshot("primus")
    assert len(DIFFUSION) == 20, [p.name for p in DIFFUSION]


# ---------------------------------------------------------------------------------------------------------
# Primus overlays in PrimusParser


def _primus_cases() -> list[tuple[str, str, str, TrialConfig]]:
    """(workload, cluster, label, layout): the main job's recipe and layouts around it, a native dense and a
    published MoE/MLA experiment of the snapshot."""
    recipe = str(EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml")
    llama8b = str(EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml")
    return [
        (recipe, "mi355x-4n.yaml", "recipe", TrialConfig()),
        (recipe, "mi355x-4n.yaml", "robust-pick-vpp1", TrialConfig(vpp=1)),
        (recipe, "mi355x-4n.yaml", "tp2-ep4-mbs2", TrialConfig(tp=2, ep=4, vpp=1, mbs=2)),
        (recipe, "mi355x-4n.yaml", "turbo-deepep-syncfree1", TrialConfig(use_turbo_deepep=True, sync_free_stage=1)),
        (llama8b, "mi300x-1n.yaml", "dense-native", TrialConfig(tp=2, mbs=2)),
        (llama8b, "mi300x-1n.yaml", "dense-native-pp2", TrialConfig(tp=1, pp=2, vpp=4)),
    ]


def _write_overlay(tmp_path: Path, label: str, workload: Workload, cluster: ClusterSpec, file: str,
                   trial: TrialConfig) -> tuple[Path, dict]:
    cfg = workload.effective(trial)
    plan = launch_plan(cfg, workload, cluster, file)
    folder = tmp_path / label
    folder.mkdir()
    path = folder / "winner.primus.yaml"
    path.write_text(plan.files["winner.primus.yaml"])
    want = {"tensor_model_parallel_size": cfg.tp, "pipeline_model_parallel_size": cfg.pp,
            "num_virtual_stages_per_pipeline_rank": cfg.vpp if cfg.vpp > 1 and not cfg.pp_layout else None,
            "expert_model_parallel_size": cfg.ep, "micro_batch_size": cfg.mbs}
    return path, want


def test_overlays_parse_in_primus_parser_to_the_winners_layout(tmp_path: Path, primus_root: Path) -> None:
    """Each overlay, written where paratune's clone is not, loads in PrimusParser (its presets from the
    snapshot) to the winner's TP/PP/VPP/EP/MBS; paratune reads it back to the same layout."""
    written = []
    for file, cluster_file, label, trial in _primus_cases():
        workload, cluster = load_workload(file), load_cluster(CLUSTERS / cluster_file)
        written.append((label, *_write_overlay(tmp_path, label, workload, cluster, file, trial), workload, trial))
    parsed = primus_parse([path for _, path, _, _, _ in written])
    for (label, path, want, workload, trial), result in zip(written, parsed, strict=True):
        assert result["ok"], f"{label}: PrimusParser refused {path}: {result['error']}"
        got = {k: result["args"].get(k) for k in want}
        assert got == want, f"{label}: {path}"
        assert str(ROOT) not in path.read_text(), f"{label}: the overlay points into paratune's clone"
        back = load_workload(path)  # round trip: paratune reads its own overlay, as Primus does
        assert back.effective().key == workload.effective(trial).key, label


def test_overlay_of_a_published_moe_mla_experiment(tmp_path: Path, primus_root: Path) -> None:
    experiment = primus_root / "examples" / "megatron" / "configs" / "MI355X" / "deepseek_v2_lite-BF16-pretrain.yaml"
    workload, cluster = load_workload(experiment), load_cluster(CLUSTERS / "mi355x-4n.yaml")
    path, want = _write_overlay(tmp_path, "dsv2-lite", workload, cluster, str(experiment), TrialConfig(ep=8, mbs=1))
    [result] = primus_parse([path])
    assert result["ok"], f"{artifact('primus', experiment)} overlay: {result['error']}"
    assert {k: result["args"].get(k) for k in want} == want
    assert yaml.safe_load(path.read_text())["modules"]["pre_trainer"]["model"] == "deepseek_v2_lite.yaml"


# ---------------------------------------------------------------------------------------------------------
# Megatron-LM launches in parse_args + validate_args


def _megatron_cases(tmp: Path) -> list[tuple[str, str, TrialConfig]]:
    """(workload, cluster, layout): dense, MoE and MLA models, NVIDIA and AMD GPUs, 12 winners (the MoE on
    AMD is Mixtral 8x22B as a native workload, written to `tmp`)."""
    moe_amd = tmp / "mixtral-8x22b-native.yaml"
    moe_amd.write_text(yaml.safe_dump({
        "extends": "mixtral-8x22b", "seq_length": 4096, "global_batch_size": 256, "micro_batch_size": 1,
        "pipeline_model_parallel_size": 4, "expert_model_parallel_size": 8, "use_distributed_optimizer": True}))
    workloads = EXAMPLES / "workloads"
    return [(str(workloads / w) if "/" not in w else w, c, t) for w, c, t in [
        ("deepseek-v3-h100.yaml", "h100-32n.yaml", TrialConfig()),
        ("deepseek-v3-h100.yaml", "h100-32n.yaml", TrialConfig(tp=1, pp=8, ep=32, mbs=1)),
        ("deepseek-v3-h100.yaml", "h100-32n.yaml", TrialConfig(recompute_granularity="selective",
                                                               recompute_modules=("mla_up_proj", "mlp"))),
        ("llama3-70b-h100.yaml", "h100-8n.yaml", TrialConfig()),
        ("llama3-70b-h100.yaml", "h100-8n.yaml", TrialConfig(tp=8, pp=2, cp=1, vpp=2, mbs=1)),
        ("llama3-70b-h100.yaml", "h100-8n.yaml", TrialConfig(tp=4, pp=4, cp=2, vpp=5, fp8="hybrid")),
        ("llama3-70b-h100.yaml", "h100-8n.yaml", TrialConfig(tp=2, pp=1, vpp=1, cp=1, use_torch_fsdp2=True,
                                                             use_distributed_optimizer=False)),
        ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml", TrialConfig()),
        ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml", TrialConfig(tp=2, mbs=2)),
        (str(moe_amd), "mi355x-4n.yaml", TrialConfig()),
        (str(moe_amd), "mi355x-4n.yaml", TrialConfig(tp=2, ep=8, pp=2, mbs=1)),
        (str(moe_amd), "mi355x-4n.yaml", TrialConfig(moe_token_dispatcher_type="alltoall")),
    ]]


def test_megatron_lm_launches_pass_parse_and_validate_args(tmp_path: Path) -> None:
    """The launch's own line and environment through Megatron-LM's arguments.py; the parsed args are the
    winner's layout and the card's architecture. DeepSeek-V3 (MLA, MoE, MTP) is the first case."""
    snapshot("megatron-lm")
    cases, expected = [], []
    for workload_file, cluster_file, trial in _megatron_cases(tmp_path):
        workload = load_workload(workload_file, stack="megatron-lm")
        cluster = load_cluster(CLUSTERS / cluster_file).model_copy(update={"stack": "megatron-lm"})
        cfg = workload.effective(trial)
        argv, env = launch_argv(launch_plan(cfg, workload, cluster, workload_file).command, USER_ARGS)
        cases.append((argv, env, cluster.world_size))
        expected.append((f"{Path(workload_file).name} on {cluster_file} {trial.model_dump(exclude_none=True)}", cfg,
                         workload))
    for (label, cfg, workload), result in zip(expected, megatron_validate(cases), strict=True):
        assert result["ok"], f"{label}: Megatron-LM refused the launch: {result['error']}"
        args = result["args"]
        assert (args["tensor_model_parallel_size"], args["pipeline_model_parallel_size"],
                args["context_parallel_size"], args["expert_model_parallel_size"], args["micro_batch_size"]) == (
            cfg.tp, cfg.pp, cfg.cp, cfg.ep if workload.model.is_moe else 1, cfg.mbs), label
        assert (args["virtual_pipeline_model_parallel_size"] or 1) == cfg.vpp, label
        assert args["num_layers"] == workload.model.num_layers and args["hidden_size"] == workload.model.hidden_size
        if workload.model.norm_epsilon is not None:
            assert args["layernorm_epsilon"] == workload.model.norm_epsilon, label
        if workload.model.rotary_base is not None:
            assert args["rotary_base"] == workload.model.rotary_base, label
        assert args["position_embedding_type"] == ("learned_absolute" if workload.model.learned_positions else
                                                   workload.model.position_embedding_type or "rope"), label


# ---------------------------------------------------------------------------------------------------------
# Megatron-LM flags files read back as workloads


def test_the_flag_table_is_megatron_lms_own_parser() -> None:
    """oracle/inputs/vocabulary/megatron_lm_flags.json is what Megatron-LM's `add_megatron_arguments` holds in
    the snapshot (rebuilt here from the parser itself by scripts/build_megatron_flags.py)."""
    build = _script("build_megatron_flags")
    name = artifact("megatron-lm", snapshot("megatron-lm") / "megatron" / "training" / "arguments.py")
    assert build.OUT.read_text(encoding="utf-8") == build.text(build.table(snapshot("megatron-lm"))), name


def _plain(value: object) -> object:
    """A value as the runner's JSON gives it (tuples as lists)."""
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def _megatron(parsed: dict[str, object], field: str) -> object:
    """Megatron-LM's parsed value of `field` in paratune's spelling (no MTP: None there, 0 here; validate_args turns
    the optimizer-state dtype names into torch dtypes, fp8 state as uint8)."""
    value = parsed[field]
    if field == "mtp_num_layers" and value is None:
        return 0
    dtypes = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.uint8": "fp8"}
    return dtypes.get(value, value) if isinstance(value, str) else value


def test_megatron_lm_launches_read_back_to_the_same_layout_and_model(tmp_path: Path) -> None:
    """Each of the 12 Megatron-LM launches (dense/MoE/MLA, NVIDIA/AMD) written as launch.sh and read back as a
    workload gives the winner's whole layout and the card's model. Where the card leaves a field to Megatron's
    default (None: position embedding, dropout, rotary percent, norm epsilon, ...), the launch states it and the
    read value is what Megatron-LM's own parse_args + validate_args gives for that launch; every model field
    that is a Megatron-LM dest agrees with Megatron's parsed value."""
    snapshot("megatron-lm")
    cases, checks = [], []
    for n, (workload_file, cluster_file, trial) in enumerate(_megatron_cases(tmp_path)):
        workload = load_workload(workload_file, stack="megatron-lm")
        cluster = load_cluster(CLUSTERS / cluster_file).model_copy(update={"stack": "megatron-lm"})
        cfg = workload.effective(trial)
        command = launch_plan(cfg, workload, cluster, workload_file).command
        launch = tmp_path / f"launch-{n}.sh"
        launch.write_text(f"#!/usr/bin/env bash\n# run from a Megatron-LM checkout\n{command}\n")
        argv, env = launch_argv(command, [])
        cases.append((argv + ["--mock-data", "--tokenizer-type", "NullTokenizer", "--lr", "1e-4", "--train-iters",
                              "10"], env, cluster.world_size))
        checks.append((f"{Path(workload_file).name} {trial.model_dump(exclude_none=True)} as {launch.name}", cfg,
                       workload, load_workload(launch, stack="megatron-lm")))
    for (label, cfg, workload, read), result in zip(checks, megatron_validate(cases), strict=True):
        assert result["ok"], f"{label}: {result['error']}"
        assert read.stack == "megatron-lm" and read.effective() == cfg, label
        parsed = result["args"]
        for field, value in workload.model:
            got = getattr(read.model, field)
            if field in ("name", "source"):
                continue
            if field == "moe_layer_freq":  # Megatron's moe_freq_type evaluates the list expression
                assert read.model.moe_layer_pattern == workload.model.moe_layer_pattern, label
                continue
            if value is not None:
                assert got == value or (field in _MLA_ONLY and not workload.model.multi_latent_attention), (
                    f"{label}: {field} {got!r} != {value!r}")
            if field in parsed and got is not None and field not in ("num_query_groups", "add_qkv_bias"):
                assert _plain(got) == _megatron(parsed, field), (
                    f"{label}: {field} {got!r}, Megatron-LM: {parsed[field]!r}")
        assert read.model.qkv_bias == workload.model.qkv_bias and read.model.groups == workload.model.groups, label
        assert read.model.vocab_size == workload.model.vocab_size, label


# A user's own file of pretrain_gpt.py flags (the form of Megatron-LM's examples/gpt3 launch arguments): a
# Llama-style model that states no position embedding (Megatron's default is learned absolute positions) and no
# --sequence-parallel / --overlap-grad-reduce (off in Megatron), plus arguments the projection does not read.
USER_FLAGS = """\
# model
--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --group-query-attention --num-query-groups 4
--ffn-hidden-size 8192 --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
--seq-length 4096 --max-position-embeddings 4096 --vocab-size 128256
# layout and training
--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64
--recompute-granularity=selective --recompute-modules core_attn mlp --bf16 --use-distributed-optimizer
--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --train-iters 100 --weight-decay 0.1 --clip-grad 1.0
--tokenizer-type NullTokenizer --data-path $DATA_PATH
"""
# Malformed flags: (file text, the flag paratune names) -- each also refused by Megatron-LM's own parser.
BAD_FLAGS = [
    ("--num-layer 16", "--num-layer"),  # not an option (argparse: allow_abbrev=False)
    ("--num-layers sixteen", "--num-layers"),  # type=int
    ("--fp8-format e5m2", "--fp8-format"),  # choices e4m3, hybrid
    ("--swiglu yes", "yes"),  # store_true takes no value: a stray word
    ("--recompute-modules", "--recompute-modules"),  # nargs='+' with no value
    ("--attention-backend flashy", "--attention-backend"),  # AttnBackend names
]


def test_a_users_flags_file_reads_as_megatron_lm_parses_it(tmp_path: Path) -> None:
    """Every modelled field of the workload read from USER_FLAGS is what Megatron-LM's own parse_args +
    validate_args gives for the same words (their defaults where the file is silent; None is a value validate_args
    derives, e.g. kv_channels = hidden / heads, as paratune derives it); the arguments it sets
    that paratune does not model are listed by dest, the shell variable on one of them included."""
    snapshot("megatron-lm")
    path = tmp_path / "flags.txt"
    path.write_text(USER_FLAGS)
    words = shlex.split(USER_FLAGS, comments=True)
    [result] = megatron_validate([(words, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8)])
    assert result["ok"], result["error"]
    parsed = result["args"]
    workload = load_workload(path)
    assert workload.stack == "megatron-lm"
    for spec in (workload.model, workload.training):
        for field, value in spec:
            if field in parsed and value is not None and field not in ("name", "source", "use_flash_attn"):
                assert _plain(value) == _megatron(parsed, field), f"{field}: {value!r}, Megatron-LM: {parsed[field]!r}"
    # what Megatron's defaults give where the file is silent, against paratune's own YAML defaults
    assert workload.model.position_embedding_type == "learned_absolute" and workload.model.hidden_dropout == 0.1
    assert not workload.training.overlap_grad_reduce and not workload.training.sequence_parallel
    assert workload.effective().sequence_parallel is False  # TP 2 without --sequence-parallel
    assert workload.training.use_flash_attn  # --attention-backend auto: TE's flash or cuDNN attention
    assert workload.not_modelled == ("clip_grad", "data_path", "lr", "lr_decay_style", "max_position_embeddings",
                                     "min_lr", "tokenizer_type", "train_iters", "weight_decay")


def test_malformed_flags_are_refused_as_megatron_lm_refuses_them(tmp_path: Path) -> None:
    """Each BAD_FLAGS file: Megatron-LM's parser refuses its words, and paratune refuses it naming the flag (or
    the stray word) and the file."""
    snapshot("megatron-lm")
    paths = []
    for n, (text, _) in enumerate(BAD_FLAGS):
        paths.append(tmp_path / f"flags-{n}.txt")
        paths[-1].write_text(f"--seq-length 4096 --global-batch-size 64 --num-layers 2 --hidden-size 64 "
                             f"--num-attention-heads 4 --mock-data\n{text}\n")
    results = megatron_validate([(shlex.split(p.read_text()), {}, 8) for p in paths])
    for path, (text, flag), result in zip(paths, BAD_FLAGS, results, strict=True):
        assert not result["ok"], f"Megatron-LM accepted {text!r}"
        with pytest.raises(InputError) as refused:
            load_workload(path)
        assert (refused.value.file, refused.value.key) == (str(path), flag), str(refused.value)


# MLA fields that a model without MLA does not read (Megatron-LM's --kv-lora-rank default is 32; the card's 512)
_MLA_ONLY = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}


# ---------------------------------------------------------------------------------------------------------
# Megatron-Bridge overrides against the ConfigContainer dataclasses


class _Folders:
    """The read-only part of scripts/build_vocabulary.py's GitTree over folders (first one holding a path wins)."""

    def __init__(self, *bases: Path):
        self.bases = bases
        self.read_paths: list[str] = []

    def files(self, prefix: str, suffix: str = "") -> list[str]:
        out = set()
        for base in self.bases:
            out |= {p.relative_to(base).as_posix() for p in (base / prefix).rglob(f"*{suffix}") if p.is_file()}
        return sorted(out)

    def read(self, path: str) -> str | None:
        for base in self.bases:
            if (base / path).is_file():
                self.read_paths.append(path)
                return (base / path).read_text(encoding="utf-8")
        return None


def _script(name: str) -> ModuleType:
    """scripts/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# ConfigContainer sections whose dataclasses the snapshots cannot resolve, and why.
_OUTSIDE = {"model": "the providers are in src/megatron/bridge/models/, not in the snapshot",
            "train": "TrainingConfig extends megatron.training.config of Bridge's Megatron-LM pin",
            "dist": "DistributedInitConfig extends megatron.training.config of Bridge's Megatron-LM pin"}


def test_bridge_overrides_are_config_container_fields_and_keep_grouped_gemm(tmp_path: Path) -> None:
    """Every `section.field` the Bridge launch writes is a field of that ConfigContainer section's dataclass
    in the snapshot (read statically, as the snapshot README says: importing Bridge needs Transformer
    Engine); megatron-core's base classes from the installed megatron-core 0.16.1. Sections whose classes
    live outside the snapshots (`_OUTSIDE`) are checked against the vocabulary scripts/build_vocabulary.py
    read from the whole Bridge tree and its Megatron-LM pin at the same commit. A MoE recipe keeps its
    grouped GEMM (Bridge's MoE recipes turn it on)."""
    import megatron.core

    bridge = snapshot("megatron-bridge")
    core = Path(megatron.core.__file__).resolve().parents[2]
    builder = _script("build_vocabulary")
    builder.BRIDGE_EXTRA_TYPES = {}  # the model providers' base lives in models/, which the snapshot lacks
    names, _ = builder.megatron_bridge_names(_Folders(bridge), _Folders(core, snapshot("megatron-lm")))
    vocabulary = (ROOT / "oracle" / "inputs" / "vocabulary" / "megatron_bridge.txt").read_text().splitlines()
    names |= {n for n in vocabulary if n.split(".", 1)[0] in _OUTSIDE}
    label = artifact("megatron-bridge", bridge / "src" / "megatron" / "bridge" / "training" / "config.py")
    for workload_file, cluster_file, trial in _megatron_cases(tmp_path):
        workload = load_workload(workload_file, stack="megatron-bridge")
        cluster = load_cluster(CLUSTERS / cluster_file).model_copy(update={"stack": "megatron-bridge"})
        overrides = hydra_overrides(workload.effective(trial), workload, cluster)
        unknown = [o for o in overrides if o.split("=", 1)[0] not in names]
        assert unknown == [], f"{workload_file}: not fields of {label}"
        if workload.model.is_moe and trial.moe_grouped_gemm is None:
            assert f"{KNOB_SPECS['moe_grouped_gemm'].bridge}=true" in overrides, workload_file
