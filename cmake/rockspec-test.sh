#!/bin/sh
# rockspec-test.sh SOURCE_DIR LUAJIT_DIR: what a LuaRocks user gets from smarm-scm-1.rockspec,
# offline and with no write outside a temporary folder (ctest's <variant>/rockspec):
#   1. `luarocks make` into a fresh tree for the LuaJIT of LUAJIT_DIR (deps/luajit.sh's prefix),
#      from a copy of the source tree (luarocks builds in the rockspec's folder);
#   2. with that LuaJIT and the tree's paths (`luarocks path`), a script that requires smarm from
#      the tree and runs actors on two schedulers (spawn, send, receive); the tree's smarm
#      executable runs it too;
#   3. Debian's own LuaJIT (bookworm's 2.1.0-beta3: luajit, libluajit-5.1-dev) refused, with a
#      message that names both missing fixes: by `luarocks make` (the build) and by
#      `require "smarm"` of the modules just installed (no crash: it refuses before loading
#      core.so).
set -eu
src=$1
luajit_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'rockspec-test: %s\n' "$*" >&2; exit 1; }
command -v luarocks >/dev/null || fail "luarocks is not installed (Debian: luarocks, deps/debian-rockspec.txt)"
if [ ! -x /usr/bin/luajit ] || [ ! -f /usr/include/luajit-2.1/luajit.h ]; then
  fail "Debian's LuaJIT is not installed (luajit, libluajit-5.1-dev: deps/debian-rockspec.txt)"
fi

# luarocks and cmake write only under $tmp: its own home, no user configuration, no network
# (--deps-mode=none: smarm has no rock dependencies to fetch).
export HOME="$tmp/home"
mkdir -p "$HOME"
printf '' >"$tmp/config.lua"
export LUAROCKS_CONFIG="$tmp/config.lua"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
# Without link-time optimisation: what this tests is the packaging, and the optimised links of
# the executable and core.so against LuaJIT's intermediate form took minutes of a test run (the
# release variants test the optimised build).
export SMARM_LTO=OFF
# the copy (with files not yet committed, without build outputs)
copy() {
  mkdir -p "$1"
  tar -C "$src" --exclude=./build --exclude=./build.luarocks --exclude=./.git \
    --exclude=./deps/cache -cf - . | tar -C "$1" -xf -
}
copy "$tmp/src"

# 1. the pinned LuaJIT
tree="$tmp/tree"
rocks() { luarocks --lua-dir="$luajit_dir" --tree="$tree" "$@"; }
(cd "$tmp/src" && rocks make --deps-mode=none smarm-scm-1.rockspec) >"$tmp/make.log" 2>&1 ||
  { tail -n 40 "$tmp/make.log" >&2; fail "luarocks make failed (above)"; }
for f in "$tree/lib/lua/5.1/smarm/core.so" "$tree/share/lua/5.1/smarm/init.lua" "$tree/bin/smarm"; do
  [ -e "$f" ] || fail "luarocks make did not install $f"
done
echo "luarocks make: ok"

# 2. a script on the tree's LuaJIT: every module from the tree, actors on both schedulers
cat >"$tmp/actors.lua" <<'LUA'
local tree = assert(arg[1])
local from = { { "smarm", package.path } }
if not package.preload["smarm.core"] then -- (the smarm executable carries it linked in)
  from[2] = { "smarm.core", package.cpath }
end
for _, m in ipairs(from) do
  local file = package.searchpath(m[1], m[2])
  assert(file and file:sub(1, #tree) == tree, m[1] .. " found at " .. tostring(file) .. ", not in " .. tree)
end
local smarm = require("smarm")
local sum = smarm.run(function()
  local me = smarm.self()
  for i = 1, 10 do
    smarm.spawn_on(i % 2 + 1, function(n) smarm.send(me, n * 10 + smarm.scheduler()) end, i)
  end
  local total = 0
  for _ = 1, 10 do total = total + smarm.receive() end
  return total
end, { schedulers = 2 })
-- 10 * (1 + ... + 10) from the numbers, five replies from each scheduler: 5 * 1 + 5 * 2
assert(sum == 565, "the actors' replies add up to " .. tostring(sum) .. ", not 565")
print("actors on " .. jit.version .. ": ok")
LUA
eval "$(rocks path)"
export LUA_PATH LUA_CPATH
(cd "$tmp" && "$luajit_dir/bin/luajit" actors.lua "$tree") || fail "the script failed on $luajit_dir/bin/luajit"
# the executable runs it in plain mode (-n: the script starts the runtime)
out=$(cd "$tmp" && "$tree/bin/smarm" -n actors.lua "$tree" 2>&1) || { echo "$out" >&2; fail "the tree's smarm failed"; }
echo "$out" | sed 's/^/smarm executable: /'

# 3. Debian's LuaJIT
refusal_names_both() { # <what> <file>
  for want in "LuaJIT 2.1.0-beta3" "restores cur_L" "LUAJIT_ENABLE_CHECKHOOK" "deps/luajit.sh"; do
    grep -q "$want" "$2" || { cat "$2" >&2; fail "$1: the refusal does not say '$want'"; }
  done
}
cat >"$tmp/debian.lua" <<'LUA'
lua_interpreter = "luajit"
variables = { LUA_DIR = "/usr", LUA_BINDIR = "/usr/bin", LUA_INCDIR = "/usr/include/luajit-2.1" }
LUA
copy "$tmp/src-debian"
if (cd "$tmp/src-debian" && LUAROCKS_CONFIG="$tmp/debian.lua" luarocks --lua-version=5.1 \
  --tree="$tmp/tree-debian" make --deps-mode=none smarm-scm-1.rockspec) >"$tmp/debian-make.log" 2>&1; then
  fail "luarocks make for Debian's LuaJIT succeeded"
fi
refusal_names_both "luarocks make for Debian's LuaJIT" "$tmp/debian-make.log"
echo "luarocks make for Debian's LuaJIT: refused"
status=0
(cd "$tmp" && /usr/bin/luajit -e 'require "smarm"') >"$tmp/debian-require.log" 2>&1 || status=$?
[ "$status" -eq 1 ] || { cat "$tmp/debian-require.log" >&2; fail "require on Debian's LuaJIT: exit status $status, not 1"; }
refusal_names_both "require on Debian's LuaJIT" "$tmp/debian-require.log"
echo "require \"smarm\" on Debian's LuaJIT: refused"
sed -n '1,/^stack traceback/p' "$tmp/debian-require.log" | sed '$d'
