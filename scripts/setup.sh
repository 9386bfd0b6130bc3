#!/usr/bin/env bash
# Create .venv with paratune and its test tools, then try to add rocm-origami (AMD's GEMM model).
# Origami needs Debian's HIP packages (root); without them the built-in GEMM model serves and the
# Origami tests are skipped with a reason. Set PARATUNE_REQUIRE_ORIGAMI=1 to make that an error (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
if ! PYTHON=.venv/bin/python bash scripts/install-origami.sh; then
  if [ "${PARATUNE_REQUIRE_ORIGAMI:-0}" = "1" ]; then
    echo "setup: rocm-origami install failed and PARATUNE_REQUIRE_ORIGAMI=1" >&2
    exit 1
  fi
  echo "setup: rocm-origami not installed; the built-in GEMM model will be used" >&2
fi
