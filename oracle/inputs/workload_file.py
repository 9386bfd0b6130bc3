"""Load a workload from either form of DESIGN §2: native Megatron-argument YAML or a Primus experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..catalog import model_card, model_names
from ..errors import InputError
from ..specs import ModelArch, TrainingArgs, Workload
from .yaml_io import build, deep_merge, read_mapping, resolve_templates, unknown_key_error

MODEL_KEYS = set(ModelArch.model_fields) - {"name", "source"}
TRAINING_KEYS = set(TrainingArgs.model_fields)

# Megatron/Primus arguments that do not change memory or throughput: accepted and ignored.
INERT_KEYS = {
    "train_iters", "train_samples", "lr", "min_lr", "lr_warmup_iters", "lr_decay_iters", "lr_decay_style",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad", "seed", "init_method_std",
    "norm_epsilon", "eod_mask_loss", "max_position_embeddings", "position_embedding_type", "rotary_base",
    "rotary_percent", "rotary_scaling_factor", "tokenizer_type", "tokenizer_model", "hidden_dropout",
    "attention_dropout", "attention_softmax_in_fp32", "qk_layernorm", "log_interval", "eval_interval",
    "eval_iters", "save_interval", "mock_data", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
    "moe_router_force_load_balancing", "moe_grouped_gemm", "moe_token_dispatcher_type", "moe_router_dtype",
    "gradient_accumulation_fusion", "make_vocab_size_divisible_by", "description",
}


def _extends_list(value: Any, file: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise InputError("must be a model name, a file path, or a list of them", file=file, key="extends")


def _card(ref: str, base_dir: Path, file: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A model card from a catalog name or a YAML file, following its `extends:` chain (deep-merged)."""
    path = (base_dir / ref).resolve()
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


def _apply_aliases(args: dict[str, Any]) -> dict[str, Any]:
    """Megatron flag spellings that mean one of our keys."""
    out = dict(args)
    if "disable_bias_linear" in out:
        out["add_bias_linear"] = not out.pop("disable_bias_linear")
    if out.pop("group_query_attention", True) is False:
        out["num_query_groups"] = None
    return out


def _split(args: dict[str, Any], *, file: str, name: str, strict: bool) -> Workload:
    """Divide one flat argument mapping into model and training parts and validate both."""
    args = _apply_aliases(args)
    model_args = {"name": args.pop("name", name), "source": args.pop("source", file)}
    training_args: dict[str, Any] = {}
    for key, value in args.items():
        if key in MODEL_KEYS:
            model_args[key] = value
        elif key in TRAINING_KEYS:
            training_args[key] = value
        elif strict and key not in INERT_KEYS:
            raise unknown_key_error(key, sorted(MODEL_KEYS | TRAINING_KEYS), file)
    model = build(ModelArch, _null_means_default(model_args, ModelArch), file=file)
    training = build(TrainingArgs, _null_means_default(training_args, TrainingArgs), file=file)
    return Workload(name=Path(file).stem, model=model, training=training)


def _null_means_default(args: dict[str, Any], spec: type[ModelArch] | type[TrainingArgs]) -> dict[str, Any]:
    """Drop `key: null` where the default is not None, so null reads as "Megatron's default"."""
    return {k: v for k, v in args.items() if v is not None or spec.model_fields[k].default is None}


def _native(path: Path, data: dict[str, Any]) -> Workload:
    file = str(path)
    card: dict[str, Any] = {}
    for parent in _extends_list(data.pop("extends", []), file):
        card = deep_merge(card, _card(parent, path.parent, file))
    merged = {**card, **data}
    return _split(merged, file=file, name=card.get("name", path.stem), strict=True)


def _primus(path: Path, data: dict[str, Any]) -> Workload:
    file = str(path)
    data = resolve_templates(data)
    trainer = data.get("modules", {}).get("pre_trainer") if isinstance(data.get("modules"), dict) else None
    if not isinstance(trainer, dict):
        raise InputError("a Primus experiment needs a 'pre_trainer' mapping", file=file, key="modules.pre_trainer")
    ref = trainer.get("model")
    if not isinstance(ref, str):
        raise InputError("missing model file or name", file=file, key="modules.pre_trainer.model")
    overrides = trainer.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise InputError("must be a mapping", file=file, key="modules.pre_trainer.overrides")
    card = _card(ref, path.parent, file)
    merged = deep_merge(card, overrides)
    return _split(merged, file=file, name=card.get("name", Path(ref).stem), strict=False)


def load_workload(path: str | Path) -> Workload:
    """A workload from a native or Primus YAML file; bad input raises InputError naming file and key."""
    p = Path(path)
    data = read_mapping(p)
    return _primus(p, data) if "modules" in data else _native(p, data)
