#!/usr/bin/env bash
# Usage: tests/multinode/dp_four_nodes_test.sh BUILD_DIR MODELS_DIR
#
# Four simulated nodes (network namespaces tpl-dp0..3 on a bridge, as multinode_test.sh makes two),
# one rank each, every node's link rate-limited to 1 Gbit/s with tc's token bucket (this kernel has
# no netem). Layout dp 2 x pp 2: replica 0's two stages on nodes 0 and 1, replica 1's on nodes 2
# and 3, so each replica's hidden states cross its own link and rank 0 hands requests to replica
# 1's leader (node 2) over another. The output must equal one rank's; the bytes each link carried
# are printed. Exits 77 (skipped) without root, ip netns or tc.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
models=$(cd "${TPLLAMA_MODELS_DIR:-${2:?models dir}}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
[[ $EUID -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
ip netns add tpl-probe 2>/dev/null && ip netns del tpl-probe || { echo "SKIP: ip netns not available"; exit 77; }
command -v tc > /dev/null || { echo "SKIP: tc (iproute2) not available"; exit 77; }
[[ -f $models/stories260K/stories260K.bin ]] || { echo "FAIL: $models/stories260K missing (it ships with the project)"; exit 1; }

nodes=4
work=$(mktemp -d /tmp/tpllama_dp_nodes.XXXXXX)
source "$here/netns_nodes.sh"
trap 'del_nodes tpl-dp tpl-dpbr "$nodes"; rm -rf "$work"' EXIT
del_nodes tpl-dp tpl-dpbr "$nodes"
fail() { echo "FAIL: $*"; [[ -f $work/run.log ]] && head -60 "$work/run.log"; exit 1; }
add_nodes tpl-dp tpl-dpbr 10.78.0 "$nodes" 1 "$work"
# 1 Gbit/s out of each node (its eth0) and into it (the host's end of its veth).
for ((i = 0; i < nodes; i++)); do
  ip netns exec "tpl-dp$i" tc qdisc add dev eth0 root tbf rate 1gbit burst 128kb latency 50ms
  tc qdisc add dev "tpl-dpv$i" root tbf rate 1gbit burst 128kb latency 50ms
done

model=$work/stories260K
"$build/tpllama" convert --from llama2c --checkpoint "$models/stories260K/stories260K.bin" \
  --tokenizer "$models/stories260K/tok512.model" --out "$model" 2>/dev/null
for ((i = 0; i < 24; i++)); do
  echo "{\"id\": $i, \"prompt\": \"$([ $((i % 2)) = 0 ] && echo 'Once upon a time' || echo 'The little dog') $i\"}"
done > "$work/prompts.jsonl"
"$build/tpllama" run --model "$model" --input "$work/prompts.jsonl" --output "$work/single.jsonl" \
  --max-tokens 40 --ordered 2>/dev/null

bytes() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2_bytes"; }
declare -a rx0 tx0
for ((i = 0; i < nodes; i++)); do rx0[i]=$(bytes "tpl-dp$i" rx); tx0[i]=$(bytes "tpl-dp$i" tx); done
export TPLLAMA_NETNS_MAP=$work/hosts.map OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 180 mpirun -np 4 --hostfile "$work/hostfile" --map-by slot \
  --mca plm_rsh_agent "$here/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
  --mca oob_tcp_if_include 10.78.0.0/24 --mca btl tcp,self --mca btl_tcp_if_include 10.78.0.0/24 \
  "$build/tpllama" run --model "$model" --input "$work/prompts.jsonl" --output "$work/out.jsonl" \
  --dp 2 --pp 2 --max-tokens 40 --threads 1 --ordered > "$work/run.log" 2>&1 ||
  fail "the four-node dp 2 x pp 2 run failed"

cmp "$work/single.jsonl" "$work/out.jsonl" || fail "dp 2 x pp 2 over four nodes differs from one rank"
grep -q "layout: 4 ranks = dp 2 x tp 1 x pp 2 on 4 node(s)" "$work/run.log" ||
  fail "the layout is not dp 2 x tp 1 x pp 2 on 4 nodes"
grep -q "replica 1 (leader rank 2): tpl-dp2 (ranks 2), tpl-dp3 (ranks 3)" "$work/run.log" ||
  fail "replica 1 is not on nodes 2 and 3"
grep "layout:\|replica [01] (leader" "$work/run.log"
for ((i = 0; i < nodes; i++)); do
  rx=$(($(bytes "tpl-dp$i" rx) - rx0[i])) tx=$(($(bytes "tpl-dp$i" tx) - tx0[i]))
  echo "node $i link (1 Gbit/s): received $rx bytes, sent $tx bytes"
  (( rx > 10000 && tx > 10000 )) || fail "node $i's link carried almost nothing ($rx in, $tx out)"
done
echo "PASS: dp 2 x pp 2 over 4 rate-limited nodes equals one rank"
