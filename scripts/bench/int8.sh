#!/usr/bin/env bash
# Usage: scripts/bench/int8.sh [ROUNDS]   (default 3; needs build/tpllama and python3)
#
# --dtype int8 against f32 and bf16 on cpu.sh's prefill-128, decode-1 and decode-32 workloads
# (the 110m shape, 512-token vocabulary, seeded random weights, one rank), the three dtypes run in
# turn within each round so that a neighbour's burst on a shared machine hits them alike. Prints
# the medians and the ratios the int8 work is measured by: decode int8/bf16 (the targets: at least
# 1.8 at 1 sequence, 1.3 at 32) and prefill int8/f32 (at least 1.5).
set -euo pipefail
rounds=${1:-3}
source "$(dirname "$0")/env.sh"
common=(--shape 110m --vocab 512 --random-weights --seed 1 --no-limits)
for name in prefill-128 decode-1 decode-32; do
  for i in $(seq "$rounds"); do
    for dtype in f32 bf16 int8; do
      # shellcheck disable=SC2086  # the workload's flags are words
      mpirun -np 1 "$bin" bench "${common[@]}" ${workload[$name]} --dtype "$dtype" \
        --json "$out/$name.$dtype.$i.json" > /dev/null 2> "$out/$name.$dtype.$i.log" ||
        { cat "$out/$name.$dtype.$i.log" >&2; exit 1; }
    done
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for name, base in [("prefill-128", "f32"), ("decode-1", "bf16"), ("decode-32", "bf16")]:
    key = "prefill_tokens_per_second" if name.startswith("prefill") else "decode_tokens_per_second"
    rate = {d: [json.load(open(f"{out}/{name}.{d}.{i}.json"))[key] for i in range(1, rounds + 1)]
            for d in ("f32", "bf16", "int8")}
    med = {d: statistics.median(v) for d, v in rate.items()}
    for d in ("f32", "bf16", "int8"):
        print(f"{name:12s} {d:5s} {' '.join(f'{v:8.1f}' for v in rate[d])}  median {med[d]:8.1f} tok/s")
    per_round = [i8 / b for i8, b in zip(rate["int8"], rate[base])]
    print(f"{'':12s} int8/{base} of the medians {med['int8'] / med[base]:.3f}; "
          f"per round {min(per_round):.3f}-{max(per_round):.3f}; int8/f32 {med['int8'] / med['f32']:.3f}")
PY
