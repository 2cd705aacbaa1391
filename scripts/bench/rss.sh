#!/usr/bin/env bash
# Usage: scripts/bench/rss.sh [MODEL_DIR] [LINES] [MAX_TOKENS]
#
# Shows that a run's memory stays flat however long the prompt file is: writes LINES prompts
# (default 200000), runs `tpllama run` over them (default model: the shipped stories260K,
# converted into a temporary directory) and samples the process's resident set size every half
# second, printing RSS against requests done. Input is streamed and only as many requests as
# --max-seqs are held, so RSS should not grow with the line count.
set -euo pipefail
cd "$(dirname "$0")/../.."
lines=${2:-200000}
max_tokens=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=${1:-}
if [[ -z "$model" ]]; then
  model=$work/stories260K
  build/tpllama convert --from llama2c --checkpoint models/stories260K/stories260K.bin \
    --tokenizer models/stories260K/tok512.model --out "$model" 2>/dev/null
fi
awk -v n="$lines" 'BEGIN { for (i = 0; i < n; i++) printf "Once upon a time there was prompt number %d\n", i }' \
  > "$work/prompts.txt"
build/tpllama run --model "$model" --input "$work/prompts.txt" --output "$work/out.jsonl" \
  --max-tokens "$max_tokens" --threads 1 --log-interval 1000000 2> "$work/log.txt" &
pid=$!
printf "%8s %10s %10s\n" "seconds" "done" "RSS_MiB"
start=$(date +%s.%N)
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
  done_lines=0
  [[ -f "$work/out.jsonl" ]] && done_lines=$(wc -l < "$work/out.jsonl")
  now=$(date +%s.%N)
  [[ -n "$rss" && "$rss" != 0 ]] && printf "%8.1f %10d %10.1f\n" "$(echo "$now - $start" | bc)" "$done_lines" "$(echo "$rss / 1024" | bc -l)"
  sleep 5
done
wait "$pid"
tail -1 "$work/log.txt"
echo "records: $(wc -l < "$work/out.jsonl") of $lines"
