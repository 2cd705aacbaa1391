#!/usr/bin/env bash
# Usage: scripts/bench/cpu.sh [REPEATS]   (default 3; needs build/tpllama and python3)
#
# The standard CPU sweep of issue 5 on the 110m shape with a 512-token vocabulary and seeded random
# weights: prefill of 128-token prompts, decode at 1 / 8 / 32 / 128 sequences (128 in, 128 out),
# bf16 decode at batch 1, decode at 32 sequences with a bf16 KV cache, and decode at 32 sequences
# on one rank x 1 thread, tp=2 and pp=2 (two ranks x 1 thread), with one rank x 1 thread at 16
# sequences (what each pp=2 stage runs: its ceiling). Every row is the median of REPEATS
# runs, each of which measures the machine's read bandwidth and GEMM peak itself; the fractions are
# against the limits of the same run.
set -euo pipefail
repeats=${1:-3}
source "$(dirname "$0")/env.sh"
common=(--shape 110m --vocab 512 --random-weights --seed 1)

run() {  # name ranks args...
  local name=$1 np=$2
  shift 2
  for i in $(seq "$repeats"); do
    mpirun -np "$np" "$bin" bench "${common[@]}" --json "$out/$name.$i.json" "$@" > /dev/null 2> "$out/$name.$i.log" ||
      { cat "$out/$name.$i.log" >&2; exit 1; }
  done
  echo "$name" >> "$out/order"
}

run prefill-128 1 --prompts 8 --max-seqs 1 --input-len 128 --output-len 1
run decode-1 1 --prompts 1 --input-len 128 --output-len 128
run decode-1-bf16 1 --prompts 1 --input-len 128 --output-len 128 --dtype bf16
run decode-8 1 --prompts 8 --input-len 128 --output-len 128
run decode-32 1 --prompts 32 --input-len 128 --output-len 128
run decode-32-kv-bf16 1 --prompts 32 --input-len 128 --output-len 128 --kv-dtype bf16
run decode-128 1 --prompts 128 --input-len 128 --output-len 128
run decode-32-1x1 1 --prompts 32 --input-len 128 --output-len 128 --threads 1
run decode-16-1x1 1 --prompts 16 --input-len 128 --output-len 128 --threads 1
run decode-32-tp2 2 --prompts 32 --input-len 128 --output-len 128 --threads 1 --tp 2
run decode-32-pp2 2 --prompts 32 --input-len 128 --output-len 128 --threads 1 --pp 2

python3 scripts/bench/table.py "$out" "$repeats"
