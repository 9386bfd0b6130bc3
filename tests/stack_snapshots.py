"""The real stacks' own code for the conformance tests: where the snapshots are and how to run them.

Not a test module. The snapshots are unmodified copies of the parts of Primus, Megatron-LM and
Megatron-Bridge that read what paratune reads and writes (shared/conformance/README.md: Primus
fd1eeabbad15, Megatron-LM core_v0.16.1, Megatron-Bridge 067f987df0; Apache-2.0). They are test
data, read from where they lie and never copied into the repository: `$PARATUNE_CONFORMANCE_ROOT`,
else `../shared/conformance` beside the clone (where CI lays shared/). Without them the tests that
need them skip with that reason; `scripts/setup.sh` fails under PARATUNE_REQUIRE_ALL=1 (CI) when
they are missing, so CI never passes by skipping them.

The stacks run in a child process each (`tests/stack_runners/`): Megatron-LM's `megatron.training`
must be loaded as a bare package with a stubbed `triton`, and `PrimusParser` writes under its working
directory; neither belongs in the test process. Megatron-LM's runner is started once per test process and
answers every test's request (`--serve`); Primus's runs once per request.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shlex
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = Path(__file__).resolve().parent / "stack_runners"
ENV = "PARATUNE_CONFORMANCE_ROOT"
FOLDERS = {"primus": "primus", "megatron-lm": "megatron-lm", "megatron-bridge": "megatron-bridge"}
# What each snapshot is (its README), named by every test that parses one of its files.
SOURCES = {"primus": "AMD-AGI/Primus@fd1eeabbad15", "megatron-lm": "NVIDIA/Megatron-LM@core_v0.16.1",
           "megatron-bridge": "NVIDIA-NeMo/Megatron-Bridge@067f987df0"}


def conformance_root() -> Path | None:
    """The folder holding the three snapshots, or None."""
    for candidate in (os.environ.get(ENV), ROOT.parent / "shared" / "conformance"):
        if candidate and (Path(candidate) / "primus").is_dir():
            return Path(candidate).resolve()
    return None


def snapshot(stack: str) -> Path:
    """One stack's snapshot folder; skips the test (saying why) when there is none."""
    root = conformance_root()
    if root is None or not (root / FOLDERS[stack]).is_dir():
        pytest.skip(f"no {stack} snapshot: set {ENV} or lay shared/conformance beside the clone "
                    "(CI has it; scripts/setup.sh refuses to finish without it under PARATUNE_REQUIRE_ALL=1)")
    return root / FOLDERS[stack]


def artifact(stack: str, path: Path) -> str:
    """How a test names a file it had a stack parse: the stack at its commit and the file's path in it."""
    base = snapshot(stack)
    shown = path.relative_to(base) if path.is_relative_to(base) else path
    return f"{SOURCES[stack]}:{shown}"


def _run(runner: str, request: dict[str, Any], timeout: float = 600) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, str(RUNNERS / runner)], input=json.dumps(request), text=True,
                          capture_output=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise AssertionError(f"{runner} failed ({done.returncode}): {done.stderr[-2000:]}")
    results: list[dict[str, Any]] = json.loads(lines[-1])
    return results


def primus_parse(experiments: list[Path], module: str = "pre_trainer") -> list[dict[str, Any]]:
    """PrimusParser's merged trainer arguments of each experiment (`primus_parse.py`)."""
    request = {"primus": str(snapshot("primus")), "experiments": [str(e) for e in experiments], "module": module}
    return _run("primus_parse.py", request)


def launch_argv(command: str, user_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """(pretrain_gpt.py's arguments, the environment) of a Megatron-LM launch command, with the user's
    data/tokenizer/optimizer arguments in place of its "$@"."""
    body = command.split('"$@"')[0].replace("\\\n", " ")
    tokens = shlex.split(body)
    script = tokens.index("pretrain_gpt.py")
    launcher = tokens.index("torchrun")
    env = dict(t.split("=", 1) for t in tokens[:launcher])
    return [*tokens[script + 1:], *user_args], env


@cache
def _megatron_runner() -> tuple[subprocess.Popen[str], IO[str]]:
    """`megatron_validate.py --serve`, started once per test process and kept (Megatron-LM's import, torch
    included, is most of a request's time); its stderr in a temporary file, stopped at exit."""
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (open for the runner's life; closed by stop)
    proc = subprocess.Popen([sys.executable, str(RUNNERS / "megatron_validate.py"), "--serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)

    def stop() -> None:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    atexit.register(stop)
    return proc, log


def megatron_validate(cases: list[tuple[list[str], dict[str, str], int]], timeout: float = 600) -> list[dict[str, Any]]:
    """Megatron-LM's `parse_args` + `validate_args` on each (argv, environment, world size)."""
    request = {"megatron_lm": str(snapshot("megatron-lm")),
               "cases": [{"argv": argv, "env": {**env, "WORLD_SIZE": str(world)}, "arch": 9}
                         for argv, env, world in cases]}
    proc, log = _megatron_runner()
    assert proc.stdin is not None and proc.stdout is not None
    line = ""
    if proc.poll() is None:
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        if select.select([proc.stdout], [], [], timeout)[0]:
            line = proc.stdout.readline()
    if not line:
        log.seek(0)
        raise AssertionError(f"megatron_validate.py failed ({proc.poll()}): {log.read()[-2000:]}")
    results: list[dict[str, Any]] = json.loads(line)
    return results
