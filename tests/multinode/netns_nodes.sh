# Sourced by the multinode tests: simulated nodes on this machine, each a network namespace with
# its own address on a bridge (joined by a veth pair), for mpirun to reach through netns_agent.sh.
#
# del_nodes NAME BRIDGE COUNT: removes namespaces NAME0.. and the bridge (no error when absent).
# add_nodes NAME BRIDGE SUBNET COUNT SLOTS WORK: namespaces NAME0..NAME<COUNT-1> at SUBNET.2, .3, ...
#   (SUBNET: the first three octets; the bridge is SUBNET.1), veth NAMEv<i> on the host's side;
#   WORK/hosts.map (address → namespace, for netns_agent.sh) and WORK/hostfile (SLOTS each).
del_nodes() {
  local name=$1 bridge=$2 count=$3 i
  for ((i = 0; i < count; i++)); do ip netns del "$name$i" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
}

add_nodes() {
  local name=$1 bridge=$2 subnet=$3 count=$4 slots=$5 work=$6 i ns addr
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  : > "$work/hosts.map"
  : > "$work/hostfile"
  for ((i = 0; i < count; i++)); do
    ns=$name$i addr=$subnet.$((i + 2))
    ip netns add "$ns"
    ip link add "${name}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${name}v$i" master "$bridge" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "$addr $ns" >> "$work/hosts.map"
    echo "$addr slots=$slots" >> "$work/hostfile"
  done
}
