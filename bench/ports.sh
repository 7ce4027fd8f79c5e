# ports.sh: sourced by the bench scripts that start servers.

# freeport prints a port no socket uses, below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range): servers here restart on the same port
# many times while the load opens thousands of outgoing connections, and
# an outgoing connection's local port would make the restart fail with
# "address already in use".
freeport() {
  local p lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  while :; do
    p=$(( (RANDOM << 15 | RANDOM) % (lo - 10000) + 10000 ))
    if [ -z "$(ss -Htan "sport = :$p")" ]; then echo "$p"; return; fi
  done
}
