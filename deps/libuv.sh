#!/bin/sh
# libuv for a cross build of the Lua binding: the aarch64 tests build the binding for arm64, and
# Debian's libuv1-dev is the host's only (installing the arm64 package next to the cross
# toolchain would mix two arm64 C libraries under qemu). Upstream libuv 1.44.2, Debian bookworm's
# version, from the orig tarball in the Debian archive the machine's apt sources name, verified
# by sha256 (the one bookworm's libuv1_1.44.2-1+deb12u1.dsc lists), built static with CMake:
#
#   <out>/libuv-<cross-prefix>/lib/libuv_a.a and include/
#
# Usage: deps/libuv.sh <out-dir> <cross-prefix> <cmake-toolchain-file>
# Idempotent: a build of this version for that prefix is left alone.
set -eu

VERSION=1.44.2
SHA256=d79b4b06ef04be85fb890bf39d55942cc64c2e15fd14eaa32dae5dce94485484
POOL_PATH="pool/main/libu/libuv1/libuv1_${VERSION}.orig.tar.gz"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: deps/libuv.sh <out-dir> <cross-prefix> <toolchain-file>}
CROSS=${2:?usage: deps/libuv.sh <out-dir> <cross-prefix> <toolchain-file>}
TOOLCHAIN=${3:?usage: deps/libuv.sh <out-dir> <cross-prefix> <toolchain-file>}
CACHE="$ROOT/deps/cache"
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)

say() { printf '%s\n' "libuv.sh: $*" >&2; }

# shellcheck source=deps/debian-pool.sh
. "$ROOT/deps/debian-pool.sh"

prefix="$OUT/libuv-${CROSS%-}"
if [ -f "$prefix/.version" ] && [ "$(cat "$prefix/.version")" = "$VERSION $CROSS" ]; then
  exit 0
fi
fetch_from_pool "$POOL_PATH" "$SHA256"
src="$OUT/src-libuv-${CROSS%-}"
rm -rf "$src" "$prefix"
mkdir -p "$src" "$prefix/lib"
tar -C "$src" --strip-components=1 -xzf "$CACHE/$(basename "$POOL_PATH")"
say "building libuv $VERSION for $CROSS"
log="$OUT/libuv-${CROSS%-}.build.log"
cmake -S "$src" -B "$src/build" -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DCMAKE_BUILD_TYPE=Release \
  -DLIBUV_BUILD_TESTS=OFF -DLIBUV_BUILD_BENCH=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
cmake --build "$src/build" --target uv_a -j "$(nproc 2>/dev/null || echo 2)" >>"$log" 2>&1 ||
  { tail -n 30 "$log" >&2; exit 1; }
cp "$src/build/libuv_a.a" "$prefix/lib/"
cp -r "$src/include" "$prefix/include"
echo "$VERSION $CROSS" >"$prefix/.version"
rm -rf "$src"
