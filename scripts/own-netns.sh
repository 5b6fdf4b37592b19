# Sourced by .ci/test.sh and scripts/tsan.sh: run a program in a network namespace of its own.
#
# The socket fuzzer's storms connect thousands of times a second over one loopback address pair
# and rely on reusing ports in TIME_WAIT. Suites run just before leave up to the whole ephemeral
# range (28 k ports) in TIME_WAIT for 60 s, and a real client's connection can then stall for
# seconds, which the harness rightly counts as a lockout (seen in CI's runs in the host
# namespace; lock-outs of another cause remain, scripts/tsan.sh says which). In a namespace of
# its own the program gets a fresh TCP state, loopback up and the ephemeral range widened. Where unshare or ip is missing (no root, no util-linux), it
# runs in the host namespace once the host's TIME_WAIT count has fallen below 4000 (at most 90 s).
#
#   gs_in_own_netns PROGRAM [ARGS...]    exit status: the program's

gs_in_own_netns() {
  if command -v ip >/dev/null 2>&1 && unshare -n true 2>/dev/null; then
    echo "gsched: $(basename "$1") in a network namespace of its own"
    unshare -n bash -c 'ip link set lo up && sysctl -qw net.ipv4.ip_local_port_range="1024 65000"; exec "$@"' \
      gs-netns "$@"
  else
    local t0=$SECONDS n=0
    if command -v ss >/dev/null 2>&1; then
      while n=$(ss -tan state time-wait 2>/dev/null | tail -n +2 | wc -l) && [ "$n" -gt 4000 ] &&
            [ $((SECONDS - t0)) -lt 90 ]; do sleep 1; done
    fi
    echo "gsched: $(basename "$1") in the host's network namespace; $n loopback sockets in TIME_WAIT after $((SECONDS - t0)) s"
    "$@"
  fi
}
