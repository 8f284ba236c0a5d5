#!/bin/sh
# Usage: fd-limit.sh MAX command [args...]
# Runs the command with the soft descriptor limit raised to the hard one, at most MAX (0: no
# cap). The connection specs size themselves by this limit (spec/tcp_spec.lua).
set -eu
max=$1
shift
fds=$(ulimit -Hn)
if [ "$max" -gt 0 ] && { [ "$fds" = unlimited ] || [ "$fds" -gt "$max" ]; }; then fds=$max; fi
ulimit -n "$fds" 2>/dev/null || true
exec "$@"
