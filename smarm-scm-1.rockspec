-- smarm for a LuaRocks tree, built from this checkout by the project's own CMake (one build,
-- one list of sources): `luarocks --lua-dir=<dir>/luajit-release make` after
-- `deps/luajit.sh <dir>`, which builds the LuaJIT smarm needs (cmake/luajit.cmake refuses any
-- other, and so does `require "smarm"`). It installs `require "smarm"` (lua/smarm/*.lua and the
-- binding smarm/core.so) and the smarm executable into the tree.
--
-- "scm": this rockspec builds the checkout it sits in, whatever its version; the version of a
-- release is SMARM_VERSION in src/smarm.h (the one place that says it), which a released rockspec
-- would copy along with a tag to fetch.
rockspec_format = "3.0"
package = "smarm"
version = "scm-1"
source = {
  -- what `luarocks make` builds is the directory of this file; the URL is for fetching a copy
  url = "git+file://.",
}
description = {
  summary = "Actors for LuaJIT on a C runtime of stackful actors and shared-nothing schedulers",
  detailed = [[
    smarm runs Lua functions as actors (spawn, send, receive, monitors, links, supervisors, timers
    and non-blocking IO) on several schedulers, one OS thread each, with preemption of busy
    actors. It needs LuaJIT 2.1 built by its deps/luajit.sh (the OpenResty branch of 2025-01-17
    with LUAJIT_ENABLE_CHECKHOOK and the VM's internal headers).
  ]],
  labels = { "actors", "concurrency", "luajit" },
}
supported_platforms = { "linux" }
dependencies = { "lua == 5.1" }
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    CMAKE_INSTALL_BINDIR = "$(BINDIR)",
    -- the tree's LuaJIT, as luarocks knows it; its internal headers and library are found
    -- from LUA_INCDIR (cmake/luajit.cmake)
    SMARM_LUAJIT_INCDIR = "$(LUA_INCDIR)",
    SMARM_LUAJIT_INTERPRETER = "$(LUA)",
    -- the Lua side only, where luarocks deploys it from
    SMARM_INSTALL_C = "OFF",
    SMARM_INSTALL_LMOD = "$(LUADIR)",
    SMARM_INSTALL_CMOD = "$(LIBDIR)",
    SMARM_TESTS = "OFF",
    SMARM_BENCH = "OFF",
    SMARM_SPECS = "OFF",
  },
}
