#!/usr/bin/env bash
# Usage: scripts/bench_cpu.sh [REPEATS]   (default 3; needs build/tpllama and python3)
#
# The standard CPU sweep of issue 5 on the 110m shape with a 512-token vocabulary and seeded random
# weights: prefill of 128-token prompts, decode at 1 / 8 / 32 / 128 sequences (128 in, 128 out),
# bf16 decode at batch 1, and decode at 32 sequences on one rank x 1 thread, tp=2 and pp=2 (two
# ranks x 1 thread). Every row is the median of REPEATS runs, each of which measures the machine's
# read bandwidth and GEMM peak itself; the fractions are against the limits of the same run.
set -euo pipefail
repeats=${1:-3}
source "$(dirname "$0")/bench_env.sh"
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
run decode-128 1 --prompts 128 --input-len 128 --output-len 128
run decode-32-1x1 1 --prompts 32 --input-len 128 --output-len 128 --threads 1
run decode-32-tp2 2 --prompts 32 --input-len 128 --output-len 128 --threads 1 --tp 2
run decode-32-pp2 2 --prompts 32 --input-len 128 --output-len 128 --threads 1 --pp 2

python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
names = open(f"{out}/order").read().split()
def med(values): return statistics.median(values)
rows = []
for name in names:
    runs = [json.load(open(f"{out}/{name}.{i}.json")) for i in range(1, repeats + 1)]
    bw = med([r["machine"]["read_bandwidth_bytes_per_second"] for r in runs]) / 1e9
    peak = med([r["machine"]["gemm_flops_per_second"] for r in runs]) / 1e9
    if name.startswith("prefill"):
        metric, value = "prefill tok/s", med([r["prefill_tokens_per_second"] for r in runs])
        frac = f'{100 * med([r["prefill_gemm_fraction"] for r in runs]):.1f}% of GEMM peak'
    else:
        metric, value = "decode tok/s", med([r["decode_tokens_per_second"] for r in runs])
        frac = f'{100 * med([r["decode_bandwidth_fraction"] for r in runs]):.1f}% of bandwidth'
    r0 = runs[0]["ranks"][0]
    coll = med([r["ranks"][0]["collective_seconds"] / max(r["elapsed_seconds"], 1e-9) for r in runs])
    lay = runs[0]["layout"]
    rows.append((name, f'{lay["ranks"]}x{lay["threads_per_rank"]} tp{lay["tp"]} pp{lay["pp"]}', runs[0]["dtype"],
                 metric, f"{value:.1f}", frac, f"{100 * coll:.1f}%", f"{bw:.1f}", f"{peak:.1f}"))
head = ("workload", "ranks x threads", "dtype", "metric", f"median of {repeats}", "roofline", "rank 0 collectives",
        "read GB/s", "GEMM GFLOP/s")
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
for row in [head] + rows:
    print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
PY
