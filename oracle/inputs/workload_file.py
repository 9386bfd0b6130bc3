"""Load a workload from either form of DESIGN §2: native Megatron-argument YAML or a Primus experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..catalog import model_card, model_names
from ..errors import InputError
from ..specs import ModelArch, TrainingArgs, Workload
from .hf_config import hf_card, is_hf_config
from .megatron_flags import is_flags_file, read_flags
from .megatron_values import megatron_values
from .primus_tree import experiment_mapping, find_primus_root, is_experiment, resolve_trainer
from .read_guard import guarded, usable
from .stack_vocabulary import stack_arguments
from .yaml_io import (
    build,
    deep_merge,
    read_mapping,
    resolve_templates,
    unknown_key_error,
)

MODEL_KEYS = set(ModelArch.model_fields) - {"name", "source"}
TRAINING_KEYS = set(TrainingArgs.model_fields)
STACKS = ("megatron-lm", "megatron-bridge", "primus")
# Keys of paratune's own workload files (not stack arguments).
OWN_KEYS = {"extends", "stack", "description", "name", "source"}
# Defaults where the stacks differ from TrainingArgs' (which follow the Megatron-LM CLI):
#  - Megatron-Bridge: the published perf recipes reduce gradients in bf16 (`_benchmark_common` /
#    `_perf_precision` set ddp.grad_reduce_in_fp32 = False, Megatron-Bridge src/megatron/bridge/
#    perf_recipes/_common.py @067f987df0), and its MoE recipes run grouped GEMM (`cfg.model.moe_grouped_gemm
#    = True` in src/megatron/bridge/recipes/{deepseek,qwen,gpt_oss,kimi,glm,...}/*.py @067f987df0).
#  - Primus: pre_trainer.yaml turns the distributed optimizer on (trainer_base.yaml has it off) and
#    flash attention on; language_model.yaml keeps sequence parallelism on (AMD-AGI/Primus @fd1eeabbad
#    primus/configs/modules/megatron/pre_trainer.yaml:30-32, models/megatron/language_model.yaml:166).
#    These apply when no Primus tree is at hand; with one, its own files give them.
STACK_DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron-lm": {},
    "megatron-bridge": {"grad_reduce_in_fp32": False, "moe_grouped_gemm": True},
    "primus": {"use_distributed_optimizer": True, "use_flash_attn": True, "sequence_parallel": True},
}


def _extends_list(value: Any, file: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise InputError("must be a model name, a file path, or a list of them", file=file, key="extends")


def _card(ref: str, base_dir: Path, file: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A model card from a catalog name, a Hugging Face config.json (or its folder), or a YAML file,
    following its `extends:` chain (deep-merged)."""
    path = (base_dir / usable(ref, file=file, key="extends")).resolve()
    if ref not in model_names():
        guarded(path)
    if is_hf_config(path):
        return hf_card(path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if str(path) in seen:
            raise InputError(f"extends cycle through {path.name}", file=file, key="extends")
        data = resolve_templates(read_mapping(path))
        merged: dict[str, Any] = {}
        for parent in _extends_list(data.pop("extends", []), str(path)):
            merged = deep_merge(merged, _card(parent, path.parent, str(path), (*seen, str(path))))
        return {**deep_merge(merged, data), "name": data.get("name", path.stem)}
    if ref in model_names():
        return model_card(ref, file=file)
    raise InputError(
        f"'{ref}' is neither a file nor a catalog model; known models: {', '.join(model_names())}",
        file=file,
        key="extends",
    )


# The Megatron/Primus spellings `_apply_aliases` reads as modelled keys.
ALIASES = {"layernorm_epsilon", "disable_bias_linear", "group_query_attention", "num_layers_in_first_pipeline_stage",
           "num_layers_in_last_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
           "num_layers_per_virtual_pipeline_stage", "recompute_activations", "moe_layer_recompute",
           "grad_reduce_in_bf16"}


def _apply_aliases(args: dict[str, Any], file: str) -> dict[str, Any]:
    """Megatron/Primus spellings that mean one of the modelled keys (Megatron-LM arguments.py and
    megatron-core config names)."""
    out = dict(args)
    if "layernorm_epsilon" in out:  # TransformerConfig's name for --norm-epsilon (Primus writes norm_epsilon)
        out["norm_epsilon"] = out.pop("layernorm_epsilon")
    if "disable_bias_linear" in out:
        out["add_bias_linear"] = not out.pop("disable_bias_linear")
    if out.pop("group_query_attention", True) is False:
        out["num_query_groups"] = None
    for alias, name in (("num_layers_in_first_pipeline_stage", "decoder_first_pipeline_num_layers"),
                        ("num_layers_in_last_pipeline_stage", "decoder_last_pipeline_num_layers"),
                        ("num_virtual_stages_per_pipeline_rank", "virtual_pipeline_model_parallel_size")):
        if out.get(alias) is not None:
            out[name] = out.pop(alias)
        else:
            out.pop(alias, None)
    per_stage = out.pop("num_layers_per_virtual_pipeline_stage", None)
    if per_stage is not None:  # arguments.py: VPP = (num_layers / PP) / n, which must divide
        layers, pp = out.get("num_layers"), out.get("pipeline_model_parallel_size", 1)
        if not isinstance(layers, int) or not isinstance(pp, int) or not isinstance(per_stage, int) or per_stage < 1 \
                or layers % pp or (layers // pp) % per_stage:
            raise InputError(f"num_layers / PP must be divisible by {per_stage!r} (Megatron-LM arguments.py)",
                             file=file, key="num_layers_per_virtual_pipeline_stage")
        out["virtual_pipeline_model_parallel_size"] = layers // pp // per_stage
    if out.pop("recompute_activations", False):  # Megatron-LM: --recompute-activations = selective
        out["recompute_granularity"] = "selective"
    if out.pop("moe_layer_recompute", False):  # deprecated spelling of selective + the moe module
        out["recompute_granularity"] = "selective"
        out["recompute_modules"] = [*(out.get("recompute_modules") or ["core_attn"]), "moe"]
    if out.pop("grad_reduce_in_bf16", False):  # Megatron-LM: keeps bf16 gradients (no fp32 promotion)
        out["grad_reduce_in_fp32"] = False
    return out


def _split(args: dict[str, Any], *, file: str, name: str, stack: str, primus_root: Path | None = None) -> Workload:
    """Divide one flat argument mapping into model and training parts and validate both; a real stack
    argument that is not modelled is kept aside by name, anything else is an unknown key. Values are
    first read as Megatron-LM reads them (`megatron_values`), with a note for each deprecated one."""
    args, notes = megatron_values(_apply_aliases(args, file))
    model_args = {"name": args.pop("name", name), "source": args.pop("source", file)}
    training_args: dict[str, Any] = dict(STACK_DEFAULTS[stack])
    not_modelled: list[str] = []
    known = stack_arguments()
    for key, value in args.items():
        if key in MODEL_KEYS:
            model_args[key] = value
        elif key in TRAINING_KEYS:
            training_args[key] = value
        elif key in known or key in OWN_KEYS:
            not_modelled.append(key)
        else:
            raise unknown_key_error(key, sorted(MODEL_KEYS | TRAINING_KEYS | known), file)
    model = build(ModelArch, _null_means_default(model_args, ModelArch), file=file)
    training = build(TrainingArgs, _null_means_default(training_args, TrainingArgs), file=file)
    return Workload(name=Path(file).stem, model=model, training=training, stack=stack,
                    not_modelled=tuple(sorted(set(not_modelled) - OWN_KEYS)), notes=tuple(notes),
                    primus_root=str(primus_root) if primus_root else None)


def _null_means_default(args: dict[str, Any], spec: type[ModelArch] | type[TrainingArgs]) -> dict[str, Any]:
    """Drop `key: null` where the default is not None, so null reads as "Megatron's default"."""
    return {k: v for k, v in args.items() if v is not None or spec.model_fields[k].default is None}


def _stack(stated: Any, file: str, stack: str | None, stack_from: str | None, form: str | None = None) -> str:
    """The one stack a workload follows: the cluster's (`stack`, stated in `stack_from`: the cluster file or
    `--stack`) decides; a workload file's own `stack:`, or the stack its form states (`form`: a Primus
    experiment, a Megatron-LM flags file), may only agree with it. Without a cluster, the file's `stack:`,
    else Megatron-LM."""
    if stated is not None and stated not in STACKS:
        raise InputError(f"must be one of {', '.join(STACKS)}", file=file, key="stack")
    if stack is None:
        return str(stated or "megatron-lm")
    if form is not None and stated != stack:  # the file's form states its stack
        raise InputError(f"is {form}, but {stack_from or 'the cluster'} runs {stack}: the cluster's stack decides "
                         f"the knobs and the workload's stack defaults; use a {stated} cluster (or --stack {stated})",
                         file=file, key="stack")
    if stated is not None and stated != stack:
        raise InputError(f"says {stated}, but {stack_from or 'the cluster'} runs {stack}: the cluster's stack decides "
                         "both the knobs and the workload's stack defaults; remove the workload's stack: or change "
                         "the cluster's", file=file, key="stack")
    return stack


def _native(path: Path, data: dict[str, Any], stack: str) -> Workload:
    file = str(path)
    card: dict[str, Any] = {}
    for parent in _extends_list(data.pop("extends", []), file):
        card = deep_merge(card, _card(parent, path.parent, file))
    merged = {**card, **data}
    return _split(merged, file=file, name=card.get("name", path.stem), stack=stack)


# The trainer modules of a Primus experiment that train a model: pretraining and full-parameter SFT
# (Primus fd1eeab: pre_trainer.yaml and sft_trainer.yaml under primus/configs/modules/megatron/).
TRAINERS = ("pre_trainer", "post_trainer")


def _trainer(data: dict[str, Any], file: str) -> tuple[str, dict[str, Any]]:
    """(module name, mapping) of the experiment's training module."""
    modules = data.get("modules")
    if not isinstance(modules, dict):
        modules = {}
    for name in TRAINERS:
        if isinstance(modules.get(name), dict):
            return name, modules[name]
    raise InputError(f"a Primus experiment needs a {' or '.join(repr(t) for t in TRAINERS)} mapping",
                     file=file, key="modules")


def _refuse_lora(args: dict[str, Any], module: str, file: str) -> None:
    """LoRA trains low-rank adapters on a frozen model, which the oracle does not project (sft_trainer.yaml
    `lora.enabled`, read by Primus's SFT trainer)."""
    lora = args.get("lora")
    if isinstance(lora, dict) and lora.get("enabled"):
        raise InputError("LoRA fine-tuning (frozen weights, low-rank adapters) is not projected: paratune models "
                         "full-parameter training; set it false for full SFT", file=file,
                         key=f"modules.{module}.lora.enabled")


def _refuse_own_trainer(trainer: dict[str, Any], module: str, file: str) -> None:
    """A module-level `trainer_class` makes Primus run that trainer in place of its Megatron GPT trainer
    (AMD-AGI/Primus fd1eeab primus/core/launcher/parser.py keeps it beside the presets for the launcher). The
    published ones are Flux's (examples/megatron/configs/<GPU>/diffusion/*.yaml: `trainer_class:
    FluxPretrainTrainer`, `model_type: flux_schnell` or `diffusion_model`, a model preset over
    models/megatron/diffusion_model.yaml with joint and single blocks over image latents and text): diffusion
    transformers, not the GPT decoders (dense or MoE, MHA/GQA/MLA) the oracle projects."""
    own = trainer.get("trainer_class")
    if own is None:
        return
    overrides = trainer.get("overrides")
    kind = overrides.get("model_type") if isinstance(overrides, dict) else None
    raise InputError(f"Primus trains this experiment with its own trainer {own!r}"
                     f"{f' (model_type {kind!r})' if kind else ''}, not its Megatron GPT trainer: paratune projects "
                     "GPT-style decoders only (a Flux diffusion transformer is not one)", file=file,
                     key=f"modules.{module}.trainer_class")


def _primus(path: Path, primus_root: str | None, stack: str) -> Workload:
    """A Primus experiment read as Primus reads it (oracle/inputs/primus_tree.py): the experiment with its
    own `extends:` parents merged, then its trainer's module config chain, the model file's keys it lacks,
    then `overrides`; a catalog model name stands for a model file."""
    file = str(path)
    module, trainer = _trainer(experiment_mapping(path), file)
    _refuse_own_trainer(trainer, module, file)
    ref = trainer.get("model")
    if not isinstance(ref, str):
        raise InputError("missing model file or name", file=file, key=f"modules.{module}.model")
    root = find_primus_root(path, primus_root)
    if ref in model_names() and not (path.parent / ref).exists():
        overrides = trainer.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise InputError("must be a mapping", file=file, key=f"modules.{module}.overrides")
        card = model_card(ref, file=file)
        merged = deep_merge(card, overrides)
        name = card.get("name", ref)
    else:
        resolved = resolve_trainer(path, trainer, root, module=module)
        merged = resolved.args
        name = resolved.model_chain[-1].stem if resolved.model_chain else Path(ref).stem
    _refuse_lora(merged, module, file)
    return _split(merged, file=file, name=name, stack=stack, primus_root=root)


def _flags(path: Path, stack: str) -> Workload:
    """A Megatron-LM flags file (a launch script or `--flag value` lines) read as Megatron-LM's parser reads
    it (oracle/inputs/megatron_flags.py), then divided like any flat argument mapping."""
    args, notes = read_flags(path, MODEL_KEYS | TRAINING_KEYS | ALIASES | {"attention_backend"})
    workload = _split(args, file=str(path), name=path.stem, stack=stack)
    return workload.model_copy(update={"notes": (*notes, *workload.notes)})


def load_workload(path: str | Path, *, primus_root: str | None = None, stack: str | None = None,
                  stack_from: str | None = None) -> Workload:
    """A workload from a native or Primus YAML file, a Megatron-LM flags file (a `pretrain_gpt.py` launch
    script or `--flag value` lines), or a Hugging Face config.json (or its folder: the model with
    TrainingArgs' defaults); bad input raises InputError naming file and key.
    `primus_root` (or $PRIMUS_ROOT, or a Primus checkout above the file) locates Primus's configs.
    `stack`: the cluster's stack (stated in `stack_from`), which the workload's stack defaults follow; a
    native file's `stack:` must agree with it. Without it: the file's `stack:`, Primus for a Primus
    experiment, else Megatron-LM."""
    p = guarded(path)
    if is_flags_file(p):  # a Megatron-LM launch or flags file states its stack by its form
        return _flags(p, _stack("megatron-lm", str(p), stack, stack_from,
                                        "a Megatron-LM flags file"))
    if is_hf_config(p):
        card = hf_card(p)
        return _split(card, file=str(p), name=card["name"], stack=stack or "megatron-lm")
    data = read_mapping(p)
    if is_experiment(p, data):  # a Primus experiment states its stack by its form
        return _primus(p, primus_root, _stack("primus", str(p), stack, stack_from, "a Primus experiment"))
    return _native(p, data, _stack(data.pop("stack", None), str(p), stack, stack_from))
