#!/bin/sh
# smarm's one entry point: installs the Debian packages a job needs (as root, on a fresh Debian 12
# machine too), builds the pinned dependencies (deps/), builds CMake presets (CMakePresets.json)
# under build/, and runs the job.
#
#   ./dev.sh test         every test, in one parallel ctest run that also builds the LuaJITs
#                         and the variants of CMakePresets.json: C tests in the release,
#                         ASan+UBSan, TSan and aarch64-under-qemu builds, the release C tests
#                         under valgrind memcheck, the busted specs on four LuaJIT builds, the
#                         specs on the aarch64 build under qemu; ends "N passed, N failed"
#                         after the per-variant counts and the skips (log: build/ctest.log)
#   ./dev.sh build        the C core, its tests and the smarm executable (build/release,
#                         build/lua-release/smarm)
#   ./dev.sh bench        the switch-cost suite (bench/c/switch_cost, bench/switch_cost.lua,
#                         bench/yield.lua), the Lua scenarios at modest sizes, spawn_on, 1M parked
#                         actors (bench/c/scale); ends with a table of the Lua scenarios and
#                         the targets that need no peer
#   ./dev.sh bench-peers  the scenarios for smarm, Go, Erlang, Tarantool and plain LuaJIT,
#                         interleaved (and smarm's spawn_on), then smarm's figures beside theirs
#                         and the targets of issues 4 and 12, met or missed (bench/peers/)
#   ./dev.sh bench-full   the same at full sizes (skynet of 1,111,111 actors, 3 rounds)
#   ./dev.sh bench-http   examples/http_hello.lua beside Go's net/http under the same wrk load
#   ./dev.sh deps [what]  install the Debian packages for: build (default), test, lua, peers,
#                         http, rockspec; `./dev.sh deps luajit` builds the pinned LuaJITs into
#                         build/deps
#
# Environment: SMARM_TEST_VARIANTS picks the test variants (default: all of them, "release asan
# tsan aarch64 valgrind lua-release lua-check lua-asan lua-tsan lua-aarch64"; "lua" stands for
# the four native Lua ones); SMARM_TEST_JOBS is ctest's parallelism (default 2 per core).
# SMARM_SWITCH_ROUNDS / _WARMUP / _RUNS / _BATCH tune the switch-cost benchmark;
# SMARM_PEERS_ROUNDS repeats the side-by-side runs (default 2).
# One variant by hand: cmake --preset asan && cmake --build --preset asan && ctest --preset asan
set -eu

ROOT=$(cd "$(dirname "$0")" && pwd)
BUILD="$ROOT/build"
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

# The pinned LuaJIT builds the given presets link (build/deps, build/deps-aarch64) and the
# aarch64 libuv; output in build/deps.log.
build_deps() {
  host=""
  cross=""
  for p in "$@"; do
    case $p in
      lua-release | lua-check | lua-asan | lua-tsan) host="$host ${p#lua-}" ;;
      lua-aarch64) cross="luajit libuv" ;;
      aarch64) cross="${cross:-libuv}" ;;
    esac
  done
  mkdir -p "$BUILD"
  # (set -e does not reach into a command list that is tested: each step says so itself)
  {
    if [ -n "$host" ]; then LUAJIT_VARIANTS="$host" "$ROOT/deps/luajit.sh" "$BUILD/deps" || return 1; fi
    case $cross in *luajit*)
      LUAJIT_VARIANTS=check "$ROOT/deps/luajit.sh" "$BUILD/deps-aarch64" aarch64-linux-gnu- ||
        return 1 ;;
    esac
    if [ -n "$cross" ]; then
      "$ROOT/deps/libuv.sh" "$BUILD/deps-aarch64" aarch64-linux-gnu- \
        "$ROOT/cmake/aarch64-linux-gnu.cmake" || return 1
    fi
  } >"$BUILD/deps.log" 2>&1
}

