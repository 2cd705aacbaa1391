#!/usr/bin/env bash
# Usage: scripts/test.sh [extra ctest arguments]
#
# Runs the whole test suite (CTest) of an existing build/ (make it with scripts/setup.sh). The test
# model ships in models/stories260K. GPU tests skip without a GPU,
# and the Slurm and multi-node tests without their packages or root; CTest reports a skip as
# skipped, never as passed, and lists the skipped tests at the end (.ci/run fails on any other).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d build ]] || { echo "no build/ directory: run scripts/setup.sh first" >&2; exit 2; }
if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cmake --build build --parallel
ctest --test-dir build --output-on-failure --parallel "$(nproc)" "$@"
