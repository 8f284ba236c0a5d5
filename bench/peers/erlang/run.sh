#!/bin/sh
# bench/peers/erlang/run.sh: the Erlang peer of smarm's benchmarks (bench/peers/README.md).
#
#   run.sh BEAM_DIR [scenario...]
#
# Compiles peers.erl into BEAM_DIR (when peers.beam is missing or older than the source), then
# runs each configuration in its own VM with its scheduler count (+S N:N), one key=value line
# each on stdout, progress on stderr. Scenarios: switch_cost pingpong ring spawn skynet
# send_sizes (none: all). Exits non-zero if the build or any configuration fails.
# Sizes come from the same SMARM_* variables as smarm's scripts (read by peers.erl).

usage() {
    echo "usage: $0 BEAM_DIR [switch_cost|pingpong|ring|spawn|skynet|send_sizes ...]" >&2
    exit 2
}

[ $# -ge 1 ] || usage
beam_dir=$1
shift

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd) || exit 1
src=$here/peers.erl

mkdir -p "$beam_dir" || exit 1
beam=$beam_dir/peers.beam
if [ ! -f "$beam" ] || [ -n "$(find "$src" -newer "$beam")" ]; then
    echo "erlang: compiling $src into $beam_dir" >&2
    erlc -o "$beam_dir" "$src" || { echo "erlang: erlc failed" >&2; exit 1; }
fi

# A positive integer from the environment, or the default (the scheduler count and the process
# limit are decided here; everything else is read by peers.erl).
knob() {
    eval "v=\${$1:-}"
    case $v in
        ''|*[!0-9]*) echo "$2" ;;
        *) if [ "$v" -gt 0 ]; then echo "$v"; else echo "$2"; fi ;;
    esac
}

if [ $# -eq 0 ]; then
    set -- switch_cost pingpong ring spawn skynet send_sizes
fi
for s in "$@"; do
    case $s in
        switch_cost|pingpong|ring|spawn|skynet|send_sizes) ;;
        *) echo "erlang: unknown scenario '$s'" >&2; usage ;;
    esac
done

# The process limit (+P): Erlang's default (262144) unless a scenario needs more.
proc_limit() {
    need=$(( $1 + 10000 ))
    if [ "$need" -lt 262144 ]; then need=262144; fi
    if [ "$need" -gt 134217727 ]; then need=134217727; fi
    echo "$need"
}

failed=0
# run_one SCENARIO VARIANT SCHEDULERS [PROCESS_LIMIT]
run_one() {
    plimit=${4:-262144}
    echo "erlang: $1 $2 (+S $3:$3)" >&2
    if ! erl -noshell +S "$3:$3" +P "$plimit" -pa "$beam_dir" -run peers main "$1" "$2" "$3"
    then
        echo "erlang: $1 $2 FAILED" >&2
        failed=1
    fi
}

for s in "$@"; do
    case $s in
        switch_cost)
            run_one switch_cost local 1 ;;
        pingpong)
            run_one pingpong local 1
            run_one pingpong remote 2 ;;
        ring)
            run_one ring local 1
            run_one ring spread 2 ;;
        spawn)
            run_one spawn waiting 1 "$(proc_limit "$(knob SMARM_SPAWN_ACTORS 100000)")" ;;
        skynet)
            depth=$(knob SMARM_SKYNET_DEPTH 5)
            actors=1 level=1 width=1
            while [ "$level" -le "$depth" ]; do
                width=$(( width * 10 )); actors=$(( actors + width )); level=$(( level + 1 ))
            done
            run_one skynet "depth$depth" "$(knob SMARM_SKYNET_SCHEDULERS 2)" \
                "$(proc_limit "$actors")" ;;
        send_sizes)
            for v in string_8B string_1KiB string_64KiB table_100_fields; do
                run_one send_sizes "$v" 2
            done ;;
    esac
done

exit "$failed"
