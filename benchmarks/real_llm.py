"""The full LLM loop against an OpenAI-compatible endpoint: `paratune tune` on the Llama 3 8B example
(seed plan, then planner + ReAct rounds over `paratune serve`), then what the phase did.

  benchmarks/real_llm.py --base-url http://127.0.0.1:8080/v1 --model openai/local   # e.g. llama.cpp's server
  benchmarks/real_llm.py --hostile garbage|silent|500|dead                         # a built-in bad endpoint

Prints LLM trials evaluated, LLM calls (answered / failed by class), tokens, the phase's wall time and its
stop reason. Last line: `llm_trials=N calls_ok=A calls_failed=F prompt_tokens=P completion_tokens=C
phase_s=S`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.planner.investigator.phase_types import InvestigatorOptions
from paratune.planner.tune_run import TuneOptions, tune

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (OPENAI_API_BASE)")
    parser.add_argument("--model", default="openai/local", help="LiteLLM model name (default: %(default)s)")
    parser.add_argument("--hostile", choices=("garbage", "silent", "500", "dead"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per LLM call")
    parser.add_argument("--phase-timeout", type=float, default=600.0)
    args = parser.parse_args()
    os.environ["OPENAI_API_BASE"] = hostile(args.hostile) if args.hostile else (args.base_url or
                                                                                 os.environ.get("OPENAI_API_BASE", ""))
    os.environ["LLM_MODEL"] = args.model
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        options = TuneOptions(seed_budget=6, investigator=InvestigatorOptions(
            rounds=args.rounds, calls_per_round=6, call_timeout_s=args.timeout, retries=0,
            phase_timeout_s=args.phase_timeout))
        outcome = tune(load_workload(WORKLOAD), load_cluster(CLUSTER), out, options, workload_file=str(WORKLOAD),
                       cluster_file=str(CLUSTER), note=lambda line: print(line, file=sys.stderr))
        with sqlite3.connect(out / "ledger.sqlite") as conn:
            calls = conn.execute("SELECT outcome, prompt_tokens, completion_tokens FROM llm_calls").fetchall()
    report = outcome.investigation
    classes = Counter(c[0] for c in calls)
    print(f"llm phase: {outcome.llm_phase}")
    print(f"calls by outcome: {json.dumps(dict(classes))}")
    ok = classes.get("ok", 0)
    print(f"llm_trials={report.llm_trials if report else 0} calls_ok={ok} calls_failed={len(calls) - ok} "
          f"prompt_tokens={sum(c[1] for c in calls)} completion_tokens={sum(c[2] for c in calls)} "
          f"phase_s={outcome.timings_s.get('llm_s', 0.0):.1f}")


if __name__ == "__main__":
    main()
