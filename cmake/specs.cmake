# The Lua specs (spec/*_spec.lua) as ctest tests of a build with the binding, one test per file
# ("<variant>/<file>", e.g. "lua-check/actor_spec"), run from the source tree:
#   native: busted on the LuaJIT interpreter of SMARM_LUAJIT_DIR, with this build's smarm/core.so;
#   cross:  spec/support/runner.lua (busted's C modules exist only for the host) on this build's
#           smarm executable under CMAKE_CROSSCOMPILING_EMULATOR.
# SMARM_EXE names the smarm executable (a command line under qemu) for the specs that start one.
# The sanitizer builds run with their options: ASan without leak checks (busted's own VM is never
# closed; the C tests check leaks), TSan stopping at the first report.
file(GLOB smarm_specs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/spec/*_spec.lua)
# Specs that hold thousands of descriptors and connections: one at a time, across all variants.
set(SMARM_FD_HUNGRY_SPECS tcp_spec)

set(lua_path "${PROJECT_SOURCE_DIR}/lua/?.lua;${PROJECT_SOURCE_DIR}/lua/?/init.lua")
set(spec_env "")
# The descriptor limit: the hard limit, capped where the build is slow (TSan's memory per
# connection, qemu's time; 2000 is what the connection specs are sized to there).
set(fd_cap 0)
if(SMARM_ASAN)
  # SMARM_SANITIZER=asan: ASan's quarantine keeps freed memory from reuse (process_spec's bound
  # on resident memory cannot hold)
  list(APPEND spec_env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 SMARM_SANITIZER=asan)
endif()
if(SMARM_TSAN)
  # SMARM_SANITIZER: specs that cannot hold under TSan say so (preempt_spec: TSan runs a signal
  # handler only at the thread's next interceptor, and a pure Lua loop passes none); TSan's
  # options are the C tests' (CMakeLists.txt)
  list(APPEND spec_env ${SMARM_TSAN_OPTIONS} SMARM_SANITIZER=tsan)
  set(fd_cap 2000)
endif()

if(CMAKE_CROSSCOMPILING)
  set(fd_cap 2000)
  set(runner ${SMARM_EMULATOR} $<TARGET_FILE:smarm_exe> -n spec/support/runner.lua)
  string(REPLACE ";" " " smarm_exe_line "${SMARM_EMULATOR};$<TARGET_FILE:smarm_exe>")
else()
  find_program(SMARM_BUSTED busted REQUIRED)
  set(runner ${SMARM_LUAJIT_DIR}/bin/luajit ${SMARM_BUSTED} -o plainTerminal)
  set(smarm_exe_line $<TARGET_FILE:smarm_exe>)
  # busted's own modules (Debian's lua-busted) after ours
  set(lua_path "${lua_path};/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua")
  set(lua_cpath "${CMAKE_BINARY_DIR}/lua/?.so;/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/lua/5.1/?.so")
  string(REPLACE ";" "\\;" lua_cpath "${lua_cpath}")
  list(APPEND spec_env "LUA_CPATH=${lua_cpath}")
endif()
string(REPLACE ";" "\\;" lua_path "${lua_path}")
list(APPEND spec_env "LUA_PATH=${lua_path}" "SMARM_EXE=${smarm_exe_line}")

foreach(spec ${smarm_specs})
  get_filename_component(name ${spec} NAME_WE)
  set(test ${SMARM_VARIANT}/${name})
  add_test(NAME ${test} COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/fd-limit.sh ${fd_cap} ${runner}
    spec/${name}.lua WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  math(EXPR cost "2 * ${SMARM_TEST_SLOWNESS}")
  set_tests_properties(${test} PROPERTIES TIMEOUT ${SMARM_TEST_TIMEOUT} COST ${cost}
    ENVIRONMENT "${spec_env}" LABELS "lua;${name}" FIXTURES_REQUIRED ${SMARM_BUILT_FIXTURE})
  if(name IN_LIST SMARM_FD_HUNGRY_SPECS)
    math(EXPR cost "10 * ${SMARM_TEST_SLOWNESS}")
    set_tests_properties(${test} PROPERTIES RESOURCE_LOCK descriptors COST ${cost})
  endif()
endforeach()