# Configures and builds a preset into build/<preset>; output in build/<preset>.log.
build_preset() {
  mkdir -p "$BUILD"
  { cmake --preset "$1" && cmake --build --preset "$1" -j "$JOBS"; } >"$BUILD/$1.log" 2>&1 ||
    { tail -n 40 "$BUILD/$1.log" >&2; return 1; }
}

cmd_build() {
  install_packages build
  install_packages lua
  build_deps lua-release || { tail -n 30 "$BUILD/deps.log" >&2; return 1; }
  build_preset release
  build_preset lua-release
}

# Writes build/CTestTestfile.cmake for one ctest run over the given (configured) presets: their
# deps and builds as setup tests (ctest fixtures: "setup/luajit-tsan", "setup/build-tsan"), then
# the tests of each build tree, which need their build. ctest orders it all and runs it in
# parallel: the C tests run while the LuaJITs build, the slowest variants' chains first (COST).
write_test_plan() {
  plan="$BUILD/CTestTestfile.cmake"
  : >"$plan"
  setup() { # setup <name> <fixture> <fixtures it needs> <cost> <command...>
    s_name=$1 s_fixture=$2 s_needs=$3 s_cost=$4
    shift 4
    printf 'add_test(setup/%s' "$s_name" >>"$plan"
    printf ' "%s"' "$@" >>"$plan"
    printf ')\nset_tests_properties(setup/%s PROPERTIES FIXTURES_SETUP "%s" FIXTURES_REQUIRED "%s"' \
      "$s_name" "$s_fixture" "$s_needs" >>"$plan"
    printf ' COST %s TIMEOUT 3600)\n' "$s_cost" >>"$plan"
  }
  cost() { case $1 in *tsan) echo 1000 ;; *asan) echo 900 ;; *aarch64) echo 800 ;; *) echo 700 ;; esac; }
  uv=""
  case " $* " in *" aarch64 "* | *" lua-aarch64 "*)
    uv=libuv-aarch64
    setup libuv-aarch64 libuv-aarch64 "" 800 "$ROOT/deps/libuv.sh" "$BUILD/deps-aarch64" \
      aarch64-linux-gnu- "$ROOT/cmake/aarch64-linux-gnu.cmake" ;;
  esac
  for p in "$@"; do
    needs=""
    case $p in
      lua-aarch64)
        needs="luajit-aarch64;$uv"
        setup luajit-aarch64 luajit-aarch64 "" 800 env LUAJIT_VARIANTS=check \
          "$ROOT/deps/luajit.sh" "$BUILD/deps-aarch64" aarch64-linux-gnu- ;;
      lua-*)
        needs="luajit-${p#lua-}"
        setup "$needs" "$needs" "" "$(cost "$p")" env LUAJIT_VARIANTS="${p#lua-}" \
          "$ROOT/deps/luajit.sh" "$BUILD/deps" ;;
      aarch64) needs=$uv ;;
    esac
    setup "build-$p" "built:$p" "$needs" "$(cost "$p")" cmake --build "$BUILD/$p" -j "$JOBS"
    printf 'subdirs("%s")\n' "$p" >>"$plan"
  done
}

