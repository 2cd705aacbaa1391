#!/usr/bin/env bash
# Usage: scripts/bench/dispatch.sh [REQUESTS]
#
# Rank 0's side of data parallelism without a model (tests/bench/dispatch_bench.cpp): short
# requests (default 200000) read and gated, records written, and the whole round with 8, 32 and
# 128 replicas' leaders simulated in threads over the in-memory communicator, each answering every
# request at once. On a machine with few cores the simulated leaders share them with rank 0's
# dispatcher, so the whole round measures the machine as much as the dispatcher.
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-200000}
bench=${DISPATCH_BENCH:-build/tests/dispatch_bench}
for replicas in 8 32 128; do
  "$bench" "$replicas" "$requests" 2> /dev/null | { [ "$replicas" = 8 ] && cat || grep dispatched; }
done
