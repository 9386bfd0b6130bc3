#!/usr/bin/env bash
# Install Node 22 (npm's `node` package ships the binary) and the pinned MCP Inspector into .tools/,
# for tests/test_server_inspector.py. Needs only npm on PATH; the Inspector needs Node >= 22.19.
set -euo pipefail
cd "$(dirname "$0")/.."
INSPECTOR_VERSION=2.12.0
mkdir -p .tools
npm install --prefix .tools --no-audit --no-fund --loglevel=error \
  "node@22" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
PATH="$PWD/.tools/node_modules/.bin:$PATH" node --version
echo "install-inspector: Inspector $INSPECTOR_VERSION in .tools/"
