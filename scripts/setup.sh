#!/usr/bin/env bash
# Create .venv with paratune, its test tools, torch (benchmark mode) and DSPy + LiteLLM (the LLM
# phase), then add the two tools that come from outside PyPI wheels: rocm-origami (AMD's GEMM model,
# built with Debian's HIP packages) and the MCP Inspector CLI (npm, with Node 22). Each is optional
# for a user: without it the built-in GEMM roofline serves / the Inspector test is skipped, with the
# reason shown. CI sets PARATUNE_REQUIRE_ALL=1 to make a failed optional install an error.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The editable install follows the code; what it builds (the package's dependencies and the pipeline timeline's
# loop, compiled by setup.py with gcc and the Python headers) is redone only when what it is built from changed
# or the compiled loop is missing (a re-run otherwise spends ~10 s recompiling the same C). Without the compiled
# loop the oracle is right but its timelines run interpreted, 33 to 170 times slower (docs/install.md).
compiled() { .venv/bin/python -c "import sys; from paratune.oracle.performance import timeline; sys.exit(not timeline.compiled)" 2>/dev/null; }
built_from=$(cat pyproject.toml setup.py oracle/performance/timeline.py | sha256sum)
if [ "$(cat .venv/.paratune-built-from 2>/dev/null)" != "$built_from" ] || ! compiled; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,benchmark,llm]"
  echo "$built_from" > .venv/.paratune-built-from
fi
if ! compiled; then
  if [ "${PARATUNE_REQUIRE_ALL:-0}" = "1" ]; then
    echo "setup: the timeline extension did not compile and PARATUNE_REQUIRE_ALL=1" >&2
    exit 1
  fi
  echo "setup: the timeline extension did not compile (no C compiler?); timelines run interpreted" >&2
fi
# The type checker reads the import names the code uses (paratune.<folder>) from links to the folders:
# mypy does not run the editable install's import hook.
mkdir -p .venv/typecheck/paratune
for pkg in oracle ledger planner server calibration; do ln -sfn "../../../$pkg" ".venv/typecheck/paratune/$pkg"; done

optional() {  # optional NAME SCRIPT: run an install script; fatal only when PARATUNE_REQUIRE_ALL=1
  if ! PYTHON=.venv/bin/python bash "$2"; then
    if [ "${PARATUNE_REQUIRE_ALL:-0}" = "1" ]; then
      echo "setup: $1 install failed and PARATUNE_REQUIRE_ALL=1" >&2
      exit 1
    fi
    echo "setup: $1 not installed; see the README for what that changes" >&2
  fi
}
optional rocm-origami scripts/install-origami.sh
optional "MCP Inspector" scripts/install-inspector.sh

# The conformance tests run the real stacks' own parsers (Primus, Megatron-LM, Megatron-Bridge) from
# unmodified snapshots that are test data, not project code, and are not on any package registry: they
# are read where they lie, ../shared/conformance beside the clone (CI lays shared/ there) or
# $PARATUNE_CONFORMANCE_ROOT (tests/stack_snapshots.py). Their Python needs are the test extra's
# (megatron-core 0.16.1, torch, PyYAML). Without them those tests skip with the reason; CI must not.
conformance="${PARATUNE_CONFORMANCE_ROOT:-../shared/conformance}"
for stack in primus megatron-lm megatron-bridge; do
  if [ ! -d "$conformance/$stack" ]; then
    if [ "${PARATUNE_REQUIRE_ALL:-0}" = "1" ]; then
      echo "setup: no $stack snapshot under $conformance (set PARATUNE_CONFORMANCE_ROOT) and PARATUNE_REQUIRE_ALL=1" >&2
      exit 1
    fi
    echo "setup: no $stack snapshot under $conformance: its conformance tests will skip" >&2
  fi
done
exit 0
