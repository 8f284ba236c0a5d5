# Installing (issue #13): `cmake --install <build> [--prefix P]` puts in a prefix
#   lib/libsmarm.a, include/smarm.h     the C core, for C programs (src/smarm.h is its whole API)
#   lib/pkgconfig/smarm.pc              `pkg-config --cflags --libs smarm`
#   lib/cmake/smarm/                    `find_package(smarm)`, target smarm::smarm
# and, in a build with the Lua binding,
#   bin/smarm                           the executable; it finds the modules below by its own
#                                       place (src/lua/main.c)
#   share/lua/5.1/smarm/*.lua           the Lua modules, where a LuaJIT of the same prefix looks
#   lib/lua/5.1/smarm/core.so           the binding, for a luajit executable
# cmake/install-test.sh checks the C side both ways and the executable (a ctest test).
#
# The rockspec (smarm-scm-1.rockspec) installs through these same rules into a rock's directory:
# SMARM_INSTALL_C=OFF leaves the C library and its files out, and SMARM_INSTALL_LMOD and
# SMARM_INSTALL_CMOD put the Lua modules and core.so where luarocks wants them (its LUADIR and
# LIBDIR, from which it deploys them into the tree; the executable goes to its BINDIR).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
option(SMARM_INSTALL_C "Install the C library, smarm.h, the pkg-config file and the CMake package" ON)
set(SMARM_INSTALL_LMOD ${CMAKE_INSTALL_DATADIR}/lua/5.1 CACHE STRING
  "Where the Lua modules (smarm/*.lua) go, relative to the prefix or absolute")
set(SMARM_INSTALL_CMOD ${CMAKE_INSTALL_LIBDIR}/lua/5.1 CACHE STRING
  "Where the binding (smarm/core.so) goes, relative to the prefix or absolute")

# A sanitizer build's library needs the sanitizer's runtime in whatever links it: not for
# installing.
if(SMARM_ASAN OR SMARM_TSAN)
  install(CODE "message(FATAL_ERROR \"smarm: this is a sanitizer build (SMARM_ASAN or SMARM_TSAN); install a release build\")")
  return()
endif()

if(TARGET smarm_exe)
  install(TARGETS smarm_exe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(TARGETS smarm_lua_core LIBRARY DESTINATION ${SMARM_INSTALL_CMOD}/smarm)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/lua/smarm DESTINATION ${SMARM_INSTALL_LMOD}
    FILES_MATCHING PATTERN "*.lua")
endif()
if(NOT SMARM_INSTALL_C)
  return()
endif()

install(TARGETS smarm EXPORT smarmTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/src/smarm.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(SMARM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/smarm)
install(EXPORT smarmTargets NAMESPACE smarm:: DESTINATION ${SMARM_CMAKE_DIR})
file(WRITE ${CMAKE_BINARY_DIR}/smarmConfig.cmake
  "include(CMakeFindDependencyMacro)\n"
  "find_dependency(Threads)\n"
  "include(\"\${CMAKE_CURRENT_LIST_DIR}/smarmTargets.cmake\")\n")
write_basic_package_version_file(${CMAKE_BINARY_DIR}/smarmConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/smarmConfig.cmake ${CMAKE_BINARY_DIR}/smarmConfigVersion.cmake
  DESTINATION ${SMARM_CMAKE_DIR})

# The prefix is the .pc file's own place, so that `cmake --install --prefix` anywhere works.
file(WRITE ${CMAKE_BINARY_DIR}/smarm.pc
  "prefix=\${pcfiledir}/../..\n"
  "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}\n"
  "includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}\n\n"
  "Name: smarm\n"
  "Description: stackful actors on shared-nothing schedulers (the C core)\n"
  "Version: ${PROJECT_VERSION}\n"
  "Libs: -L\${libdir} -lsmarm -pthread${SMARM_PC_LIBRT}\n"
  "Cflags: -I\${includedir}\n")
install(FILES ${CMAKE_BINARY_DIR}/smarm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
