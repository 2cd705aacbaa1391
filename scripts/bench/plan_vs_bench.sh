#!/usr/bin/env bash
# Usage: scripts/bench/plan_vs_bench.sh [REPEATS]   (default 1; needs build/tpllama and python3)
#
# Checks `tpllama plan` against measured `tpllama bench` runs on this machine: the 110m shape
# (vocab 512, f32, random weights) on two ranks x one thread laid out as tp=2 and as pp=2, for
# decode at 1 and 32 sequences and prefill of 128-token prompts one at a time. The plan is given
# the limits bench measures (per rank: half the node's read bandwidth and GEMM peak) and the shm
# link; the table shows each layout's estimate and measurement and whether the two rankings agree.
set -euo pipefail
repeats=${1:-1}
source "$(dirname "$0")/env.sh"
model=(--shape 110m --vocab 512)
for name in decode-1 decode-32 prefill-128; do
  for layout in tp pp; do
    for i in $(seq "$repeats"); do
      # shellcheck disable=SC2086
      mpirun -np 2 "$bin" bench "${model[@]}" --random-weights --threads 1 --$layout 2 ${workload[$name]} \
        --json "$out/$name.$layout.$i.json" > /dev/null 2> "$out/log" || { cat "$out/log" >&2; exit 1; }
    done
  done
done

python3 - "$out" "$repeats" "$bin" <<'PY'
import json, statistics, subprocess, sys
out, repeats, binary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows, agreed = [], 0
for name, seqs, output in (("decode-1", 1, 128), ("decode-32", 32, 128), ("prefill-128", 1, 1)):
    key = "prefill_tokens_per_second" if name.startswith("prefill") else "decode_tokens_per_second"
    runs = {l: [json.load(open(f"{out}/{name}.{l}.{i}.json")) for i in range(1, repeats + 1)] for l in ("tp", "pp")}
    measured = {l: statistics.median(r[key] for r in runs[l]) for l in runs}
    every = runs["tp"] + runs["pp"]
    bandwidth = statistics.median(r["machine"]["read_bandwidth_bytes_per_second"] for r in every) / 2
    flops = statistics.median(r["machine"]["gemm_flops_per_second"] for r in every) / 2
    subprocess.run([binary, "plan", "--shape", "110m", "--vocab", "512", "--gpu", "cpu", "--nodes", "1",
                    "--gpus-per-node", "2", "--intra", "shm", "--dtype", "f32", "--memory", "8GiB",
                    "--bandwidth", str(bandwidth), "--flops", str(flops), "--input-len", "128",
                    "--output-len", str(output), "--max-seqs", str(seqs), "--json", f"{out}/plan.json"],
                   check=True, capture_output=True)
    plans = json.load(open(f"{out}/plan.json"))
    estimate = {("tp" if p["tp"] == 2 else "pp"): p[key] for p in plans}
    plan_first = "tp" if estimate["tp"] > estimate["pp"] else "pp" if estimate["pp"] > estimate["tp"] else "tie"
    bench_first = "tp" if measured["tp"] > measured["pp"] else "pp"
    agreed += plan_first == bench_first
    rows.append((name, f'{estimate["tp"]:.0f}', f'{measured["tp"]:.1f}', f'{estimate["pp"]:.0f}', f'{measured["pp"]:.1f}',
                 plan_first + "2", bench_first + "2", "yes" if plan_first == bench_first else "NO"))
head = ("workload (tok/s)", "tp2 plan", "tp2 bench", "pp2 plan", "pp2 bench", "plan ranks first", "bench ranks first", "agree")
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
for row in [head] + rows:
    print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
print(f"rankings agree on {agreed} of {len(rows)} workloads (bench: median of {repeats})")
sys.exit(0 if agreed == len(rows) else 1)
PY
