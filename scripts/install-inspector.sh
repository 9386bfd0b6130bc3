#!/usr/bin/env bash
# Install Node 22 (npm's `node` package ships the binary) and the pinned MCP Inspector into .tools/,
# for tests/test_server_inspector.py. Needs npm on PATH (Debian's `npm` is installed when missing);
# the Inspector itself needs Node >= 22.19, which it gets from .tools/ whatever the system Node is.
set -euo pipefail
cd "$(dirname "$0")/.."
INSPECTOR_VERSION=2.12.0
if ! command -v npm >/dev/null 2>&1; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
fi
mkdir -p .tools
npm install --prefix .tools --no-audit --no-fund --loglevel=error \
  "node@22" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
PATH="$PWD/.tools/node_modules/.bin:$PATH" node --version
echo "install-inspector: Inspector $INSPECTOR_VERSION in .tools/"
