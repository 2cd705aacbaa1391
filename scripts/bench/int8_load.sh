#!/usr/bin/env bash
# Usage: scripts/bench/int8_load.sh [SHAPE] [ROUNDS]   (default 110m, 3; needs build/tpllama, python3)
#
# What an int8 checkpoint saves at load: a seeded random model of SHAPE (32000-token vocabulary,
# the stories260K tokenizer) written by `convert` as f32, bf16 and int8, then `run` on one
# one-token prompt, one rank, --dtype int8 on each (the int8 checkpoint packs its matrices as
# stored; the others are quantized at load, through an f32 pass). Prints each file's size and the
# medians of the load time ("loaded in" of the log) and of the process's peak RSS (the mapped file's
# pages it touched included; a 64 MiB KV cache, so that the weights dominate it).
set -euo pipefail
shape=${1:-110m}
rounds=${2:-3}
source "$(dirname "$0")/env.sh"
tok=models/stories260K/tok512.model
for dtype in f32 bf16 int8; do
  "$bin" convert --from random --shape "$shape" --vocab 32000 --seed 1 --tokenizer "$tok" --dtype "$dtype" \
    --out "$out/$dtype" > /dev/null 2>&1
done
echo '{"id": 0, "prompt": "Once upon a time", "max_tokens": 1}' > "$out/prompt.jsonl"
for i in $(seq "$rounds"); do
  for dtype in f32 bf16 int8; do
    /usr/bin/time -f "%M" -o "$out/rss.$dtype.$i" mpirun -np 1 "$bin" run --model "$out/$dtype" --dtype int8 --kv-cache-memory 64MiB --max-model-len 256 \
      --input "$out/prompt.jsonl" --output "$out/out.$dtype.$i.jsonl" > /dev/null 2> "$out/log.$dtype.$i" ||
      { cat "$out/log.$dtype.$i" >&2; exit 1; }
  done
done
python3 - "$out" "$rounds" "$shape" <<'PY'
import os, re, statistics, sys
out, rounds, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"shape {shape}, run --dtype int8 on one rank, medians of {rounds} rounds")
print(f"{'checkpoint':<12}{'file MiB':>10}{'load s':>9}{'peak RSS MiB':>14}")
rows = {}
for d in ("f32", "bf16", "int8"):
    size = os.path.getsize(f"{out}/{d}/model.safetensors") / 2**20
    load = statistics.median(float(re.search(r"loaded in ([0-9.]+) s", open(f"{out}/log.{d}.{i}").read()).group(1))
                             for i in range(1, rounds + 1))
    rss = statistics.median(int(open(f"{out}/rss.{d}.{i}").read().split()[-1]) for i in range(1, rounds + 1)) / 1024
    rows[d] = (size, load, rss)
    print(f"{d:<12}{size:>10.1f}{load:>9.2f}{rss:>14.1f}")
for d in ("f32", "bf16"):
    print(f"int8 checkpoint against {d}: load {rows[d][1] / rows['int8'][1]:.2f}x faster, "
          f"peak RSS {rows[d][2] / rows['int8'][2]:.2f}x smaller, file {rows[d][0] / rows['int8'][0]:.2f}x smaller")
PY
