#!/usr/bin/env bash
# Installs the official OpenAI SDK (npm `openai`, pinned) into DIR/node_modules for the HTTP
# tests (ctest runs it as the http_npm fixture); a no-op when that version is there already.
# Needs node >= 18 (the machines have NodeSource's 20) and npm's registry. Without node at
# all (the GPU machine) it exits 77, which ctest reports as skipped, and the SDK test skips
# saying why; a failing install fails.
# Usage: bash tests/serve/http/npm_setup.sh DIR
set -euo pipefail
dir="$1"
# The last 6.x: 7.x wants node >= 22.
version=6.49.0
pkg="$dir/node_modules/openai/package.json"
if [ -f "$pkg" ] && grep -q "\"version\": \"$version\"" "$pkg"; then
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "npm_setup: no node/npm on this machine: the OpenAI SDK test is skipped" >&2
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "npm_setup: node >= 18 is needed for the OpenAI SDK tests (found: $(node --version 2>&1 || echo none))" >&2
  exit 1
fi
mkdir -p "$dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save --no-package-lock --loglevel=error "openai@$version"
