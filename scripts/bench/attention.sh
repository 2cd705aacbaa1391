#!/usr/bin/env bash
# Usage: scripts/bench/attention.sh [THREADS]   (needs build/tests/attention_bench)
#
# The CPU attention of one decode step on its own (attention_bench), 32 sequences, THREADS threads
# (default 2): the 110m shape (12 heads, 12 kv heads, head_dim 64) at a 192-position context (the
# middle of bench's 128 + 128 decode), and 12 query heads over 4 kv heads at 2,048 and 8,192
# positions, each with an f32 and a bf16 cache, with each sequence's blocks side by side (as after
# its prefill) and shuffled over the pool (as a long run's decode leaves them). Prints per run the
# time a layer, the KV bytes read a second (each key and value once) and that rate against a plain
# stream over the same pools. Blocks of 64 positions (the engine's on a CPU), and the shuffled
# 2,048-position runs again in blocks of 16 (its GPU default) to show what block size buys. Last,
# prefill chunks.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/tests/attention_bench
[[ -x $bin ]] || { echo "no $bin: build first (scripts/setup.sh --no-demo)" >&2; exit 2; }
threads=${1:-2}
for order in ordered shuffled; do
  for kv in f32 bf16; do
    "$bin" 32 192 12 12 64 "$kv" "$threads" 12 1 "$order"
    "$bin" 32 2048 12 4 64 "$kv" "$threads" 2 1 "$order"
    "$bin" 32 8192 12 4 64 "$kv" "$threads" 1 1 "$order"
  done
done
for kv in f32 bf16; do
  "$bin" 32 2048 12 4 64 "$kv" "$threads" 2 1 shuffled 16
done
# Prefill: a 2,048-token chunk of one sequence that ends at 8,192 positions (the engine's chunk of
# --max-batch-tokens 2048), 12/4 heads; about 45 GFLOP a layer (4 · tokens · positions seen ·
# heads · head_dim).
for kv in f32 bf16; do
  "$bin" 1 8192 12 4 64 "$kv" "$threads" 1 2048
done
