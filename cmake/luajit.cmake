# The LuaJIT the Lua binding is built for, and the build's refusal of one that lacks what smarm
# needs (cmake/luajit-check.cmake, at configure and before every build of the binding).
#
# A prefix from deps/luajit.sh (SMARM_LUAJIT_DIR) has all of it: the public headers in
# include/luajit-2.1, the VM's internal headers in include/luajit-internal (src/lua/ljx.c is
# compiled with them), the static library in lib (the smarm executable links it) and the
# interpreter in bin. The rockspec names the parts as luarocks knows them (LUA_INCDIR and LUA; it
# does not always know LUA_LIBDIR) for a tree whose LuaJIT is such a prefix: the internal headers
# and the library are found by the prefix's layout from the public headers.
#
# Sets SMARM_LUAJIT_INCLUDE, SMARM_LUAJIT_INTERNAL_INCLUDE, SMARM_LUAJIT_LIBRARY and the target
# smarm_luajit_checked, which the binding's objects depend on.
set(SMARM_LUAJIT_INCDIR "" CACHE PATH "LuaJIT's luajit.h (empty: <SMARM_LUAJIT_DIR>/include/luajit-2.1)")
set(SMARM_LUAJIT_LIBDIR "" CACHE PATH
  "LuaJIT's libluajit-5.1.a (empty: <SMARM_LUAJIT_DIR>/lib, or lib beside the headers' include)")
set(SMARM_LUAJIT_INTERPRETER "" CACHE FILEPATH
  "LuaJIT's interpreter, run to check the VM (empty: <SMARM_LUAJIT_DIR>/bin/luajit)")
# SMARM_LUAJIT_CHECKHOOK=0, in the environment as for deps/luajit.sh and `require "smarm"`, or
# -DSMARM_LUAJIT_CHECKHOOK=OFF: accept the LuaJIT without it that deps/luajit.sh builds then.
set(checkhook_default ON)
if("$ENV{SMARM_LUAJIT_CHECKHOOK}" STREQUAL "0")
  set(checkhook_default OFF)
endif()
option(SMARM_LUAJIT_CHECKHOOK "Refuse a LuaJIT built without LUAJIT_ENABLE_CHECKHOOK"
  ${checkhook_default})

set(SMARM_LUAJIT_INCLUDE ${SMARM_LUAJIT_DIR}/include/luajit-2.1)
if(SMARM_LUAJIT_INCDIR)
  set(SMARM_LUAJIT_INCLUDE ${SMARM_LUAJIT_INCDIR})
endif()
get_filename_component(SMARM_LUAJIT_INTERNAL_INCLUDE ${SMARM_LUAJIT_INCLUDE}/../luajit-internal ABSOLUTE)
set(SMARM_LUAJIT_LIBRARY ${SMARM_LUAJIT_DIR}/lib/libluajit-5.1.a)
if(NOT SMARM_LUAJIT_DIR)
  # the prefix's layout (make install): <prefix>/include/luajit-2.1, <prefix>/lib
  get_filename_component(SMARM_LUAJIT_LIBRARY ${SMARM_LUAJIT_INCLUDE}/../../lib/libluajit-5.1.a ABSOLUTE)
endif()
if(SMARM_LUAJIT_LIBDIR)
  set(SMARM_LUAJIT_LIBRARY ${SMARM_LUAJIT_LIBDIR}/libluajit-5.1.a)
endif()
set(SMARM_LUAJIT_EXE ${SMARM_LUAJIT_DIR}/bin/luajit)
if(SMARM_LUAJIT_INTERPRETER)
  set(SMARM_LUAJIT_EXE ${SMARM_LUAJIT_INTERPRETER})
endif()

set(SMARM_SOURCE_DIR ${PROJECT_SOURCE_DIR})

# At configure, when the LuaJIT is there: a refusal then stops before anything builds.
if(EXISTS ${SMARM_LUAJIT_INCLUDE}/luajit.h)
  include(${PROJECT_SOURCE_DIR}/cmake/luajit-check.cmake)
  message(STATUS "smarm: the Lua binding is for ${SMARM_LUAJIT_VERSION} (${SMARM_LUAJIT_INCLUDE})")
else()
  message(STATUS "smarm: no LuaJIT at ${SMARM_LUAJIT_INCLUDE} yet; it is checked when the binding builds")
endif()
# Before every build of the binding (a few milliseconds): the LuaJIT may be built, or rebuilt,
# after the configure.
string(REPLACE ";" "|" emulator "${SMARM_EMULATOR}")
add_custom_target(smarm_luajit_checked
  COMMAND ${CMAKE_COMMAND} -DSMARM_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DSMARM_LUAJIT_INCLUDE=${SMARM_LUAJIT_INCLUDE}
    -DSMARM_LUAJIT_INTERNAL_INCLUDE=${SMARM_LUAJIT_INTERNAL_INCLUDE}
    -DSMARM_LUAJIT_LIBRARY=${SMARM_LUAJIT_LIBRARY} -DSMARM_LUAJIT_EXE=${SMARM_LUAJIT_EXE}
    -DSMARM_LUAJIT_CHECKHOOK=${SMARM_LUAJIT_CHECKHOOK} "-DSMARM_EMULATOR=${emulator}"
    -P ${PROJECT_SOURCE_DIR}/cmake/luajit-check.cmake
  COMMENT "Checking the LuaJIT of ${SMARM_LUAJIT_INCLUDE} (cmake/luajit-check.cmake)" VERBATIM)