# Every variant's tests in one ctest run (write_test_plan); each test's name starts with its
# variant ("tsan/stack.overflow_is_reported"), and the counts come from ctest's JUnit file.
cmd_test() {
  variants=${SMARM_TEST_VARIANTS:-"release asan tsan aarch64 valgrind lua lua-aarch64"}
  variants=$(echo " $variants " | sed 's/ lua / lua-release lua-check lua-asan lua-tsan /')
  presets=""
  for v in $variants; do
    case $v in
      release | asan | tsan | aarch64 | lua-release | lua-check | lua-asan | lua-tsan | lua-aarch64)
        p=$v ;;
      valgrind) p=release ;;
      *) say "unknown test variant '$v'"; exit 2 ;;
    esac
    case " $presets " in *" $p "*) ;; *) presets="$presets $p" ;; esac
  done
  install_packages build
  install_packages lua # libuv for every variant's IO tests, LuaJIT's tools, busted, rsvg-convert
  case " $variants " in *" aarch64 "* | *" valgrind "* | *" lua-aarch64 "*) install_packages test ;; esac
  case " $variants " in *" lua-release "*) install_packages rockspec ;; esac
  start=$(date +%s)
  mkdir -p "$BUILD"
  # configure every preset at once (the builds are steps of the ctest run)
  for p in $presets; do
    cmake --preset "$p" >"$BUILD/$p.log" 2>&1 && echo "$p" >"$BUILD/$p.configured" &
  done
  wait
  configured=""
  failed=""
  for p in $presets; do
    if [ -f "$BUILD/$p.configured" ]; then
      configured="$configured $p"
      rm -f "$BUILD/$p.configured"
    else
      say "configure $p FAILED:"
      tail -n 30 "$BUILD/$p.log" >&2
      failed="$failed $p"
    fi
  done
  # the LuaJIT tarball once, before its variants build side by side
  case "$configured" in *lua-*)
    LUAJIT_VARIANTS=fetch "$ROOT/deps/luajit.sh" "$BUILD/deps" >"$BUILD/deps.log" 2>&1 ||
      tail -n 30 "$BUILD/deps.log" >&2 ;; # the LuaJIT steps will fail and say why
  esac
  # shellcheck disable=SC2086
  write_test_plan $configured
  say "configured$configured ($(($(date +%s) - start)) s); building and testing (ctest -j" \
    "${SMARM_TEST_JOBS:-$((JOBS * 2))}, output in build/ctest.log)"
  names=$(echo "setup" $variants | sed 's/ /|/g')
  rm -f "$BUILD/ctest.xml"
  status=0
  [ -z "$configured" ] || ctest --test-dir "$BUILD" -R "^($names)/" -j "${SMARM_TEST_JOBS:-$((JOBS * 2))}" \
    --output-on-failure --no-label-summary --output-junit "$BUILD/ctest.xml" \
    >"$BUILD/ctest.log" 2>&1 || status=$?
  say "$(($(date +%s) - start)) s"
  # the failed tests' output: from a failed test's line up to the next test's
  awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / { show = $0 !~ / Passed / && $0 !~ /Skipped|Not Run \(Disabled\)/ }
    /^ *Start +[0-9]+: / { show = 0 } show' "$BUILD/ctest.log" >&2
  [ "$status" -eq 0 ] || sed -n '/^The following tests/,$p' "$BUILD/ctest.log" >&2
  tally "$BUILD/ctest.xml" "$failed" "$status"
}

