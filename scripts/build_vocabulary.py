"""Regenerate `oracle/inputs/vocabulary/*.txt`: every argument / config name of the three stacks.

paratune accepts any real name of Megatron-LM, Megatron-Bridge or Primus (reporting the ones it does
not model as "accepted, not modelled") and offers "did you mean" for the rest. The lists come from
the stacks' own sources, read straight out of bare git mirrors (no checkout, nothing imported):

* Megatron-LM: every argparse destination of `megatron/training/arguments.py` (explicit
  `add_argument` calls and the groups `ArgumentGroupFactory` builds from config dataclasses), plus
  the fields of megatron-core's TransformerConfig, ModelParallelConfig, OptimizerConfig and
  DistributedDataParallelConfig, all at one revision (default `core_v0.16.1`).
* Megatron-Bridge: the fields of every section of `ConfigContainer` (and of the dataclasses in
  the Bridge tree that subclass a section's type, e.g. each model provider), written both bare and
  as `section.field`. Base classes from megatron-core / megatron.training are read from the
  Megatron-LM commit Bridge pins as its `3rdparty/Megatron-LM` submodule.
* Primus: every key (nested mappings also as dotted paths) of the Megatron module YAMLs and model
  YAMLs, plus the experiment-level keys its launcher reads.

Usage:
    python scripts/build_vocabulary.py --megatron-lm /work/.mirror/NVIDIA+Megatron-LM/repo \
        --megatron-bridge /work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo \
        --primus /work/.mirror/AMD-AGI+Primus/repo [--out oracle/inputs/vocabulary]
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

OUT_DEFAULT = Path(__file__).resolve().parent.parent / "oracle" / "inputs" / "vocabulary"

MLM_ARGUMENTS = "megatron/training/arguments.py"
MLM_CORE_CONFIGS = [  # (module, class) read from the same Megatron-LM revision
    ("megatron.core.transformer.transformer_config", "TransformerConfig"),
    ("megatron.core.model_parallel_config", "ModelParallelConfig"),
    ("megatron.core.optimizer.optimizer_config", "OptimizerConfig"),
    ("megatron.core.distributed.distributed_data_parallel_config", "DistributedDataParallelConfig"),
]
BRIDGE_CONTAINER = ("megatron.bridge.training.config", "ConfigContainer")
BRIDGE_SCAN = ["models", "data", "peft", "training"]  # folders under src/megatron/bridge
# Section types beyond the annotation: a provider that derives only from ModelProviderMixin (e.g.
# FalconH1ModelProvider) is still a model provider.
BRIDGE_EXTRA_TYPES = {"model": [("megatron.bridge.models.model_provider", "ModelProviderMixin")]}
PRIMUS_MODULES = "primus/configs/modules/megatron"
PRIMUS_MODULE_BASE = "primus/configs/modules/module_base.yaml"  # extended by trainer_base.yaml
PRIMUS_MODELS = "primus/configs/models/megatron"
# Primus's published Megatron experiments: PrimusParser deep-merges any `overrides:` key into the
# trainer's namespace (parser.py, override_namespace) and Primus's backend reads those its YAMLs do not
# declare (e.g. use_turbo_permute_padding), so every key they set is a Primus name.
PRIMUS_EXPERIMENTS = "examples/megatron/configs"
# Experiment-level keys: the brief's list plus what primus/core/launcher/parser.py reads
# (parse_meta_info, parse_platform, parse_trainer_module's reserved module keys).
PRIMUS_EXPERIMENT_KEYS = [
    "work_group", "user_name", "exp_name", "workspace", "modules", "config", "framework", "model",
    "overrides", "platform", "params", "trainer_class", "pre_trainer", "post_trainer", "extends",
]


# --------------------------------------------------------------------------------------------
# git mirror access
# --------------------------------------------------------------------------------------------


class GitTree:
    """One revision of a bare git repository, read with `git show` / `git ls-tree`."""

    def __init__(self, git_dir: str | Path, rev: str):
        self.git_dir = str(git_dir)
        self.commit = self._git("rev-parse", f"{rev}^{{commit}}").strip()
        self.rev = rev
        self.date = self._git("log", "-1", "--format=%cs", self.commit).strip()
        self._paths = set(self._git("ls-tree", "-r", "--name-only", self.commit).splitlines())
        self._cache: dict[str, str | None] = {}
        self.read_paths: list[str] = []

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args], check=True, capture_output=True, text=True
        ).stdout

    def exists(self, path: str) -> bool:
        return path in self._paths

    def files(self, prefix: str, suffix: str = "") -> list[str]:
        prefix = prefix.rstrip("/") + "/"
        return sorted(p for p in self._paths if p.startswith(prefix) and p.endswith(suffix))

    def read(self, path: str) -> str | None:
        if path not in self._cache:
            self._cache[path] = self._git("show", f"{self.commit}:{path}") if path in self._paths else None
            if self._cache[path] is not None:
                self.read_paths.append(path)
        return self._cache[path]

    def submodule_commit(self, path: str) -> str:
        line = self._git("ls-tree", self.commit, path).split()
        if len(line) < 3 or line[1] != "commit":
            raise SystemExit(f"{path} is not a submodule at {self.commit}")
        return line[2]


# --------------------------------------------------------------------------------------------
# static dataclass reading
# --------------------------------------------------------------------------------------------


@dataclass
class Module:
    name: str
    tree: ast.Module
    is_package: bool
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias -> (module, name)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


class PySources:
    """Python modules spread over git trees; `roots` maps a module prefix to (tree, folder)."""

    def __init__(self, roots: list[tuple[str, GitTree, str]]):
        self.roots = sorted(roots, key=lambda r: -len(r[0]))
        self._modules: dict[str, Module | None] = {}
        self._fields: dict[tuple[str, str], dict[str, ast.AnnAssign]] = {}

    def module(self, name: str) -> Module | None:
        if name in self._modules:
            return self._modules[name]
        found = None
        for prefix, tree, folder in self.roots:
            if name == prefix or name.startswith(prefix + "."):
                rel = name[len(prefix):].lstrip(".").replace(".", "/")
                base = f"{folder}/{rel}" if rel else folder
                for path, pkg in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
                    text = tree.read(path)
                    if text is not None:
                        found = self._index(name, ast.parse(text), pkg)
                        break
                break
        self._modules[name] = found
        return found

    @staticmethod
    def _index(name: str, tree: ast.Module, is_package: bool) -> Module:
        mod = Module(name, tree, is_package)
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):  # function-local imports count too (arguments.py uses them)
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                for alias in node.names:
                    mod.imports[alias.asname or alias.name] = (source, alias.name)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                mod.classes[node.name] = node
        return mod

    def find_class(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from `module`, following re-exports."""
        mod = self.module(module)
        if mod is None or depth > 8:
            return None
        if name in mod.classes:
            return module, mod.classes[name]
        if name in mod.imports:
            source, real = mod.imports[name]
            if real == "*":
                return None
            hit = self.find_class(source, real, depth + 1)
            if hit is None and self.module(f"{source}.{real}") is not None:
                return None  # a module, not a class
            return hit
        for source, real in mod.imports.values():  # `from x import *`
            if real == "*":
                hit = self.find_class(source, name, depth + 1)
                if hit:
                    return hit
        return None

    def _resolve_base(self, module: str, expr: ast.expr) -> tuple[str, ast.ClassDef] | None:
        if isinstance(expr, ast.Name):
            return self.find_class(module, expr.id)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            mod = self.module(module)
            if mod and expr.value.id in mod.imports:
                source, real = mod.imports[expr.value.id]
                return self.find_class(f"{source}.{real}", expr.attr)
        return None

    def bases(self, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        out = []
        for base in cls.bases:
            hit = self._resolve_base(module, base)
            if hit:
                out.append(hit)
        return out

    def is_subclass(self, module: str, cls: ast.ClassDef, targets: set[tuple[str, str]], depth: int = 0) -> bool:
        if (module, cls.name) in targets:
            return True
        if depth > 20:
            return False
        return any(self.is_subclass(m, c, targets, depth + 1) for m, c in self.bases(module, cls))

    def fields(self, module: str, cls: ast.ClassDef) -> dict[str, ast.AnnAssign]:
        """Dataclass fields (init=True, public) of `cls` and its bases, as their AnnAssign nodes."""
        key = (module, cls.name)
        if key in self._fields:
            return self._fields[key]
        self._fields[key] = {}
        out: dict[str, ast.AnnAssign] = {}
        for base_module, base in reversed(self.bases(module, cls)):
            out.update(self.fields(base_module, base))
        if _is_dataclass(cls):
            for node in cls.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                name = node.target.id
                annotation = ast.unparse(node.annotation)
                if name.startswith("_") or "ClassVar" in annotation or "InitVar" in annotation:
                    continue
                if _field_kwarg(node, "init") is False:
                    out.pop(name, None)
                    continue
                out[name] = node
        self._fields[key] = out
        return out


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def _field_kwarg(node: ast.AnnAssign, name: str):
    """The literal value of keyword `name` in `x: T = field(...)`, or None."""
    func = node.value.func if isinstance(node.value, ast.Call) else None
    if func is not None and getattr(func, "id", getattr(func, "attr", "")) == "field":
        for kw in node.value.keywords:
            if kw.arg == name:
                try:
                    return ast.literal_eval(kw.value)
                except ValueError:
                    return None
    return None


def _argparse_dest_override(node: ast.AnnAssign) -> str | None:
    """`metadata={"argparse_meta": {"dest": ...}}` on a field renames its argparse destination."""
    meta = _field_kwarg(node, "metadata")
    if isinstance(meta, dict) and isinstance(meta.get("argparse_meta"), dict):
        dest = meta["argparse_meta"].get("dest")
        return dest if isinstance(dest, str) else None
    return None


# --------------------------------------------------------------------------------------------
# Megatron-LM
# --------------------------------------------------------------------------------------------


def _argparse_dest(call: ast.Call) -> str | None:
    """The destination argparse gives `add_argument(...)`: `dest=`, else the first long option
    (`--foo-bar` -> `foo_bar`), else the first short option, else the positional name."""
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if len(options) != len(call.args):
        raise SystemExit(f"add_argument with a non-literal name at line {call.lineno}")
    if not options:
        return None
    long = [o for o in options if o.startswith("--")]
    chosen = long[0] if long else options[0]
    return chosen.lstrip("-").replace("-", "_")


def _local_lists(func: ast.AST) -> dict[str, ast.expr]:
    """The list/tuple literals a function assigns to plain names (what `exclude=` may name)."""
    return {
        t.id: node.value
        for node in ast.walk(func)
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _factory_names(src: PySources, module: str, call: ast.Call, local_lists: dict[str, ast.expr]
                   ) -> tuple[set[str], str]:
    """(argparse destinations, note) of one `ArgumentGroupFactory(ConfigClass, exclude=...)` call: the
    config dataclass's fields less the excluded ones, each under its dest override if it has one."""
    cls_name = call.args[0].id  # type: ignore[attr-defined]
    hit = src.find_class(module, cls_name)
    if hit is None:
        raise SystemExit(f"cannot find {cls_name} (ArgumentGroupFactory at line {call.lineno})")
    exclude: set[str] = set()
    for kw in call.keywords:
        if kw.arg == "exclude":
            value = local_lists.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
            exclude = set(ast.literal_eval(value)) if value is not None else set()
    fields = src.fields(*hit)
    names = {_argparse_dest_override(node) or fname for fname, node in fields.items() if fname not in exclude}
    return names, f"{cls_name} ({hit[0]}): {len(fields)} fields, {len(exclude)} excluded"


def megatron_lm_names(tree: GitTree) -> tuple[set[str], list[str]]:
    src = PySources([("megatron", tree, "megatron")])
    mod = src.module("megatron.training.arguments")
    if mod is None:
        raise SystemExit(f"{MLM_ARGUMENTS} not found at {tree.commit}")
    names: set[str] = set()
    notes: list[str] = []
    for func in ast.walk(mod.tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local_lists = _local_lists(func)
        for call in ast.walk(func):
            if not isinstance(call, ast.Call):
                continue
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
                dest = _argparse_dest(call)
                if dest and dest != "help":
                    names.add(dest)
            elif isinstance(call.func, ast.Name) and call.func.id == "ArgumentGroupFactory":
                built, note = _factory_names(src, mod.name, call, local_lists)
                names |= built
                notes.append(note)
    for module, cls_name in MLM_CORE_CONFIGS:
        hit = src.find_class(module, cls_name)
        if hit is None:
            raise SystemExit(f"cannot find {module}.{cls_name}")
        names.update(src.fields(*hit))
    return names, notes


# --------------------------------------------------------------------------------------------
# Megatron-Bridge
# --------------------------------------------------------------------------------------------


def megatron_bridge_names(bridge: GitTree, mlm: GitTree) -> tuple[set[str], list[str]]:
    src = PySources([("megatron.bridge", bridge, "src/megatron/bridge"), ("megatron", mlm, "megatron")])
    hit = src.find_class(*BRIDGE_CONTAINER)
    if hit is None:
        raise SystemExit("ConfigContainer not found")
    container_fields = src.fields(*hit)
    # every dataclass in the scanned Bridge folders, for "subclass of a section type"
    scanned: list[tuple[str, ast.ClassDef]] = []
    for folder in BRIDGE_SCAN:
        for path in bridge.files(f"src/megatron/bridge/{folder}", ".py"):
            module = "megatron." + path[len("src/megatron/"):-3].replace("/", ".").removesuffix(".__init__")
            mod = src.module(module)
            if mod:
                scanned.extend((module, c) for c in mod.classes.values() if _is_dataclass(c))
    names: set[str] = set()
    notes: list[str] = []
    for section, node in container_fields.items():
        names.add(section)
        types = {
            (m, c.name): (m, c)
            for n in ast.walk(node.annotation)
            if isinstance(n, ast.Name)
            for hit2 in [src.find_class(hit[0], n.id)]
            if hit2 is not None
            for m, c in [hit2]
        }
        for extra in BRIDGE_EXTRA_TYPES.get(section, []):
            found = src.find_class(*extra)
            if found is None:
                raise SystemExit(f"cannot find {extra[0]}.{extra[1]}")
            types[(found[0], found[1].name)] = found
        if not types:
            continue
        targets = set(types)
        for module, cls in scanned:
            if (module, cls.name) not in targets and src.is_subclass(module, cls, targets):
                types[(module, cls.name)] = (module, cls)
        section_fields: set[str] = set()
        for module, cls in types.values():
            section_fields.update(src.fields(module, cls))
        names.update(section_fields)
        names.update(f"{section}.{f}" for f in section_fields)
        notes.append(f"{section}: {len(types)} classes, {len(section_fields)} fields")
    return names, notes


# --------------------------------------------------------------------------------------------
# Primus
# --------------------------------------------------------------------------------------------


def _yaml_keys(data, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}{key}"
            out.add(name)
            out.update(_yaml_keys(value, f"{name}."))
    return out


def primus_names(tree: GitTree) -> tuple[set[str], list[str]]:
    names = set(PRIMUS_EXPERIMENT_KEYS)
    notes = []
    for path in tree.files(PRIMUS_MODULES, ".yaml") + [PRIMUS_MODULE_BASE]:
        text = tree.read(path)
        if text is None:
            raise SystemExit(f"{path} not found at {tree.commit}")
        keys = _yaml_keys(yaml.safe_load(text) or {})
        names.update(keys)
        notes.append(f"{path}: {len(keys)} keys")
    models = tree.files(PRIMUS_MODELS, ".yaml")
    model_keys: set[str] = set()
    for path in models:
        model_keys.update(_yaml_keys(yaml.safe_load(tree.read(path) or "") or {}))
    names.update(model_keys)
    notes.append(f"{PRIMUS_MODELS}/**.yaml: {len(models)} files, {len(model_keys)} distinct keys")
    experiments = tree.files(PRIMUS_EXPERIMENTS, ".yaml")
    override_keys: set[str] = set()
    for path in experiments:
        modules = (yaml.safe_load(tree.read(path) or "") or {}).get("modules") or {}
        for module in modules.values() if isinstance(modules, dict) else ():
            if isinstance(module, dict):
                override_keys.update(_yaml_keys(module.get("overrides") or {}))
    names.update(override_keys)
    notes.append(f"{PRIMUS_EXPERIMENTS}/**.yaml (modules.*.overrides): {len(experiments)} files, "
                 f"{len(override_keys)} distinct keys")
    return names, notes


# --------------------------------------------------------------------------------------------


def write_list(path: Path, names: set[str], header: list[str]) -> None:
    body = sorted({n for n in names if n})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"# {h}\n" for h in header) + "".join(f"{n}\n" for n in body), encoding="utf-8")
    print(f"{path}: {len(body)} names", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron-lm", required=True, help="bare git dir of NVIDIA/Megatron-LM")
    ap.add_argument("--megatron-lm-rev", default="core_v0.16.1")
    ap.add_argument("--megatron-bridge", required=True, help="bare git dir of NVIDIA-NeMo/Megatron-Bridge")
    ap.add_argument("--megatron-bridge-rev", default="HEAD")
    ap.add_argument("--primus", required=True, help="bare git dir of AMD-AGI/Primus")
    ap.add_argument("--primus-rev", default="HEAD")
    ap.add_argument("--out", type=Path, default=OUT_DEFAULT)
    ap.add_argument("--date", default=_dt.date.today().isoformat(), help="date written in the headers")
    args = ap.parse_args(argv)

    common = "one name per line, sorted, unique; generated by scripts/build_vocabulary.py"

    mlm = GitTree(args.megatron_lm, args.megatron_lm_rev)
    names, notes = megatron_lm_names(mlm)
    write_list(args.out / "megatron_lm.txt", names, [
        "Megatron-LM argument vocabulary: argparse destinations of megatron/training/arguments.py",
        "(add_argument calls + ArgumentGroupFactory dataclass groups) and the fields of megatron-core's",
        "TransformerConfig, ModelParallelConfig, OptimizerConfig, DistributedDataParallelConfig.",
        f"repo: github.com/NVIDIA/Megatron-LM  rev: {mlm.rev}  commit: {mlm.commit} ({mlm.date})",
        f"files read: {', '.join(sorted(set(mlm.read_paths)))}",
        *[f"  {n}" for n in notes],
        f"read on: {args.date}; {common}",
    ])

    bridge = GitTree(args.megatron_bridge, args.megatron_bridge_rev)
    pinned = GitTree(args.megatron_lm, bridge.submodule_commit("3rdparty/Megatron-LM"))
    names, notes = megatron_bridge_names(bridge, pinned)
    bridge_files = sorted(set(bridge.read_paths))
    write_list(args.out / "megatron_bridge.txt", names, [
        "Megatron-Bridge config vocabulary: ConfigContainer sections and the fields of each section's",
        "dataclass(es), bare and as section.field (a section's classes include the Bridge dataclasses",
        "that subclass its annotated type, e.g. every model provider under model.).",
        f"repo: github.com/NVIDIA-NeMo/Megatron-Bridge  rev: {bridge.rev}  commit: {bridge.commit} ({bridge.date})",
        f"base classes from github.com/NVIDIA/Megatron-LM commit {pinned.commit} ({pinned.date}),"
        " the 3rdparty/Megatron-LM submodule pin",
        f"files read: src/megatron/bridge/training/config.py and {len(bridge_files) - 1} other Bridge files"
        f" (src/megatron/bridge/{{{','.join(BRIDGE_SCAN)}}}/**.py); Megatron-LM: "
        + ", ".join(sorted(set(pinned.read_paths))),
        *[f"  {n}" for n in notes],
        f"read on: {args.date}; {common}",
    ])

    primus = GitTree(args.primus, args.primus_rev)
    names, notes = primus_names(primus)
    # Primus hands every config key that is an argparse destination of its pinned Megatron-LM to
    # Megatron (primus/backends/megatron/argument_builder.py, MegatronArgBuilder.update), so those
    # destinations are Primus names too, YAML or not.
    primus_mlm = GitTree(args.megatron_lm, primus.submodule_commit("third_party/Megatron-LM"))
    pinned_names, _ = megatron_lm_names(primus_mlm)
    names |= pinned_names
    write_list(args.out / "primus.txt", names, [
        "Primus config vocabulary: every key (nested ones also dotted) of the Megatron module YAMLs",
        f"({PRIMUS_MODULES}/*.yaml, {PRIMUS_MODULE_BASE}), model YAMLs ({PRIMUS_MODELS}/**.yaml) and the",
        f"overrides of the published experiments ({PRIMUS_EXPERIMENTS}/**.yaml),",
        "plus the experiment-level keys read by primus/core/launcher/parser.py, plus the Megatron-LM names",
        "(argparse destinations + core config fields, as in megatron_lm.txt) of the Megatron-LM commit Primus",
        "pins as third_party/Megatron-LM: MegatronArgBuilder passes any of those through.",
        f"repo: github.com/AMD-AGI/Primus  rev: {primus.rev}  commit: {primus.commit} ({primus.date})",
        f"pinned Megatron-LM: {primus_mlm.commit} ({primus_mlm.date}), {len(pinned_names)} names",
        "files read:",
        *[f"  {n}" for n in notes],
        f"read on: {args.date}; {common}",
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
