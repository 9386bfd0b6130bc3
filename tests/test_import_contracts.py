"""Imports run one way, floor by floor: each unit below may import only the units its floor names (and
itself), so a new import against the direction fails here. Read from the source with `ast` (relative imports
resolved, imports inside functions included). Every folder imports as paratune.<folder>, never under its bare
name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import ROOT

OURS = ("oracle", "ledger", "planner", "server", "calibration")
# The floors, lowest first: unit -> the units of ours it may import. A module belongs to the longest unit
# that prefixes its name; planner/ has no module outside a unit (a newcomer tells the floor by the folder).
FLOORS: dict[str, set[str]] = {
    "oracle": set(),  # the pure model
    "planner.llm": set(),  # LLM names, keys, bounds, failure classes: shared by the server and the client
    "ledger": {"oracle"},  # storage only: no plotting, no artifact files
    "calibration": {"oracle"},  # the published rows and the fit, beside the ledger on the oracle
    "planner.search": {"oracle", "ledger"},  # the deterministic search over the oracle and the ledger's records
    "planner.launch": {"oracle"},  # a layout as each stack's launch command and files
    # a run on the ledger (scoring with dedupe and budget, measurements, verdict, the run's files and plots)
    "planner.run": {"oracle", "ledger", "planner.search", "planner.launch", "planner.llm"},
    # the MCP server: the oracle, the ledger and the planner's deterministic floors, never the commands
    "server": {"oracle", "ledger", "planner.search", "planner.launch", "planner.run", "planner.llm"},
    # the DSPy client reaches the oracle only through the server's MCP tools, never by import
    "planner.investigator": {"planner.llm"},
    # the commands and the tune orchestration: everything, and the only code that starts the server
    "planner.cli": {"oracle", "ledger", "calibration", "planner.search", "planner.launch", "planner.run",
                    "planner.llm", "server", "planner.investigator"},
}
# third-party packages a floor must not import: the shared LLM code stays free of DSPy (the server imports it)
FORBIDDEN_LIBRARIES = {"planner.llm": ("dspy",), "oracle": ("matplotlib",), "ledger": ("matplotlib",)}


def _module_name(path: Path, root: Path = ROOT) -> str:
    """The logical name of a source file (without the paratune. prefix): oracle/memory/estimate.py ->
    oracle.memory.estimate."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, absolute; relative imports resolved against its package, and the
    paratune. prefix dropped (so oracle.x whether written paratune.oracle.x or ..x)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                if node.module:
                    out.add(".".join([*base, node.module]))
                else:  # `from . import x`: x is a module of that package
                    out |= {".".join([*base, a.name]) for a in node.names}
            elif node.module:
                out.add(node.module)
    return {n.removeprefix("paratune.") for n in out}


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def _unit(module: str) -> str | None:
    """The floor unit a module (or an imported name) belongs to: the longest FLOORS key prefixing it."""
    hits = [u for u in FLOORS if module == u or module.startswith(u + ".")]
    return max(hits, key=len) if hits else None


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def test_every_module_sits_on_a_floor():
    # planner/__init__.py (a docstring naming the floors) is the one module of ours outside a unit
    loose = [m for m in map(_module_name, _sources(*OURS)) if _unit(m) is None and m != "planner"]
    assert loose == []
    assert _imports(ROOT / "planner" / "__init__.py") == set()


def _violations(unit: str, paths: list[Path], root: Path = ROOT) -> list[str]:
    """'module imports name' for each import of ours that `unit`'s floor does not allow (and each library
    it must not use), over the modules of `unit` among `paths`."""
    bad = []
    for path in paths:
        module = _module_name(path, root)
        if _unit(module) != unit:
            continue
        for name in sorted(_imports(path, root)):
            if (_ours(name) and _unit(name) not in FLOORS[unit] | {unit}) or \
                    name.split(".")[0] in FORBIDDEN_LIBRARIES.get(unit, ()):
                bad.append(f"{module} imports {name}")
    return bad


@pytest.mark.parametrize("unit", sorted(FLOORS))
def test_imports_run_down_the_floors(unit):
    assert _violations(unit, _sources(*OURS)) == []


def test_the_floors_are_an_order():
    # each unit imports only units listed before it, so no two units import each other through any chain
    units = list(FLOORS)
    assert [u for i, u in enumerate(units) if not FLOORS[u] <= set(units[:i])] == []


def test_a_violation_is_caught(tmp_path):
    # the check itself can fail: the search reaching up to the server and the run steps, the investigator
    # importing the oracle inside a function, the shared LLM code importing DSPy
    files = {"planner/search/x.py": "from paratune.server.app import build_server\nfrom ..run import steps\n",
             "planner/investigator/y.py": "def f():\n    from paratune.oracle.evaluate import evaluate_config\n",
             "planner/llm/z.py": "import dspy\nfrom . import bounds\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text(text)
    paths = [tmp_path / rel for rel in files]
    assert [v for unit in FLOORS for v in _violations(unit, paths, tmp_path)] == [
        "planner.llm.z imports dspy", "planner.search.x imports planner.run",
        "planner.search.x imports server.app", "planner.investigator.y imports oracle.evaluate"]


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



def test_a_run_without_an_llm_loads_neither_litellm_nor_torch_nor_pyplot(tmp_path):
    # issue 26 (the main job's wall time): an AMD GEMM through Origami's compiled bindings, not its package's
    # torch-based selector; an openai/... model without its key answered without LiteLLM; a plot drawn on the
    # Agg canvas without pyplot. In a fresh interpreter, so no other test's imports count.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from paratune.oracle.performance.gemm_origami import OrigamiGemm, origami_available\n"
        "from paratune.planner.llm.selection import LLMNotConfigured, resolve_llm\n"
        "from paratune.planner.run.plots import figure, savefig\n"
        "if origami_available():\n"
        "    assert OrigamiGemm('mi355x').gemm_ms(4096, 4096, 4096, 'bf16') > 0\n"
        "try:\n"
        "    resolve_llm('openai/gpt-4o')\n"
        "    raise SystemExit('an LLM is configured')\n"
        "except LLMNotConfigured as e:\n"
        "    assert 'needs OPENAI_API_KEY' in str(e), e\n"
        "fig, ax = figure(1, 1, figsize=(2, 2))\n"
        "ax.plot([1, 2], [3, 4])\n"
        "savefig(Path(sys.argv[1]), fig)\n"
        "print(sorted(m for m in ('torch', 'litellm', 'matplotlib.pyplot') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_API_BASE", "LLM_MODEL")}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "plot.png")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]" and (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
