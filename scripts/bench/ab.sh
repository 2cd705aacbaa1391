#!/usr/bin/env bash
# Usage: scripts/bench/ab.sh OLD_BINARY NEW_BINARY [PAIRS]   (default 5 pairs; needs python3)
#
# A/B of two tpllama binaries on cpu.sh's prefill-128, decode-1 and decode-32 workloads (the
# 110m shape, 512-token vocabulary, seeded random weights, one rank), run alternately — old, new,
# old, new — so that a neighbour's burst on a shared machine hits both alike. Prints each
# workload's runs, the medians and the ratio new / old of the medians, and the range of the
# per-pair ratios. Limits are not measured (--no-limits): only the rates are compared.
set -euo pipefail
old=${1:?usage: scripts/bench/ab.sh OLD_BINARY NEW_BINARY [PAIRS]}
new=${2:?usage: scripts/bench/ab.sh OLD_BINARY NEW_BINARY [PAIRS]}
pairs=${3:-5}
source "$(dirname "$0")/env.sh"
common=(--shape 110m --vocab 512 --random-weights --seed 1 --no-limits)
for name in prefill-128 decode-1 decode-32; do
  for i in $(seq "$pairs"); do
    for side in old new; do
      binary=$old
      [[ $side == new ]] && binary=$new
      # shellcheck disable=SC2086  # the workload's flags are words
      mpirun -np 1 "$binary" bench "${common[@]}" ${workload[$name]} --json "$out/$name.$side.$i.json" \
        > /dev/null 2> "$out/$name.$side.$i.log" || { cat "$out/$name.$side.$i.log" >&2; exit 1; }
    done
  done
done
python3 - "$out" "$pairs" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
for name in ["prefill-128", "decode-1", "decode-32"]:
    key = "prefill_tokens_per_second" if name.startswith("prefill") else "decode_tokens_per_second"
    runs = {side: [json.load(open(f"{out}/{name}.{side}.{i}.json"))[key] for i in range(1, pairs + 1)]
            for side in ("old", "new")}
    med = {side: statistics.median(v) for side, v in runs.items()}
    ratios = [n / o for o, n in zip(runs["old"], runs["new"])]
    print(f"{name:12s} old {' '.join(f'{v:7.1f}' for v in runs['old'])}  median {med['old']:7.1f} tok/s")
    print(f"{'':12s} new {' '.join(f'{v:7.1f}' for v in runs['new'])}  median {med['new']:7.1f} tok/s")
    print(f"{'':12s} new/old of the medians {med['new'] / med['old']:.3f}; pair ratios {min(ratios):.3f}-{max(ratios):.3f}")
PY
