#!/bin/sh
# LuaJIT for smarm, from pinned source: Debian trixie's orig tarball of the OpenResty LuaJIT 2.1
# branch (2025-01-17), which restores cur_L when a C function raises after a stack switch
# (upstream fix after 2023-09-21; Debian bookworm's packaged LuaJIT crashes there, so it is never
# linked). The tarball is fetched from the Debian archive the machine's apt sources name (no host
# is written here), verified by sha256, patched (deps/patches/), and built twice as static libraries plus interpreters:
#
#   <out>/luajit-release   the build smarm links and benchmarks
#   <out>/luajit-check     LUA_USE_APICHECK + LUA_USE_ASSERT: catches binding mistakes the
#                          release build hides; the Lua specs run against both
#   <out>/luajit-asan      the checking build compiled with AddressSanitizer and the system
#                          allocator (LUAJIT_USE_SYSMALLOC), so that ASan sees every block: the
#                          specs run the ASan+UBSan build of the binding on it (only when asked)
#   <out>/luajit-tsan      the same with ThreadSanitizer, for the binding's TSan build
#
# Usage: deps/luajit.sh <out-dir> [cross-prefix]   (e.g. build/deps; aarch64-linux-gnu-)
# LUAJIT_VARIANTS names the variants to build (default "release check"; "asan" and "tsan" are not
# built for a cross prefix; "fetch" only downloads the tarball, so that several variants can then
# build at once). Idempotent: a variant already installed with this version is left alone.
set -eu

VERSION=2.1.0+openresty20250117
SHA256=99ad5fdfa85e08a291454f797f625fbb53f4d2129cac063922255a1fe34ccf1c
TARBALL="luajit_${VERSION}.orig.tar.xz"
POOL_PATH="pool/main/l/luajit/$TARBALL"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: deps/luajit.sh <out-dir> [cross-prefix]}
CROSS=${2:-}
CACHE="$ROOT/deps/cache"
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)

# Our fixes to it (deps/patches/luajit-*.patch, each saying why; spec/luajit/test_patches.c
# checks them): a change to any rebuilds every variant.
PATCHES_SUM=$(cat "$ROOT"/deps/patches/luajit-*.patch | sha256sum | cut -c1-16)

say() { printf '%s\n' "luajit.sh: $*" >&2; }

# shellcheck source=deps/debian-pool.sh
. "$ROOT/deps/debian-pool.sh"

# build <variant> <extra XCFLAGS> [<extra flags for the target compiler> [<its link's flags>]]
build() {
  variant=$1
  xcflags=$2
  ccflags=${3:-}
  ldflags=${4:-}
  prefix="$OUT/luajit-$variant"
  stamp="$VERSION $CROSS $xcflags $ccflags $ldflags internal-headers $PATCHES_SUM"
  if [ -f "$prefix/.version" ] && [ "$(cat "$prefix/.version")" = "$stamp" ]; then
    return 0
  fi
  src="$OUT/src-$variant"
  rm -rf "$src" "$prefix"
  mkdir -p "$src"
  tar -C "$src" --strip-components=1 -xf "$CACHE/$TARBALL"
  for p in "$ROOT"/deps/patches/luajit-*.patch; do
    patch -d "$src" -p1 -s <"$p" || { say "$p does not apply"; exit 1; }
  done
  say "building $variant${CROSS:+ for $CROSS}"
  hostcc=""
  [ -n "$CROSS" ] && hostcc="HOST_CC=gcc CROSS=$CROSS"
  # sanitizer flags for the target only: the build's own tools (minilua, buildvm) stay plain
  [ -n "$ccflags" ] && hostcc="HOST_CC=gcc"
  # Frame pointers so perf can walk through the VM's C functions; static so smarm links one copy.
  # shellcheck disable=SC2086
  make -C "$src" -j "$(nproc 2>/dev/null || echo 2)" $hostcc PREFIX="$prefix" BUILDMODE=static \
    ${ccflags:+CC="gcc $ccflags"} ${ldflags:+TARGET_LDFLAGS="$ldflags"} \
    XCFLAGS="-fno-omit-frame-pointer $xcflags" >"$OUT/luajit-$variant.build.log" 2>&1 ||
    { tail -n 30 "$OUT/luajit-$variant.build.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  make -C "$src" install $hostcc PREFIX="$prefix" >>"$OUT/luajit-$variant.build.log" 2>&1 ||
    { tail -n 30 "$OUT/luajit-$variant.build.log" >&2; exit 1; }
  # The binding's one file of LuaJIT internals (src/lua/ljx.c) needs the VM's private headers,
  # including the generated ones, exactly as this variant was built.
  mkdir -p "$prefix/include/luajit-internal"
  cp "$src"/src/*.h "$prefix/include/luajit-internal/"
  echo "$stamp" >"$prefix/.version"
  rm -rf "$src"
}

fetch_from_pool "$POOL_PATH" "$SHA256"
# Every variant checks the hook mask in compiled code (LUAJIT_ENABLE_CHECKHOOK), so that a hook
# armed from a signal handler stops compiled loops too: smarm's preemption (src/lua/lpreempt.c).
# SMARM_LUAJIT_CHECKHOOK=0 builds without it (for measuring what it costs; nothing compiled in a
# loop is then preempted). smarm's build and `require "smarm"` refuse such a LuaJIT unless
# SMARM_LUAJIT_CHECKHOOK=0 is in their environment too (lua/smarm/luajit_check.lua).
CK="-DLUAJIT_ENABLE_CHECKHOOK"
[ "${SMARM_LUAJIT_CHECKHOOK:-1}" = 0 ] && CK=""
# The release variant's C parts are compiled for link-time optimisation as well as plainly (fat
# objects): smarm's optimised builds (SMARM_LTO) then inline the Lua C API's small functions
# (index2adr, lua_type, lua_settop) into the smarm executable, and a link with -fno-lto uses the
# plain code (docs/perf.md, "Optimised across files"). Its own luajit links so: GCC's linker
# plugin would otherwise optimise the whole VM again, in one serial job, at every build (61 s
# for the variant instead of 25 s). The checking variants stay plain: what they are for is
# LuaJIT's own assertions.
for v in ${LUAJIT_VARIANTS:-release check}; do
  case $v in
    release) build release "$CK -flto=auto -ffat-lto-objects" "" -fno-lto ;;
    check) build check "$CK -DLUA_USE_APICHECK -DLUA_USE_ASSERT" ;;
    asan | tsan)
      [ -z "$CROSS" ] || continue
      build "$v" "$CK -DLUA_USE_APICHECK -DLUA_USE_ASSERT -DLUAJIT_USE_SYSMALLOC" \
        "-fsanitize=$([ "$v" = asan ] && echo address || echo thread)" ;;
    fetch) ;;
    *) say "unknown variant '$v'"; exit 2 ;;
  esac
done
