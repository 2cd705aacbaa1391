#!/usr/bin/env bash
# Usage: scripts/bench/probe.sh [PAIRS] [SHAPE] [DTYPE]
#
# Whether bench's probe of the machine (read bandwidth and GEMM peak on every core; on the CPU after
# the workload, which it must not touch) changes the workload's figures: env.sh's decode-1, decode-32 and prefill-128
# workloads on seeded random weights of SHAPE (default 110m) held as DTYPE (default int8), 2
# threads, each run with the probe and with --no-limits, alternating in ABBA order (PAIRS of each,
# default 4).
# Prints each run's prefill and decode rates and the probe's figures, then per workload the median
# with/without ratio of each rate and its range: within the machine's noise when the probe leaves
# nothing behind. Also says whether any engine rate beat the probe's limit (decode's bytes read per
# second above the read bandwidth, prefill's FLOP/s above the GEMM peak), which a right probe never
# lets happen.
set -euo pipefail
source "$(dirname "$0")/env.sh"
pairs=${1:-4}
shape=${2:-110m}
dtype=${3:-int8}
for name in decode-1 decode-32 prefill-128; do
  for ((i = 1; i <= pairs; i++)); do
    order="with without"  # ABBA: what a run leaves the kernel (warm huge pages) favours the next
    ((i % 2 == 0)) && order="without with"
    for probe in $order; do
      flags=""
      [ "$probe" = without ] && flags="--no-limits"
      # shellcheck disable=SC2086
      "$bin" bench --shape "$shape" --random-weights --dtype "$dtype" --threads 2 \
        ${workload[$name]} $flags --json "$out/$name-$probe-$i.json" > /dev/null 2>&1
    done
  done
done
python3 - "$out" "$pairs" <<'PY'
import json, statistics, sys
d, pairs = sys.argv[1], int(sys.argv[2])
def get(j, *keys):
    for k in keys:
        if not isinstance(j, dict) or j.get(k) is None:
            return None
        j = j[k]
    return j
beaten = []
for name in ("decode-1", "decode-32", "prefill-128"):
    ratios = {"prefill": [], "decode": []}
    for i in range(1, pairs + 1):
        runs = {p: json.load(open(f"{d}/{name}-{p}-{i}.json")) for p in ("with", "without")}
        line = []
        for p, j in runs.items():
            pre = get(j, "prefill_tokens_per_second")
            dec = get(j, "decode_tokens_per_second")
            line.append(f"{p}: prefill {pre or 0:8.1f} decode {dec or 0:7.1f} tok/s")
        w = runs["with"]
        bw = get(w, "machine", "read_bandwidth_bytes_per_second")
        peak = get(w, "machine", "gemm_flops_per_second")
        line.append(f"probe: read {bw / 1e9 if bw else 0:.1f} GB/s, GEMM {peak / 1e9 if peak else 0:.0f} GFLOP/s")
        for frac in ("decode_bandwidth_fraction", "prefill_gemm_fraction"):
            v = get(w, frac)
            if v is not None and v > 1:
                beaten.append(f"{name} run {i}: {frac} {v:.2f}")
        print(f"{name} pair {i}: " + "; ".join(line))
        for key, phase in (("prefill_tokens_per_second", "prefill"),
                           ("decode_tokens_per_second", "decode")):
            a, b = get(runs["with"], key), get(runs["without"], key)
            if a and b:
                ratios[phase].append(a / b)
    for phase, r in ratios.items():
        if r:
            print(f"  {name} {phase}: with/without probe median {statistics.median(r):.3f} "
                  f"(range {min(r):.3f}-{max(r):.3f}, {len(r)} pairs)")
print("engine rates above the probe's limits: " + (", ".join(beaten) if beaten else "none"))
PY
