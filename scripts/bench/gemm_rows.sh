#!/usr/bin/env bash
# Usage: scripts/bench/gemm_rows.sh [gemm_rows_bench flags]   (needs build/tests/gemm_rows_bench)
#
# The CPU GEMM's time per row of x at 1 to 32 rows on six layers of the 110m shape (one pp=2
# stage's weights), from memory, against its two bounds measured in the same run: streaming the
# weights, and the same products with the weights in cache. With no flags: f32 on one thread (what
# each rank of the pp=2 and tp=2 rows of cpu.sh runs), then on two threads. With flags: one
# run with them (--layers N, --threads N, --dtype f32|bf16, --repeats N, --rows 1,8,16).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/tests/gemm_rows_bench
[[ -x $bin ]] || { echo "no $bin: build first (scripts/setup.sh --no-demo)" >&2; exit 2; }
if (( $# )); then
  exec "$bin" "$@"
fi
"$bin" --threads 1
echo
"$bin" --threads 2