# Prints each variant's counts and the total line from ctest's JUnit file: a test that ran and
# passed, failed (or timed out, crashed, or could not start), or was skipped (the C harness skips
# a case or the case is not compiled into that build); each variant that did not build and a
# ctest that failed without a failed test count one failure. Exits 1 if anything failed.
tally() {
  [ -f "$1" ] || : >"$1"
  awk -v builds="$2" -v status="$3" '
    /<testcase / {
      if (pending != "") fail[pending]++ # not run, and not skipped
      pending = ""
      v = $0
      sub(/.*<testcase name="/, "", v)
      sub(/[\/"].*/, "", v)
      if (!(v in seen)) { seen[v] = 1; order[++n] = v }
      st = $0
      sub(/.*status="/, "", st)
      sub(/".*/, "", st)
      if (st == "run") { if (v != "setup") pass[v]++ }
      else if (st == "notrun" || st == "disabled") pending = v
      else fail[v]++
      next
    }
    pending != "" && /<skipped message=/ {
      if ($0 ~ /SKIP_REGULAR_EXPRESSION_MATCHED|Disabled/) skip[pending]++
      else fail[pending]++
      pending = ""
      next
    }
    END {
      if (pending != "") fail[pending]++
      nb = split(builds, b, " ")
      for (i = 1; i <= nb; i++) { if (!(b[i] in seen)) order[++n] = b[i]; seen[b[i]] = 1; fail[b[i]]++ }
      for (i = 1; i <= n; i++) {
        v = order[i]
        if (v == "setup" && !fail[v]) continue # the deps and builds: shown when they fail
        printf "  %-12s %d passed, %d failed, %d skipped\n", v, pass[v], fail[v], skip[v] > "/dev/stderr"
        P += pass[v]; F += fail[v]; S += skip[v]
      }
      if (status != 0 && F == 0) F = 1
      printf "  (%d skipped)\n", S > "/dev/stderr"
      printf "%d passed, %d failed\n", P, F # CI reads this last line as it is
      exit (F > 0 ? 1 : 0)
    }' "$1"
}

# Runs a Lua benchmark script in plain mode; prints its output and keeps its lines in $results
# (a failing script fails the command).
lua_bench() {
  "$smarm" -n "$@" >"$results.last" || { cat "$results.last"; return 1; }
  tee -a "$results" <"$results.last"
}

cmd_bench() {
  cmd_build
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
  say "bench/spawn_on.lua (spawning on a chosen scheduler, beside smarm.spawn)"
  lua_bench "$ROOT/bench/spawn_on.lua"
  say "bench/c/touch_floor (first touches of 1,800 MiB by one thread, then two: under spread)"
  "$BUILD/release/bench/c/touch_floor"
  SMARM_TOUCH_THREADS=2 "$BUILD/release/bench/c/touch_floor"
  say "bench/c/echo_threads and bench/echo.lua (TCP echo: plain threads, then actors on the IO thread)"
  "$BUILD/release/bench/c/echo_threads" | tee -a "$results"
  "$BUILD/release/bench/c/echo_threads" udp | tee -a "$results"
  lua_bench "$ROOT/bench/echo.lua"
  say "bench/chat.lua (examples/chat.lua: 1,000 clients from a second process, fan-out latency)"
  lua_bench "$ROOT/bench/chat.lua"
  say "scale (${SMARM_SCALE_ACTORS:-1000000} parked actors)"
  "$BUILD/release/bench/c/scale"
  say "the Lua scenarios (lines in $results)"
  "$smarm" -n "$ROOT/bench/peers/compare.lua" "$results"
}

# smarm beside Go, Erlang, Tarantool and plain LuaJIT (bench/peers/README.md): every scenario
# for smarm and each peer in turn, SMARM_PEERS_ROUNDS times, then the comparison table.
cmd_bench_peers() {
  cmd_build
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
  # One program of the round: its result lines tagged round=N (compare.lua pairs smarm's lines
  # with a peer's of the same round: they ran minutes apart, on a machine whose speed may change
  # between rounds). A peer that fails leaves its cells empty; the table says so.
  peers_run() {
    what=$1
    shift
    "$@" >"$out/run.last" || say "$what FAILED"
    sed "/^scenario=/s/\$/ round=$round/" "$out/run.last" >>"$results"
  }
  while [ "$round" -le "$rounds" ]; do
    for scenario in switch_cost pingpong ring spawn skynet send_sizes; do
      say "round $round of $rounds: $scenario"
      peers_run "smarm $scenario" "$smarm" -n "$ROOT/bench/$scenario.lua"
      peers_run "go $scenario" "$out/go-peers" "$scenario"
      peers_run "erlang $scenario" "$ROOT/bench/peers/erlang/run.sh" "$out/beam" "$scenario"
      peers_run "tarantool $scenario" tarantool "$ROOT/bench/peers/tarantool/peers.lua" "$scenario"
      peers_run "luajit $scenario" "$smarm" -n "$ROOT/bench/peers/luajit.lua" "$scenario"
    done
    say "round $round of $rounds: spawn_on (smarm's own: no peer runs it)"
    peers_run "smarm spawn_on" "$smarm" -n "$ROOT/bench/spawn_on.lua"
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
  cmd_build
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
      luajit) install_packages build && install_packages lua &&
        { build_deps lua-release lua-check || { tail -n 30 "$BUILD/deps.log" >&2; exit 1; }; } ;;
      *) install_packages "${2:-build}" ;;
    esac ;;
  *) sed -n '2,/^set -eu$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
