#!/usr/bin/env bash
# Launch agent for Open MPI (--mca plm_rsh_agent): called as `netns_agent.sh HOST COMMAND...`
# instead of ssh. HOST is a test node's address; the command (Open MPI's orted) starts inside that
# node's network namespace, with the node's own hostname in a new UTS namespace.
set -euo pipefail
host=$1
shift
ns=$(awk -v h="$host" '$1 == h { print $2 }' "${TPLLAMA_NETNS_MAP:?map of address to namespace}")
[[ -n $ns ]] || { echo "netns_agent: unknown test host $host" >&2; exit 255; }
# Like ssh, the remaining words are one command line for a shell on the "remote" node.
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
