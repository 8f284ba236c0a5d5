#!/bin/sh
# install-test.sh BUILD_DIR SOURCE_DIR: installs the build into a fresh prefix and checks what C
# users and Lua users get there (cmake/install.cmake): examples/hello.c built with pkg-config and
# with find_package(smarm), each run; the installed smarm executable, run from elsewhere, loading
# its installed modules.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

pc=$(dirname "$(find "$prefix" -name smarm.pc)")
# shellcheck disable=SC2046
cc -o "$tmp/hello-pc" "$src/examples/hello.c" $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs smarm)
"$tmp/hello-pc" | grep -q "hello, world"
echo "pkg-config: ok"

mkdir "$tmp/proj"
cp "$src/examples/hello.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(hello C)
find_package(smarm 0.1 REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello smarm::smarm)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/proj/build" >/dev/null
"$tmp/proj/build/hello" | grep -q "hello, world"
echo "find_package: ok"

if [ -x "$prefix/bin/smarm" ]; then
  out=$(cd "$tmp" && "$prefix/bin/smarm" -e 'print(package.searchpath("smarm.cli", package.path))')
  case $out in
    "$prefix"/*) echo "smarm executable: ok ($out)" ;;
    *) echo "the installed smarm loads its modules from $out, not from $prefix" >&2; exit 1 ;;
  esac
fi
