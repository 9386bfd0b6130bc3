"""Where a Primus experiment's module config and model file live, and how Primus merges them.

A Primus experiment names its trainer's two presets by bare file name::

    modules:
      pre_trainer:
        framework: megatron
        config: pre_trainer.yaml          # -> primus/configs/modules/megatron/pre_trainer.yaml
        model: mixtral_8x22B_v0.1.yaml    # -> primus/configs/models/megatron/mixtral_8x22B_v0.1.yaml
        overrides: {...}

The rules below follow AMD-AGI/Primus at commit fd1eeabbad15 (2026-08-22); each function names the
Primus file it mirrors. Summary:

* lookup (`primus/core/config/preset_loader.py`, `PresetLoader.load`): a name without `.yaml`/`.yml`
  gets `.yaml`; the file is `<primus>/configs/<"modules"|"models">/<framework>/<name>`, where
  `<primus>` is the installed `primus` package (Primus never looks next to the experiment), and a
  path that leaves `primus/configs` is refused. `framework: megatron` maps to the folder `megatron`
  (`primus/core/launcher/parser.py`, `PrimusParser.get_model_format`).
* `extends:` (`primus/core/config/yaml_loader.py`, `parse_yaml` / `_apply_extends`): a string or
  a list; each parent is resolved relative to the *including* file's folder and fully expanded
  first; parents merge left to right (later wins), the file's own keys win over all parents; the
  merge is a recursive dict merge (`primus/core/config/merge_utils.py`, `deep_merge`).
  `${VAR:default}` templates are replaced per file before its parents are merged in.
* precedence (`primus/core/launcher/parser.py`, `PrimusParser.parse_trainer_module`): module
  config chain first; then the model file's chain, but **only keys the module config does not
  already have** (`yaml_utils.merge_namespace(..., allow_override=False)` skips duplicates, so the
  module config wins over the model file); then `overrides:` deep-merged over both. CLI overrides
  (`primus/core/launcher/parser.py`, `parse_args`) come last.

Where a Primus tree is not at hand, `find_primus_root` follows Primus's own tuning agent
(`primus/agents/tuning_agent/workload.py`, `_find_primus_root`): `$PRIMUS_ROOT`, then walking up from
the experiment; `resolve_model_file` then also tries the experiment's folder, as that agent does.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .read_guard import guarded, usable
from .yaml_io import deep_merge, read_mapping, resolve_templates

PRIMUS_ROOT_ENV = "PRIMUS_ROOT"
CONFIGS = Path("primus") / "configs"
MODEL_KEY = "modules.pre_trainer.model"
# PrimusParser.get_model_format: framework name -> preset folder name (identity for these four).
_FRAMEWORK_FOLDERS = {
    "megatron": "megatron", "megatron_bridge": "megatron_bridge", "torchtitan": "torchtitan", "maxtext": "maxtext",
}


def models_dir(root: Path, framework: str = "megatron") -> Path:
    """`<root>/primus/configs/models/<framework>/` (PresetLoader.load with config_type="models")."""
    return root / CONFIGS / "models" / _FRAMEWORK_FOLDERS.get(framework, framework)


def modules_dir(root: Path, framework: str = "megatron") -> Path:
    """`<root>/primus/configs/modules/<framework>/` (PresetLoader.load with config_type="modules")."""
    return root / CONFIGS / "modules" / _FRAMEWORK_FOLDERS.get(framework, framework)


def is_primus_root(path: Path) -> bool:
    """A directory holding Primus's Megatron model folder `primus/configs/models/megatron/`."""
    return models_dir(path).is_dir()


def find_primus_root(experiment: Path, explicit: str | None) -> Path | None:
    """The Primus checkout an experiment's bare `config:` / `model:` names resolve against.

    Order: `explicit` (`--primus-root`), then `$PRIMUS_ROOT`, then the nearest directory above the
    experiment file that has `primus/configs/models/megatron/` (the tuning agent's rule in
    `primus/agents/tuning_agent/workload.py`, `_find_primus_root`, without its 10-level cap and its
    fall-back to the working directory). A named root that is not a Primus tree is an error, not
    skipped; no tree found at all gives None.
    """
    for value, key in ((explicit, "--primus-root"), (os.environ.get(PRIMUS_ROOT_ENV), PRIMUS_ROOT_ENV)):
        if value:
            root = usable(value, key=key).expanduser().resolve()
            if not is_primus_root(root):
                raise InputError(f"not a Primus tree: no {models_dir(Path('.'))}/ under it", file=str(root), key=key)
            return root
    for directory in Path(experiment).resolve().parents:
        if is_primus_root(directory):
            return directory
    return None


def _preset_name(name: str) -> str:
    """PresetLoader.load: a name without a YAML suffix gets `.yaml`."""
    return name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"


