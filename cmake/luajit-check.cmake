# The build's refusal of a LuaJIT that lacks what smarm needs (lua/smarm/luajit_check.lua says
# what and why; `require "smarm"` checks it again). cmake/luajit.cmake runs it at configure when
# the LuaJIT is already there (luarocks, a LuaJIT built beforehand) and, as `cmake -P`, before
# every build of the binding (./dev.sh test configures before it builds the LuaJITs).
# In: SMARM_SOURCE_DIR, SMARM_LUAJIT_INCLUDE, SMARM_LUAJIT_INTERNAL_INCLUDE, SMARM_LUAJIT_LIBRARY,
# SMARM_LUAJIT_EXE (the interpreter), SMARM_LUAJIT_CHECKHOOK, SMARM_EMULATOR ("|" between its
# words). Out: SMARM_LUAJIT_VERSION ("LuaJIT 2.1.1737090214").
string(REPLACE "|" ";" emulator "${SMARM_EMULATOR}")

function(smarm_refuse_luajit) # the message's parts
  string(CONCAT why ${ARGN})
  message(FATAL_ERROR "smarm: cannot build the Lua binding for the LuaJIT of ${SMARM_LUAJIT_INCLUDE}: "
    "${why}\nBuild the pinned LuaJIT with `deps/luajit.sh <dir>` and configure with "
    "-DSMARM_LUAJIT_DIR=<dir>/luajit-release (luarocks: `luarocks --lua-dir=<dir>/luajit-release make`).")
endfunction()

# "LuaJIT 2.1.1737090214" from a luajit.h
function(smarm_luajit_version header out)
  file(STRINGS ${header} line REGEX "^#define[ \t]+LUAJIT_VERSION[ \t]+\"")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" version "${line}")
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

if(NOT EXISTS ${SMARM_LUAJIT_INCLUDE}/luajit.h OR NOT EXISTS ${SMARM_LUAJIT_INCLUDE}/lua.h)
  smarm_refuse_luajit("there is no luajit.h and lua.h there")
endif()
smarm_luajit_version(${SMARM_LUAJIT_INCLUDE}/luajit.h SMARM_LUAJIT_VERSION)

# 1. What lua/smarm/luajit_check.lua checks at require, run first for its fuller message: the
#    cur_L fix by the version, and LUAJIT_ENABLE_CHECKHOOK, which leaves no mark in the headers:
#    the interpreter compiles a loop and the check reads its trace (under the emulator in a cross
#    build). The interpreter must be of the headers' LuaJIT, or that says nothing about them.
if(EXISTS ${SMARM_LUAJIT_EXE})
  set(check_env "")
  if(NOT SMARM_LUAJIT_CHECKHOOK)
    set(check_env SMARM_LUAJIT_CHECKHOOK=0)
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ${check_env} ${emulator} ${SMARM_LUAJIT_EXE} -e
      "package.path = '${SMARM_SOURCE_DIR}/lua/?.lua;' .. package.path
       local refusal = require('smarm.luajit_check').message()
       if refusal then io.stderr:write(refusal, '\\n') os.exit(1) end
       io.write(jit.version)"
    RESULT_VARIABLE rc OUTPUT_VARIABLE interpreter_version ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "smarm: ${SMARM_LUAJIT_EXE} (the interpreter of the LuaJIT the binding "
      "would be built for) says:\n${err}")
  endif()
  if(NOT interpreter_version STREQUAL SMARM_LUAJIT_VERSION)
    smarm_refuse_luajit("its interpreter ${SMARM_LUAJIT_EXE} is ${interpreter_version}, "
      "its headers say ${SMARM_LUAJIT_VERSION}")
  endif()
else()
  message(WARNING "smarm: no LuaJIT interpreter at ${SMARM_LUAJIT_EXE} (SMARM_LUAJIT_INTERPRETER): "
    "whether that LuaJIT is built with LUAJIT_ENABLE_CHECKHOOK is left to `require \"smarm\"`")
endif()

# 2. The cur_L fix, by the version luajit.h states (the same rule as the require-time check, whose
#    file holds the date), also where the interpreter could not run.
file(STRINGS ${SMARM_SOURCE_DIR}/lua/smarm/luajit_check.lua fix_line REGEX "^M.cur_l_fix_time = [0-9]+")
string(REGEX REPLACE "^M.cur_l_fix_time = ([0-9]+).*" "\\1" fix_time "${fix_line}")
string(REGEX MATCH "^LuaJIT 2\\.1\\.([0-9]+)$" release "${SMARM_LUAJIT_VERSION}")
if(NOT release OR CMAKE_MATCH_1 LESS fix_time)
  smarm_refuse_luajit("${SMARM_LUAJIT_VERSION} lacks the fix that restores cur_L when a C function "
    "raises after a stack switch (LuaJIT 2.1 from 2023-09-22 on has it: without it such a raise "
    "crashes the VM)")
endif()

# 2b. luaJIT_copyclosure, which smarm's patch adds (deps/patches/luajit-copy-closure.patch; the
#     require-time check looks for the symbol itself).
file(STRINGS ${SMARM_LUAJIT_INCLUDE}/luajit.h copy_line REGEX "luaJIT_copyclosure")
if(NOT copy_line)
  smarm_refuse_luajit("its luajit.h lacks luaJIT_copyclosure, which smarm's patch to LuaJIT adds "
    "(deps/patches/luajit-copy-closure.patch)")
endif()

# 3. The VM's internal headers, of this very build.
if(NOT EXISTS ${SMARM_LUAJIT_INTERNAL_INCLUDE}/lj_obj.h OR
   NOT EXISTS ${SMARM_LUAJIT_INTERNAL_INCLUDE}/luajit.h)
  smarm_refuse_luajit("the VM's internal headers are not in ${SMARM_LUAJIT_INTERNAL_INCLUDE} "
    "(src/lua/ljx.c needs them, and deps/luajit.sh installs them there)")
endif()
smarm_luajit_version(${SMARM_LUAJIT_INTERNAL_INCLUDE}/luajit.h internal_version)
if(NOT internal_version STREQUAL SMARM_LUAJIT_VERSION)
  smarm_refuse_luajit("the internal headers in ${SMARM_LUAJIT_INTERNAL_INCLUDE} are of "
    "${internal_version}, not of ${SMARM_LUAJIT_VERSION}")
endif()
# 3b. The collector's count of finalizers, which smarm's patch adds to lj_obj.h
#     (deps/patches/luajit-finalizer-count.patch; ljx.c compares it while the codec walks a table).
file(STRINGS ${SMARM_LUAJIT_INTERNAL_INCLUDE}/lj_obj.h finalized_line REGEX "nfinalized")
if(NOT finalized_line)
  smarm_refuse_luajit("its lj_obj.h lacks the collector's nfinalized, which smarm's patch to "
    "LuaJIT adds (deps/patches/luajit-finalizer-count.patch)")
endif()

# 4. The library the smarm executable links.
if(NOT EXISTS ${SMARM_LUAJIT_LIBRARY})
  smarm_refuse_luajit("there is no ${SMARM_LUAJIT_LIBRARY} (the smarm executable links it: "
    "SMARM_LUAJIT_LIBDIR names its folder)")
endif()

