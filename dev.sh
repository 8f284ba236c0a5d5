#!/bin/sh
# smarm's one entry point for building, benchmarking and testing. Installs what it needs from
# Debian packages (as root, on a fresh Debian 12 machine too), builds with CMake under build/,
# and runs the requested job.
#
#   ./dev.sh bench        the switch-cost suite (bench/c/switch_cost, bench/switch_cost.lua,
#                         bench/yield.lua), the Lua scenarios at modest sizes, 1M parked
#                         actors (bench/c/scale); ends with a table of the Lua scenarios
#   ./dev.sh bench-peers  the scenarios for smarm, Go, Erlang, Tarantool and plain LuaJIT,
#                         interleaved, then smarm's figures beside theirs (bench/peers/)
#   ./dev.sh bench-full   the same at full sizes (skynet of 1,111,111 actors, 3 rounds)
#   ./dev.sh bench-http   examples/http_hello.lua beside Go's net/http under the same wrk load
#   ./dev.sh test         every test: C tests in the release, ASan+UBSan, TSan and aarch64
#                         (cross-built, run under qemu-user) builds, the functional tests
#                         under valgrind memcheck, the busted specs on four LuaJIT builds
#                         (release, checking, and checking under ASan / TSan with the binding
#                         under ASan+UBSan / TSan), and the same specs on the aarch64 build
#                         under qemu-user; ends "N passed, N failed"
#   ./dev.sh build        the release build only
#   ./dev.sh deps [what]  install the Debian packages for: build (default), test, lua, peers, http;
#                         `./dev.sh deps luajit` builds the pinned LuaJIT into build/deps
#
# Environment: SMARM_SWITCH_ROUNDS / _WARMUP / _RUNS / _BATCH tune the benchmark;
# SMARM_TEST_VARIANTS picks test builds (default "release asan tsan aarch64 valgrind lua
# lua-aarch64");
# SMARM_PEERS_ROUNDS repeats the side-by-side run (default 2); SMARM_BUILD_DIR moves build/
# elsewhere.
set -eu

ROOT=$(cd "$(dirname "$0")" && pwd)
BUILD=${SMARM_BUILD_DIR:-"$ROOT/build"}
JOBS=$(nproc 2>/dev/null || echo 2)

say() { printf '%s\n' "dev.sh: $*" >&2; }