def _preset_path(root: Path, folder: Path, name: str, *, file: str | None, key: str) -> Path:
    """`folder / name` with PresetLoader.load's check that it stays inside `primus/configs`."""
    configs = (root / CONFIGS).resolve()
    path = (folder / usable(_preset_name(resolve_templates(name)), file=file, key=key)).resolve()
    if not path.is_relative_to(configs):
        raise InputError(f"'{name}' leaves {configs} (Primus refuses path traversal)", file=file, key=key)
    return path


def _extends(value: Any, file: Path) -> list[str]:
    """yaml_loader._apply_extends: `extends:` is a file name or a list of them."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise InputError("must be a file name or a list of file names", file=str(file), key="extends")


def extends_chain(path: Path, _stack: tuple[Path, ...] = ()) -> list[Path]:
    """`path` and its `extends:` parents in merge order (lowest precedence first).

    yaml_loader._apply_extends: each parent is `dirname(including file) / name` and is itself
    expanded first; parents apply left to right, the file itself last. A parent reached twice
    (a diamond) appears twice, because Primus merges it again each time it is reached. A cycle
    (which Primus would recurse on forever) and a missing parent are InputErrors.
    """
    path = Path(path).resolve()
    if path in _stack:
        raise InputError(f"extends cycle through {path.name}", file=str(_stack[-1]), key="extends")
    data = read_mapping(path)
    chain: list[Path] = []
    for name in _extends(data.get("extends"), path):
        parent = guarded((path.parent / usable(resolve_templates(name), file=str(path), key="extends")).resolve())
        if not parent.is_file():
            raise InputError(f"extends parent '{name}' not found (looked for {parent})", file=str(path), key="extends")
        chain.extend(extends_chain(parent, (*_stack, path)))
    chain.append(path)
    return chain


def merge_chain(chain: list[Path]) -> dict[str, Any]:
    """The merged mapping of an `extends_chain`: templates replaced per file, then deep-merged in
    order (yaml_loader.parse_yaml + merge_utils.deep_merge). Flattening the recursion is the same
    merge except where one key changes between a mapping and a scalar across levels."""
    merged: dict[str, Any] = {}
    for path in chain:
        data = resolve_templates(read_mapping(path))
        data.pop("extends", None)
        merged = deep_merge(merged, data)
    return merged


def experiment_mapping(path: Path) -> dict[str, Any]:
    """An experiment file as PrimusParser reads it (`parse_exp` -> `yaml_utils.parse_yaml_to_namespace` ->
    `yaml_loader.parse_yaml`): its own `extends:` parents (other experiments, relative to its folder)
    deep-merged under it, templates resolved per file."""
    return merge_chain(extends_chain(path))


def is_experiment(path: Path, data: dict[str, Any]) -> bool:
    """Whether a YAML file is a Primus experiment: it has `modules:`, or extends a file that is one (a
    native workload's `extends:` names a model card or catalog model instead, which has no `modules:`)."""
    if "modules" in data:
        return True
    try:
        parents = _extends(data.get("extends"), path)
    except InputError:
        return False
    for name in parents:
        parent = (Path(path).resolve().parent / resolve_templates(name)).resolve()
        if parent.suffix in (".yaml", ".yml") and guarded(parent).is_file():
            try:
                if "modules" in experiment_mapping(parent):
                    return True
            except InputError:  # a parent that is not a Primus file (a card extending a catalog name)
                continue
    return False


def module_config_chain(
    root: Path, config_name: str, *, framework: str = "megatron", file: str | None = None,
    key: str = "modules.pre_trainer.config",
) -> list[Path]:
    """The module config (`config: pre_trainer.yaml`) and its `extends` parents, in merge order.

    Primus: `primus/core/launcher/parser.py` (`parse_trainer_module` calls
    `PresetLoader.load(module.config, framework, config_type="modules")`), which reads
    `primus/configs/modules/<framework>/<name>` and expands `extends:` (`yaml_loader.py`). At
    fd1eeabbad15, `pre_trainer.yaml` gives: module_base.yaml, primus_megatron_module.yaml,
    primus_turbo.yaml, torch_compile.yaml, zero_bubble.yaml, primus_pipeline.yaml,
    trainer_base.yaml, pre_trainer.yaml. A missing file raises InputError naming `file` (the
    experiment) and `key` (the module's `config`).
    """
    folder = modules_dir(Path(root), framework)
    path = guarded(_preset_path(Path(root), folder, config_name, file=file, key=key))
    if not path.is_file():
        raise InputError(_not_found("module config", config_name, path, folder), file=file, key=key)
    return extends_chain(path)


def model_file(root: Path, ref: str, *, framework: str = "megatron") -> Path | None:
    """Where Primus reads the model preset `ref` (`model: mixtral_8x22B_v0.1.yaml`), if it exists.

    Primus: `PresetLoader.load(module.model, framework, config_type="models")`
    (`primus/core/config/preset_loader.py`): `<root>/primus/configs/models/<framework>/<ref>`, with
    `.yaml` appended when `ref` has no YAML suffix. Only that folder; None when the file is not there
    or `ref` leaves `primus/configs`.
    """
    folder = models_dir(Path(root), framework)
    try:
        path = _preset_path(Path(root), folder, ref, file=None, key=MODEL_KEY)
    except InputError:
        return None
    return path if guarded(path).is_file() else None


def resolve_model_file(
    root: Path | None, ref: str, *, experiment: Path, framework: str = "megatron", key: str = MODEL_KEY
) -> Path:
    """The model file an experiment means: Primus's model folder first (`model_file`), then the
    experiment's own folder (the fallback of `primus/agents/tuning_agent/workload.py`, which also
    keeps paratune's `model: models/x.yaml` examples working). Not found: InputError naming the
    experiment and `key`, the places looked at and the nearest model name in the folder."""
    ref = resolve_templates(ref)
    looked: list[Path] = []
    if root is not None:
        hit = model_file(root, ref, framework=framework)
        if hit is not None:
            return hit
        looked.append(models_dir(Path(root), framework) / _preset_name(ref))
    local = guarded((Path(experiment).resolve().parent / usable(ref, file=str(experiment), key=key)).resolve())
    if local.is_file():
        return local
    looked.append(local)
    where = " or ".join(str(p) for p in looked)
    hint = ""
    if root is not None and models_dir(Path(root), framework).is_dir():
        known = sorted(p.name for p in models_dir(Path(root), framework).glob("*.y*ml"))
        close = difflib.get_close_matches(_preset_name(ref), known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
    elif root is None:
        hint = f"; no Primus tree found (give --primus-root or set {PRIMUS_ROOT_ENV})"
    raise InputError(f"model file '{ref}' not found (looked for {where}){hint}", file=str(experiment), key=key)


def _not_found(what: str, name: str, path: Path, folder: Path) -> str:
    known = sorted(p.name for p in folder.glob("*.y*ml")) if folder.is_dir() else []
    close = difflib.get_close_matches(_preset_name(name), known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"{what} '{name}' not found (looked for {path}){hint}"


def merge_trainer(
    module_cfg: dict[str, Any], model_cfg: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    """One trainer's arguments the way `PrimusParser.parse_trainer_module` builds them
    (`primus/core/launcher/parser.py`): start from the module config; add each model-file key the
    module config does not already have (`yaml_utils.merge_namespace(..., allow_override=False,
    excepts=["name"])` — a key in both keeps the module config's value, even a mapping); then
    deep-merge `overrides` (`yaml_utils.override_namespace`)."""
    merged = dict(module_cfg)
    for key, value in model_cfg.items():
        if key != "name" and key not in merged:
            merged[key] = value
    return deep_merge(merged, overrides or {})


@dataclass
class PrimusTrainer:
    """A resolved Primus trainer: the merged arguments and the file (or `overrides`) each came from."""

    root: Path | None
    module_chain: list[Path] = field(default_factory=list)
    model_chain: list[Path] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)  # top-level key -> file path or "overrides"


def _provenance(chain: list[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in chain:
        for key in read_mapping(path):
            if key != "extends":
                out[key] = str(path)
    return out


def resolve_trainer(experiment: Path, trainer: dict[str, Any], root: Path | None,
                    module: str = "pre_trainer") -> PrimusTrainer:
    """Module config chain < model chain (only keys the module lacks) < overrides, for the mapping
    `modules.<module>` of an experiment. Without a Primus tree (`root` None) there are no module
    defaults: the model file is looked up beside the experiment and overrides apply on top."""
    framework = trainer.get("framework") or "megatron"
    ref = trainer.get("model")
    if not isinstance(ref, str):
        raise InputError("missing model file name", file=str(experiment), key=f"modules.{module}.model")
    overrides = trainer.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise InputError("must be a mapping", file=str(experiment), key=f"modules.{module}.overrides")
    module_chain: list[Path] = []
    config = trainer.get("config")
    if root is not None and isinstance(config, str):
        module_chain = module_config_chain(root, config, framework=framework, file=str(experiment),
                                           key=f"modules.{module}.config")
    model_chain = extends_chain(resolve_model_file(root, ref, experiment=experiment, framework=framework,
                                                   key=f"modules.{module}.model"))
    module_cfg, model_cfg = merge_chain(module_chain), merge_chain(model_chain)
    args = merge_trainer(module_cfg, model_cfg, resolve_templates(overrides))
    source = _provenance(module_chain)
    source.update({k: v for k, v in _provenance(model_chain).items() if k not in source})
    source.update({k: "overrides" for k in overrides})
    return PrimusTrainer(root=root, module_chain=module_chain, model_chain=model_chain, args=args, source=source)
