#!/usr/bin/env bash
# Usage: tests/multinode/multinode_test.sh BUILD_DIR MODELS_DIR
#
# Two simulated nodes on this machine: network namespaces tpl-node0/1 joined to the host by veth
# pairs on a bridge (test addresses 10.77.0.0/24), each with its own hostname (UTS namespace).
# mpirun starts its daemons in them through tests/multinode/netns_agent.sh (no ssh), ranks talk
# TCP. Layout tp 2 inside a node, pp 2 across: the output must equal one rank's, the run must
# report 2 nodes, and the stage-to-stage traffic must have crossed the veth links. Exits 77
# (skipped) without root or ip netns.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
models=$(cd "${TPLLAMA_MODELS_DIR:-${2:?models dir}}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
[[ $EUID -eq 0 ]] || { echo "SKIP: needs root for network namespaces"; exit 77; }
ip netns add tpl-probe 2>/dev/null && ip netns del tpl-probe || { echo "SKIP: ip netns not available"; exit 77; }
[[ -f $models/stories260K/stories260K.bin ]] || { echo "FAIL: $models/stories260K missing (it ships with the project)"; exit 1; }

work=$(mktemp -d /tmp/tpllama_multinode.XXXXXX)
source "$here/netns_nodes.sh"
trap 'del_nodes tpl-node tpl-br0 2; rm -rf "$work"' EXIT
del_nodes tpl-node tpl-br0 2
fail() { echo "FAIL: $*"; [[ -f $work/run.log ]] && head -40 "$work/run.log"; exit 1; }
add_nodes tpl-node tpl-br0 10.77.0 2 2 "$work"

model=$work/stories260K
"$build/tpllama" convert --from llama2c --checkpoint "$models/stories260K/stories260K.bin" \
  --tokenizer "$models/stories260K/tok512.model" --out "$model" 2>/dev/null
printf 'Once upon a time\nThe little dog\nShe said, "Hello!"\n' > "$work/prompts.txt"
"$build/tpllama" run --model "$model" --input "$work/prompts.txt" --output "$work/single.jsonl" --max-tokens 60 \
  2>/dev/null

# mpirun over the two nodes: daemons started in them by the agent, ranks talking TCP on the test net.
two_nodes=(mpirun -np 4 --hostfile "$work/hostfile" --map-by slot
  --mca plm_rsh_agent "$here/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca routed direct
  --mca oob_tcp_if_include 10.77.0.0/24 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24)
rx_before=$(ip netns exec tpl-node1 cat /sys/class/net/eth0/statistics/rx_bytes)
export TPLLAMA_NETNS_MAP=$work/hosts.map OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 120 "${two_nodes[@]}" \
  "$build/tpllama" run --model "$model" --input "$work/prompts.txt" --output "$work/out.jsonl" \
  --max-tokens 60 --threads 1 > "$work/run.log" 2>&1 || fail "the two-node run failed"
rx_after=$(ip netns exec tpl-node1 cat /sys/class/net/eth0/statistics/rx_bytes)

cmp <(sort "$work/single.jsonl") <(sort "$work/out.jsonl") || fail "two-node output differs from one rank"
grep -q "tp 2 x pp 2 on 2 node(s): tpl-node0 (ranks 0-1), tpl-node1 (ranks 2-3)" "$work/run.log" ||
  fail "node detection did not see the 2 nodes by their hostnames"
grep "layout:" "$work/run.log"
p2p=$(grep -o 'rank 2: .*point-to-point [0-9.]* s' "$work/run.log" || true)
[[ -n $p2p ]] || fail "no per-rank point-to-point figures for the second node's ranks"
crossed=$((rx_after - rx_before))
(( crossed > 100000 )) || fail "only $crossed bytes reached node 1: the pipeline did not cross the network"

# bench over the same two nodes: each node's first rank measures its node, and the limits the
# report sets decode and prefill against are the two nodes' sum.
timeout 120 "${two_nodes[@]}" \
  "$build/tpllama" bench --shape tiny --random-weights --vocab 512 --prompts 4 --input-len 16 --output-len 4 \
  --threads 1 --json "$work/bench.json" > "$work/bench.log" 2>&1 || { cat "$work/bench.log"; fail "the two-node bench failed"; }
python3 - "$work/bench.json" <<'PY' || fail "the two-node bench did not measure both nodes"
import json, sys
j = json.load(open(sys.argv[1]))
m = j["machine"]
assert m["devices"] == 2 and m["measured_on"] == "all cores of 2 nodes", m
assert j["layout"]["nodes"] == 2, j["layout"]
assert m["read_bandwidth_bytes_per_second"] > 1e9 and m["gemm_flops_per_second"] > 1e9, m
PY
echo "PASS: 2 nodes (tp 2 inside, pp 2 across) equal one rank; node 1 received $crossed bytes over its veth link;" \
  "bench measured both nodes"