# Installs the Debian packages listed in deps/debian-<set>.txt that are missing.
install_packages() {
  set_file="$ROOT/deps/debian-$1.txt"
  missing=""
  for pkg in $(grep -v '^#' "$set_file"); do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $pkg"
  done
  [ -z "$missing" ] && return 0
  say "installing Debian packages:$missing"
  if [ "$(id -u)" -ne 0 ]; then
    say "not root: install them yourself (apt-get install$missing)"
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# configure <dir> <cmake args...>; then builds it.
build_variant() {
  mkdir -p "$BUILD"
  dir="$BUILD/$1"
  shift
  cmake -S "$ROOT" -B "$dir" -DSMARM_WERROR=ON "$@" >"$BUILD/$(basename "$dir").configure.log" 2>&1 &&
    cmake --build "$dir" -j "$JOBS" >"$BUILD/$(basename "$dir").build.log" 2>&1 ||
    { tail -n 40 "$BUILD/$(basename "$dir").build.log" "$BUILD/$(basename "$dir").configure.log" >&2 2>/dev/null; return 1; }
}

cmd_build() {
  install_packages build
  build_variant release -DCMAKE_BUILD_TYPE=Release
}

# The smarm executable on the release LuaJIT, for the Lua benchmarks.
build_lua_release() {
  install_packages build
  install_packages lua
  "$ROOT/deps/luajit.sh" "$BUILD/deps"
  build_variant lua-release -DCMAKE_BUILD_TYPE=Release -DSMARM_TESTS=OFF -DSMARM_BENCH=OFF \
    -DSMARM_LUAJIT_DIR="$BUILD/deps/luajit-release"
}

# Runs a Lua benchmark script in plain mode; prints its output and keeps its lines in $results
# (a failing script fails the command).
lua_bench() {
  "$smarm" -n "$@" >"$results.last" || { cat "$results.last"; return 1; }
  tee -a "$results" <"$results.last"
}

cmd_bench() {
  cmd_build
  build_lua_release
  smarm="$BUILD/lua-release/smarm"
  results="$BUILD/bench-results.txt"
  : >"$results"
  say "switch_cost (rounds=${SMARM_SWITCH_ROUNDS:-1000000} runs=${SMARM_SWITCH_RUNS:-5})"
  "$BUILD/release/bench/c/switch_cost"
  say "bench/switch_cost.lua (Lua: local, remote, parallel, against bare LuaJIT coroutines)"
  lua_bench "$ROOT/bench/switch_cost.lua"
  say "bench/yield.lua (Lua actors against bare LuaJIT coroutines)"
  "$smarm" -s 1 "$ROOT/bench/yield.lua"
  for scenario in pingpong ring spawn skynet send_sizes; do
    say "bench/$scenario.lua"
    lua_bench "$ROOT/bench/$scenario.lua"
  done
  say "bench/c/echo_threads and bench/echo.lua (TCP echo: plain threads, then actors on the IO thread)"
  "$BUILD/release/bench/c/echo_threads" | tee -a "$results"
  lua_bench "$ROOT/bench/echo.lua"
  say "scale (${SMARM_SCALE_ACTORS:-1000000} parked actors)"
  "$BUILD/release/bench/c/scale"
  say "the Lua scenarios (lines in $results)"
  "$smarm" -n "$ROOT/bench/peers/compare.lua" "$results"
}

# smarm beside Go, Erlang, Tarantool and plain LuaJIT (bench/peers/README.md): every scenario
# for smarm and each peer in turn, SMARM_PEERS_ROUNDS times, then the comparison table.
cmd_bench_peers() {
  build_lua_release
  install_packages peers
  out="$BUILD/peers"
  mkdir -p "$out"
  say "building the peers"
  GOCACHE="$out/gocache" GO111MODULE=off go build -o "$out/go-peers" "$ROOT/bench/peers/go/main.go"
  results="$out/results.txt"
  : >"$results"
  smarm="$BUILD/lua-release/smarm"
  rounds=${SMARM_PEERS_ROUNDS:-2}
  round=1
  while [ "$round" -le "$rounds" ]; do
    for scenario in switch_cost pingpong ring spawn skynet send_sizes; do
      say "round $round of $rounds: $scenario"
      # A peer that fails leaves its cells empty; the table says so.
      "$smarm" -n "$ROOT/bench/$scenario.lua" >>"$results" || say "smarm $scenario FAILED"
      "$out/go-peers" "$scenario" >>"$results" || say "go $scenario FAILED"
      "$ROOT/bench/peers/erlang/run.sh" "$out/beam" "$scenario" >>"$results" ||
        say "erlang $scenario FAILED"
      tarantool "$ROOT/bench/peers/tarantool/peers.lua" "$scenario" >>"$results" ||
        say "tarantool $scenario FAILED"
      "$smarm" -n "$ROOT/bench/peers/luajit.lua" "$scenario" >>"$results" ||
        say "luajit $scenario FAILED"
    done
    round=$((round + 1))
  done
  say "raw lines: $results"
  "$smarm" -n "$ROOT/bench/peers/compare.lua" "$results"
}

# Starts a server command in the background (its first line says "listening on PORT"), loads it
# with wrk for SMARM_HTTP_SECONDS (default 5) over 64 connections, prints wrk's summary as one
# key=value line (scenario=http peer=<name>), stops the server.
http_load() {
  name=$1
  shift
  "$@" >"$BUILD/http-$name.log" 2>&1 &
  pid=$!
  tries=0
  until grep -q "listening on" "$BUILD/http-$name.log" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
      say "$name server did not start:"; cat "$BUILD/http-$name.log" >&2; kill "$pid" 2>/dev/null
      return 1
    fi
    sleep 0.1
  done
  wrk -t 2 -c 64 -d "${SMARM_HTTP_SECONDS:-5}" --latency "http://127.0.0.1:$HTTP_PORT/" >"$BUILD/wrk-$name.txt" 2>&1
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  awk -v peer="$name" '
    /Requests\/sec/ { rps = $2 }
    /^ +50%/ { p50 = $2 } /^ +90%/ { p90 = $2 } /^ +99%/ { p99 = $2 }
    /requests in/ { reqs = $1 }
    /Non-2xx|Socket errors/ { errors = errors " " $0 }
    END { printf "scenario=http peer=%s schedulers=2 connections=64 requests=%s rps=%s p50=%s p90=%s p99=%s%s\n",
      peer, reqs, rps, p50, p90, p99, errors ? " errors=yes" : "" }' "$BUILD/wrk-$name.txt"
}

# examples/http_hello.lua (2 schedulers) and Go's net/http hello server (GOMAXPROCS=2) under the
# same wrk load, one after the other, SMARM_PEERS_ROUNDS times (default 2).
cmd_bench_http() {
  build_lua_release
  install_packages peers
  install_packages http
  out="$BUILD/peers"
  mkdir -p "$out"
  GOCACHE="$out/gocache" GO111MODULE=off go build -o "$out/go-http-hello" \
    "$ROOT/bench/peers/go/http_hello/main.go"
  HTTP_PORT=${SMARM_HTTP_PORT:-18080}
  rounds=${SMARM_PEERS_ROUNDS:-2}
  round=1
  while [ "$round" -le "$rounds" ]; do
    say "round $round of $rounds: smarm, then Go, under wrk -t2 -c64"
    http_load smarm "$BUILD/lua-release/smarm" -s 2 "$ROOT/examples/http_hello.lua" "$HTTP_PORT"
    GOMAXPROCS=2 http_load go "$out/go-http-hello" "$HTTP_PORT"
    round=$((round + 1))
  done
}

# Sums the "N passed, N failed" lines of a log (test binaries print one each; under ctest -V
# they carry a "K: " prefix). Prints "passed failed".
case_counts() {
  sed -n 's/^\([0-9]*: \)\{0,1\}\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\2 \3/p' "$1" |
    awk '{p+=$1; f+=$2} END {print p+0, f+0}'
}

# Appends "<name> <passed> <failed>" to $TOTALS from a log ending with busted's summary line
# ("N successes / N failures / N errors"); a run that exited non-zero counts at least one
# failure. Prints the log's end (and its FAIL blocks, spec/support/runner.lua's) if it failed.
record_spec_run() {
  name=$1
  log=$2
  status=$3
  counts=$(sed -n 's/^\([0-9][0-9]*\) successes* \/ \([0-9][0-9]*\) failures* \/ \([0-9][0-9]*\) errors*.*/\1 \2 \3/p' "$log" | tail -n 1)
  passed=$(echo "$counts" | awk '{print $1+0}')
  failed=$(echo "$counts" | awk '{print $2+$3}')
  if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  if [ "$status" -ne 0 ]; then
    grep -A 12 '^FAIL' "$log" | head -n 80 >&2 || true
    tail -n 40 "$log" >&2
  fi
  echo "$name $passed $failed" >>"$TOTALS"
}

# The descriptor limit for a spec run: the hard limit, at most $1 when given.
spec_fd_limit() {
  fds=$(ulimit -Hn)
  if [ -n "${1:-}" ] && { [ "$fds" = unlimited ] || [ "$fds" -gt "$1" ]; }; then fds=$1; fi
  echo "$fds"
}

# Runs ctest for one build; appends the per-case counts to $TOTALS.
run_ctest() {
  name=$1
  shift
  log="$BUILD/$name/ctest.log"
  say "testing $name"
  status=0
  env "$@" ctest --test-dir "$BUILD/$name" -V --timeout 900 >"$log" 2>&1 || status=$?
  # Each test binary ends with "N passed, N failed" over its cases.
  set -- $(case_counts "$log")
  passed=$1
  failed=$2
  crashed=$(grep -c -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout)' "$log" || true)
  if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=$((crashed > 0 ? crashed : 1))
  fi
  grep -E '^[0-9]+: (FAIL|  )' "$log" >&2 || true
  grep -E 'tests passed|tests failed' "$log" | sed "s/^/  [$name] /" >&2 || true
  [ "$status" -eq 0 ] || tail -n 60 "$log" >&2
  echo "$name $passed $failed" >>"$TOTALS"
}

# Memcheck over the functional tests of the release build: no invalid access, no leak.
run_valgrind() {
  say "testing under valgrind"
  passed=0
  failed=0
  for t in actor mailbox runtime stack io tcp proc; do
    [ -x "$BUILD/release/spec/c/test_$t" ] || continue
    log="$BUILD/release/valgrind-$t.log"
    status=0
    SMARM_STRESS_SCALE=0.05 valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
      --error-exitcode=99 "$BUILD/release/spec/c/test_$t" >"$log" 2>&1 || status=$?
    set -- $(case_counts "$log")
    p=$1
    f=$2
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$status" -eq 0 ] || tail -n 40 "$log" >&2
    passed=$((passed + p))
    failed=$((failed + f))
  done
  echo "valgrind $passed $failed" >>"$TOTALS"
}

# Builds LuaJIT (release, check, asan, tsan), the binding against each, and runs the busted specs
# with each LuaJIT interpreter. The asan variant is the binding built with ASan+UBSan on LuaJIT's
# checking build compiled with ASan: memory errors of the binding (codec, IO userdata) abort the
# run. Leaks are not checked there (busted's own VM is never closed); the C variants check them.
# The tsan variant is the same with TSan (races between actors' threads and the IO thread); its
# descriptor limit stays at 2000, which sizes the connection specs for TSan's memory (a fiber's
# state per actor).
run_lua() {
  if ! LUAJIT_VARIANTS="release check asan tsan" "$ROOT/deps/luajit.sh" "$BUILD/deps" \
    >"$BUILD/luajit.log" 2>&1; then
    tail -n 30 "$BUILD/luajit.log" >&2
    echo "lua 0 1" >>"$TOTALS"
    return 0
  fi
  multiarch=$(gcc -print-multiarch)
  for lj in release check asan tsan; do
    check=OFF
    asan=OFF
    tsan=OFF
    [ "$lj" != release ] && check=ON
    [ "$lj" = asan ] && asan=ON
    [ "$lj" = tsan ] && tsan=ON
    if ! build_variant "lua-$lj" -DCMAKE_BUILD_TYPE=Release -DSMARM_TESTS=OFF -DSMARM_BENCH=OFF \
      -DSMARM_LUAJIT_DIR="$BUILD/deps/luajit-$lj" -DSMARM_LUAJIT_CHECK=$check \
      -DSMARM_ASAN=$asan -DSMARM_TSAN=$tsan; then
      echo "lua-$lj 0 1" >>"$TOTALS"
      continue
    fi
    say "testing lua-$lj (busted on LuaJIT $lj)"
    log="$BUILD/lua-$lj/busted.log"
    status=0
    # the sockets specs hold 10,000 connections where the descriptor limit allows: raise the
    # soft limit to the hard one for them (TSan: to 2000 at most, see above)
    fds=$(spec_fd_limit "$([ "$lj" = tsan ] && echo 2000)")
    (ulimit -n "$fds" 2>/dev/null || true
      cd "$ROOT" && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      SMARM_EXE="$BUILD/lua-$lj/smarm" LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua" \
      LUA_CPATH="$BUILD/lua-$lj/lua/?.so;/usr/lib/$multiarch/lua/5.1/?.so" \
      timeout 1200 "$BUILD/deps/luajit-$lj/bin/luajit" /usr/bin/busted -o plainTerminal spec) \
      >"$log" 2>&1 || status=$? # a hang fails the run (timeout's 124) instead of stalling it
    record_spec_run "lua-$lj" "$log" "$status"
  done
}

# The Lua binding built for aarch64 (LuaJIT's checking build and libuv, both cross-built from
# pinned source), its specs run under qemu-user by spec/support/runner.lua: busted's C modules
# exist only for the host. The descriptor limit stays at 2000 (the connection specs' size) to
# keep the emulated run short.
run_lua_aarch64() {
  toolchain="$ROOT/cmake/aarch64-linux-gnu.cmake"
  xdeps="$BUILD/deps-aarch64"
  if ! { LUAJIT_VARIANTS=check "$ROOT/deps/luajit.sh" "$xdeps" aarch64-linux-gnu- &&
    "$ROOT/deps/libuv.sh" "$xdeps" aarch64-linux-gnu- "$toolchain"; } >"$BUILD/deps-aarch64.log" 2>&1; then
    tail -n 30 "$BUILD/deps-aarch64.log" >&2
    echo "lua-aarch64 0 1" >>"$TOTALS"
    return 0
  fi
  uv="$xdeps/libuv-aarch64-linux-gnu"
  if ! build_variant lua-aarch64 -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release \
    -DSMARM_TESTS=OFF -DSMARM_BENCH=OFF -DSMARM_LUAJIT_DIR="$xdeps/luajit-check" \
    -DSMARM_LUAJIT_CHECK=ON -DSMARM_UV_LIB="$uv/lib/libuv_a.a" -DSMARM_UV_INCLUDE="$uv/include"; then
    echo "lua-aarch64 0 1" >>"$TOTALS"
    return 0
  fi
  say "testing lua-aarch64 (the specs under qemu-user)"
  log="$BUILD/lua-aarch64/specs.log"
  exe="qemu-aarch64 -L /usr/aarch64-linux-gnu $BUILD/lua-aarch64/smarm"
  status=0
  fds=$(spec_fd_limit 2000)
  # shellcheck disable=SC2086
  (ulimit -n "$fds" 2>/dev/null || true
    cd "$ROOT" && SMARM_EXE="$exe" LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua" \
    timeout 1200 $exe -n spec/support/runner.lua spec/*_spec.lua) >"$log" 2>&1 || status=$?
  record_spec_run lua-aarch64 "$log" "$status"
}

cmd_test() {
  variants=${SMARM_TEST_VARIANTS:-"release asan tsan aarch64 valgrind lua lua-aarch64"}
  install_packages build
  case " $variants " in *" aarch64 "* | *" valgrind "* | *" lua-aarch64 "*) install_packages test ;; esac
  case " $variants " in *" lua "* | *" lua-aarch64 "*) install_packages lua ;; esac
  TOTALS=$(mktemp)
  for v in $variants; do
    case $v in
      release) set -- -DCMAKE_BUILD_TYPE=Release ;;
      asan) set -- -DCMAKE_BUILD_TYPE=Debug -DSMARM_ASAN=ON -DSMARM_BENCH=OFF ;;
      tsan) set -- -DCMAKE_BUILD_TYPE=Debug -DSMARM_TSAN=ON -DSMARM_BENCH=OFF ;;
      aarch64) set -- -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
        -DCMAKE_BUILD_TYPE=Release -DSMARM_BENCH=OFF ;;
      valgrind) set -- -DCMAKE_BUILD_TYPE=Release ;;
      lua) run_lua; continue ;;
      lua-aarch64) run_lua_aarch64; continue ;;
      *) say "unknown test variant '$v'"; exit 2 ;;
    esac
    dir=$v
    [ "$v" = valgrind ] && dir=release
    if ! build_variant "$dir" "$@"; then
      say "build $v FAILED"
      echo "$v 0 1" >>"$TOTALS"
      continue
    fi
    case $v in
      release) run_ctest release ;;
      asan) run_ctest asan SMARM_STRESS_SCALE=0.1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
      tsan) run_ctest tsan SMARM_STRESS_SCALE=0.05 \
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ;;
      aarch64) run_ctest aarch64 SMARM_STRESS_SCALE=0.05 ;;
      valgrind) run_valgrind ;;
    esac
  done
  awk '{printf "  %-12s %s passed, %s failed\n", $1, $2, $3}' "$TOTALS" >&2
  total_passed=$(awk '{s+=$2} END {print s+0}' "$TOTALS")
  total_failed=$(awk '{s+=$3} END {print s+0}' "$TOTALS")
  rm -f "$TOTALS"
  echo "$total_passed passed, $total_failed failed"
  [ "$total_failed" -eq 0 ]
}

case "${1:-}" in
  bench) cmd_bench ;;
  bench-peers) cmd_bench_peers ;;
  bench-http) cmd_bench_http ;;
  bench-full)
    # full sizes: the skynet of 1,111,111 actors, more runs of each
    export SMARM_SKYNET_DEPTH=${SMARM_SKYNET_DEPTH:-6} SMARM_PEERS_ROUNDS=${SMARM_PEERS_ROUNDS:-3}
    cmd_bench_peers ;;
  test) cmd_test ;;
  build) cmd_build ;;
  deps)
    case "${2:-build}" in
      luajit) install_packages build && install_packages lua && "$ROOT/deps/luajit.sh" "$BUILD/deps" ;;
      *) install_packages "${2:-build}" ;;
    esac ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
