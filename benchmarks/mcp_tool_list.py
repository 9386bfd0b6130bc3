"""MCP tool list size: the bytes of the `tools/list` answer exactly as `paratune serve` writes it on stdio,
which every assistant reads into its context before its first call, and how they split between the tools'
descriptions, input schemas and output schemas.

Starts `paratune serve` on the Llama 3 8B example with a fresh ledger, speaks raw JSON-RPC (initialize,
initialized, tools/list) and measures the answer's line. Not a timing: the size is the same every run. Last
line: `tools_list_bytes=N tools=T` (limit 32768, asserted by tests/test_server_jsonrpc.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp_types.version import LATEST_HANDSHAKE_VERSION

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"
PARATUNE = str(Path(sys.executable).parent / "paratune")
LIMIT = 32 * 1024


def tools_list_line() -> bytes:
    """The server's `tools/list` answer, as the line it wrote."""
    requests = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
                    "clientInfo": {"name": "paratune-benchmark", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([PARATUNE, "serve", "--workload", str(WORKLOAD), "--target-cluster", str(CLUSTER),
                                 "--ledger", str(Path(tmp) / "ledger.sqlite")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        proc.stdin.flush()
        try:
            for line in proc.stdout:
                if json.loads(line).get("id") == 1:
                    return line.rstrip(b"\n")
            raise SystemExit(f"paratune serve exited without answering tools/list (exit {proc.wait()})")
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)


def main() -> None:
    line = tools_list_line()
    tools = json.loads(line)["result"]["tools"]

    def part(key: str) -> int:
        return sum(len(json.dumps(t[key], separators=(",", ":")).encode()) for t in tools if key in t)

    for key in ("description", "inputSchema", "outputSchema", "annotations"):
        print(f"{key:>12}: {part(key):7,d} bytes")
    print(f"{'total':>12}: {len(line):7,d} bytes for {len(tools)} tools (limit {LIMIT:,d})")
    print(f"tools_list_bytes={len(line)} tools={len(tools)}")


if __name__ == "__main__":
    main()
