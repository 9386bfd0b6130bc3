"""Imports run one way: oracle (the pure model) < ledger < planner (search, launch, explain, pick,
measurements) < server (MCP) < planner.cli, planner.tune_run and planner.investigator (the commands, the
run orchestration, the LLM client of the server); calibration sits beside them on the oracle. Every
folder imports as paratune.<folder>, never under its bare name. Read from the source with `ast`
(relative imports resolved), so a new import against the direction fails here."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from .conftest import ROOT

OURS = ("oracle", "ledger", "planner", "server", "calibration")
# package (or module prefix) -> top-level packages it must not import
FORBIDDEN = {
    "oracle": {"ledger", "planner", "server", "calibration"},
    "ledger": {"planner", "server", "calibration"},
    "calibration": {"ledger", "planner", "server"},
    "planner": {"server"},  # planner.cli is the exception: it starts the server
    "server": {"calibration"},
}
ALLOWED = {("planner.cli", "server")}
# The server sits below the command line, the run orchestration and the LLM investigator (an MCP client
# of it); what it shares with the investigator (LLM names, keys, failure classes) is planner.llm.
FORBIDDEN_SUBMODULES = {"server": ("planner.cli", "planner.tune_run", "planner.investigator"),
                        "planner.llm": ("planner.investigator", "dspy")}


def _module_name(path: Path) -> str:
    """The logical name of a source file (without the paratune. prefix): oracle/memory/estimate.py ->
    oracle.memory.estimate."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute; relative imports resolved against its package, and the
    paratune. prefix dropped (so oracle.x whether written paratune.oracle.x or ..x)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                out.add(node.module)
    return {n.removeprefix("paratune.") for n in out}


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    bad = []
    for path in _sources(package):
        module = _module_name(path)
        for name in _imports(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[package] and not any(module.startswith(a) and top == b for a, b in ALLOWED):
                bad.append(f"{module} imports {name}")
    assert bad == []


@pytest.mark.parametrize("prefix", sorted(FORBIDDEN_SUBMODULES))
def test_the_server_stays_below_the_commands_and_the_llm_client(prefix):
    bad = [f"{_module_name(p)} imports {name}" for p in _sources(*OURS) if _module_name(p).startswith(prefix)
           for name in _imports(p) if name.startswith(FORBIDDEN_SUBMODULES[prefix])]
    assert bad == []


def test_nothing_imports_a_folder_by_its_bare_name():
    # installed, the folders are paratune.<folder>: a bare `import oracle` only works from a checkout
    bad = []
    for path in _sources(*OURS, "tests", "benchmarks", "scripts"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
            bad += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.split(".")[0] in OURS]
    assert bad == []


def test_the_installed_packages_are_the_folders():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {"paratune." + ".".join(p.parent.relative_to(ROOT).parts) for p in _sources(*OURS)
               if p.name == "__init__.py"}
    assert set(tool["packages"]) == folders
    assert tool["package-dir"] == {f"paratune.{f}": f for f in OURS}


def test_the_oracle_reads_only_its_own_package_data():
    # every file the oracle opens by itself sits beside the module that names it (the user's files come in
    # as arguments): no path climbs out of the package, nothing names the shared folder beside the repo
    bad = []
    for path in _sources("oracle"):
        text = path.read_text(encoding="utf-8")
        for hit in ("parents[", ".parent.parent", '"shared"', "'shared'", '"..'):
            if hit in text:
                bad.append(f"{path.relative_to(ROOT)}: {hit}")
        bad += [f"{path.relative_to(ROOT)}: {line.strip()}" for line in text.splitlines()
                if "__file__" in line and ".with_name(" not in line and "Path(__file__).parent" not in line]
    assert bad == []
