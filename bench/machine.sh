# machine.sh: sourced by the bench scripts; prints what the figures were
# measured on and runs commands with an echo of each.
echo "== machine"
uname -a
echo "nproc: $(nproc)"
grep -m1 'model name' /proc/cpuinfo || true
echo "go: $(go version)"
echo "sluice commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (work tree modified)')"
echo "date: $(date -u +%FT%TZ)   load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# x CMD...: print the command, then run it.
x() { echo "+ $*"; "$@"; }
