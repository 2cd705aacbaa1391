#!/usr/bin/env bash
# Usage: scripts/bench/prefix_cache.sh [PAIRS]
#
# Prefix caching on against off, alternating (PAIRS runs of each, default 3), on the 110m shape
# (vocab 512, random weights, one rank), for three workloads:
#   few-shot:  128 prompts = one 512-token shared prefix + 64 tokens of their own, 16 generated
#   choices:   32 contexts (a 448-token shared prefix + 64 of their own) x 4 scored 8-token continuations
#   unshared:  64 prompts of 128 tokens with nothing in common, 32 generated (the bookkeeping's cost)
# Prints each run's requests/s and hit rate, then per workload the median on/off ratio and its range.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/env.sh
pairs=${1:-3}
declare -A args=(
  [few-shot]="--prompts 128 --shared-prefix 512 --input-len 64 --output-len 16"
  [choices]="--prompts 32 --shared-prefix 448 --input-len 64 --output-len 8 --continuations 4"
  [unshared]="--prompts 64 --input-len 128 --output-len 32"
)
for w in few-shot choices unshared; do
  for ((i = 1; i <= pairs; i++)); do
    for pc in on off; do
      json="$out/prefix-$w-$pc-$i.json"
      # shellcheck disable=SC2086
      mpirun -np 1 "$bin" bench --shape 110m --vocab 512 --random-weights --no-limits \
        --prefix-caching "$pc" ${args[$w]} --json "$json" > /dev/null 2>&1
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); p=j['prefix_cache']; print(f'{sys.argv[2]:9} {sys.argv[3]:3} run {sys.argv[4]}: {j[\"requests_per_second\"]:8.3f} req/s, hit rate {100*(p[\"hit_rate\"] or 0):5.1f}%')" "$json" "$w" "$pc" "$i"
    done
  done
  python3 - "$out" "$w" "$pairs" <<'PY'
import json, statistics, sys
d, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rate = lambda pc, i: json.load(open(f"{d}/prefix-{w}-{pc}-{i}.json"))["requests_per_second"]
ratios = [rate("on", i) / rate("off", i) for i in range(1, n + 1)]
on = statistics.median(rate("on", i) for i in range(1, n + 1))
off = statistics.median(rate("off", i) for i in range(1, n + 1))
print(f"{w}: on/off = {on / off:.3f} (medians {on:.3f} / {off:.3f} req/s; pairs {min(ratios):.3f}-{max(ratios):.3f})")
PY
done
