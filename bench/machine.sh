# machine.sh: sourced by the bench scripts; prints what the figures were
# measured on and runs commands with an echo of each.
echo "== machine"
uname -a
echo "nproc: $(nproc)"
grep -m1 'model name' /proc/cpuinfo || true
echo "go: $(go version)"
echo "date: $(date -u +%FT%TZ)   load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# x CMD...: print the command, then run it.
x() { echo "+ $*"; "$@"; }
