#!/usr/bin/env bash
# Usage: scripts/format.sh [--check]
#
# Formats every C++ and CUDA file git tracks with the checked-in .clang-format (clang-format 14,
# Debian 12's). --check changes nothing: it names each file that differs and fails (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format > /dev/null || { echo "clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  # One run over all files; each difference is reported as "FILE:LINE:COL: error: ...".
  mapfile -t differ < <(clang-format --dry-run --Werror "${files[@]}" 2>&1 \
    | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*clang-format.*$/\1/p' | sort -u)
  if (( ${#differ[@]} )); then
    echo "FAIL: ${#differ[@]} of ${#files[@]} files differ from .clang-format (scripts/format.sh fixes them):" >&2
    printf '  %s\n' "${differ[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files follow .clang-format"
elif [[ $# -eq 0 ]]; then
  clang-format -i "${files[@]}"
else
  echo "usage: scripts/format.sh [--check]" >&2
  exit 2
fi
