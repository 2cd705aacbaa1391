#!/usr/bin/env bash
# Usage: scripts/bench/dp.sh [REPEATS]
#
# Data parallelism on this machine's cores, with `run` on the 110m demo model (random weights,
# made here), each configuration REPEATS times (default 3), medians compared as ratios:
#   dp1-2t      one replica, two threads                         (mpirun -np 1 --threads 2)
#   dp2-1t      two replicas, one thread each                    (mpirun -np 2 --dp 2)
#   halves      two separate jobs on the input's halves, one core each, at once
#   dp2-slowed  dp2-1t with a busy loop pinned to replica 1's core (it runs at about half speed)
#   halves-slowed  the halves with the same busy loop on the second job's core
# on 256 requests of 32 generated tokens (--max-seqs 16, so requests wait for room), and the
# routing of a 5-shot scoring workload (32 tasks of a 5-shot header, 3 questions each scored with 4
# continuations, the tasks interleaved) at dp 2 with a KV cache too small for every header on both
# replicas (--kv-cache-memory 400MiB): --dp-routing prefix against least-loaded, with the prefix
# cache's hit rate. Prints each run's seconds, then the ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/env.sh
repeats=${1:-3}
model=$out/model
scripts/data/make_demo_model.sh "$model" 110m > /dev/null
python3 - "$out" <<'PY'
import json, random, sys
out = sys.argv[1]
prompts = [l.strip() for l in open("models/demo/prompts.txt") if l.strip()]
with open(f"{out}/gen.jsonl", "w") as f, open(f"{out}/a.jsonl", "w") as a, open(f"{out}/b.jsonl", "w") as b:
    for i in range(256):
        line = json.dumps({"id": i, "prompt": prompts[i % len(prompts)], "max_tokens": 32,
                           "ignore_eos": True}) + "\n"
        f.write(line)
        (a if i < 128 else b).write(line)
rng = random.Random(7)
words = open("models/demo/corpus.txt").read().split()
def sentence(n):
    start = rng.randrange(len(words) - n)
    return " ".join(words[start:start + n])
headers = ["".join(f"Question: {sentence(12)}?\nAnswer: {sentence(6)}\n\n" for _ in range(5))
           for _ in range(32)]
questions = [(t, q) for t in range(32) for q in range(3)]
rng.shuffle(questions)
with open(f"{out}/shots.jsonl", "w") as f:
    for n, (t, q) in enumerate(questions):
        context = headers[t] + f"Question: {sentence(10)}?\nAnswer:"
        for c in range(4):
            f.write(json.dumps({"id": f"{n}-{c}", "context": context,
                                "continuation": " " + sentence(4)}) + "\n")
PY

flags="--model $model --max-seqs 16 --overwrite"
hog=""
start_hog() { taskset -c "$1" bash -c 'while :; do :; done' & hog=$!; }
stop_hog() { kill "$hog" 2> /dev/null || true; wait "$hog" 2> /dev/null || true; hog=""; }
trap 'stop_hog; rm -rf "$out"' EXIT
seconds() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['elapsed_seconds'])" "$1"; }
now() { date +%s.%N; }

# One configuration: prints its seconds (wall time of the job, or of the slower half).
run_config() {
  case $1 in
    dp1-2t)
      mpirun -np 1 -x TPLLAMA_WIDENED=1 --bind-to none "$bin" run $flags --threads 2 \
        --input "$out/gen.jsonl" --output "$out/o.jsonl" --stats "$out/s.json" > /dev/null 2>&1
      seconds "$out/s.json" ;;
    dp2-1t | dp2-slowed)
      [ "$1" = dp2-slowed ] && start_hog 1
      mpirun -np 2 "$bin" run $flags --dp 2 --threads 1 \
        --input "$out/gen.jsonl" --output "$out/o.jsonl" --stats "$out/s.json" > /dev/null 2>&1
      stop_hog
      seconds "$out/s.json" ;;
    halves | halves-slowed)
      [ "$1" = halves-slowed ] && start_hog 1
      local t0
      t0=$(now)
      for half in a b; do
        core=$([ $half = a ] && echo 0 || echo 1)
        mpirun -np 1 -x TPLLAMA_WIDENED=1 --bind-to none taskset -c "$core" "$bin" run $flags \
          --threads 1 --input "$out/$half.jsonl" --output "$out/o_$half.jsonl" > /dev/null 2>&1 &
      done
      wait -n; wait -n
      python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(now)"
      stop_hog ;;
    prefix | least-loaded)
      mpirun -np 2 "$bin" run $flags --dp 2 --threads 1 --dp-routing "$1" --kv-cache-memory 400MiB \
        --input "$out/shots.jsonl" --output "$out/o.jsonl" --stats "$out/s.json" > /dev/null 2>&1
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['elapsed_seconds'], round(100*j['prefix_cache']['hit_rate'],1))" "$out/s.json" ;;
  esac
}

declare -A results
for config in dp1-2t dp2-1t halves dp2-slowed halves-slowed prefix least-loaded; do
  for ((i = 1; i <= repeats; i++)); do
    r=$(run_config "$config")
    echo "$config run $i: $r"
    results[$config]+="$r;"
  done
done
python3 - "${results[dp1-2t]}" "${results[dp2-1t]}" "${results[halves]}" \
  "${results[dp2-slowed]}" "${results[halves-slowed]}" "${results[prefix]}" \
  "${results[least-loaded]}" <<'PY'
import statistics, sys
def med(arg, k=0):
    return statistics.median(float(r.split()[k]) for r in arg.split(";") if r)
dp1, dp2, halves, dp2s, halvess, pre, least = (med(a) for a in sys.argv[1:])
print(f"dp 2 x 1 thread against dp 1 x 2 threads: {dp1 / dp2:.2f}x the speed")
print(f"dp 2 x 1 thread against two jobs on halves: {halves / dp2:.2f}x the speed")
# A replica at half speed leaves the job 1.5 replicas' worth: no more than 2/1.5 the time if the
# slow replica only takes its share; a fixed split waits on the slow half (about 2x).
print(f"replica 1 slowed: dp 2 takes {dp2s / dp2:.2f}x its time (ideal 1.33x); "
      f"the fixed halves take {halvess / halves:.2f}x theirs")
print(f"5-shot scoring at dp 2: prefix routing {least / pre:.2f}x the speed of least-loaded; "
      f"prefix cache hit rate {med(sys.argv[6], 1):.1f}% against {med(sys.argv[7], 1):.1f}%")
PY
