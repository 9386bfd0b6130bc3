"""Imports run one way: oracle (the pure model) < ledger < planner (search, launch, explain, pick,
measurements) < server (MCP) < planner.cli (the commands); calibration sits beside them on the oracle.
Read from the source with `ast`, so a new import against the direction fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import ROOT

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


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def _modules(package: str) -> list[tuple[str, Path]]:
    return [(".".join(p.relative_to(ROOT).with_suffix("").parts), p) for p in sorted((ROOT / package).rglob("*.py"))]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    bad = []
    for module, path in _modules(package):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[package] and not any(module.startswith(a) and top == b for a, b in ALLOWED):
                bad.append(f"{module} imports {name}")
            if any(name.startswith(s) for s in FORBIDDEN_SUBMODULES.get(package, ())):
                bad.append(f"{module} imports {name}")
    assert bad == []
