# Sourced by the multi-node tests: two hosts on this machine, Linux network namespaces $nsA and
# $nsB joined by a veth pair ($vethA with $addrA, $vethB with $addrB, /24), a scratch $dir, and
# a cleanup on exit that kills the pids in $pids and deletes both namespaces (and with them the
# veth). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): without it the test FAILS with that reason.
#   two_hosts PREFIX SUBNET     e.g. two_hosts mn 10.77.0 (names carry this process's id)
# The caller defines fail().
two_hosts() {
  local prefix=$1 subnet=$2
  [ "$(id -u)" = 0 ] || fail "this test builds network namespaces and needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); it runs as uid $(id -u)"
  command -v ip > /dev/null || fail "the 'ip' command (iproute2) is missing; install iproute2"
  tag=$(printf '%x%03x' $$ $((RANDOM % 4096)))  # interface names: at most 15 characters
  nsA=fsdpp-$prefix-$tag-a nsB=fsdpp-$prefix-$tag-b vethA=f$prefix${tag}a vethB=f$prefix${tag}b
  addrA=$subnet.1 addrB=$subnet.2
  dir=$(mktemp -d)
  pids=()
  trap two_hosts_cleanup EXIT
  ip netns add "$nsA" 2> "$dir/err" ||
    fail "cannot create a network namespace (ip netns add): $(cat "$dir/err"); the test needs root with CAP_SYS_ADMIN"
  ip netns add "$nsB" 2> "$dir/err" || fail "cannot create a second network namespace: $(cat "$dir/err")"
  ip link add "$vethA" netns "$nsA" type veth peer name "$vethB" netns "$nsB" 2> "$dir/err" ||
    fail "cannot create a veth pair between the namespaces: $(cat "$dir/err"); needs CAP_NET_ADMIN and the veth driver"
  ip -n "$nsA" addr add "$addrA/24" dev "$vethA"
  ip -n "$nsB" addr add "$addrB/24" dev "$vethB"
  for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
  ip -n "$nsA" link set "$vethA" up
  ip -n "$nsB" link set "$vethB" up
  ip -n "$nsB" route get "$addrA" | grep -q "dev $vethB" || fail "namespace $nsB has no route to $addrA over $vethB"
}

two_hosts_cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  ip netns del "$nsA" 2> /dev/null || true  # deleting a namespace deletes its veth end too
  ip netns del "$nsB" 2> /dev/null || true
  rm -rf "$dir"
}
