# `cmake --install`: what a host running kvpoold and a worker building against libkvpool
# need, and nothing else (no tests, no internal libraries).
#
#   bin/kvpoold, bin/kvpoolctl
#   lib/libkvpool.so*                       self-contained: kvpool_core is compiled in
#   include/kvpool/{client,block}.hpp       the public API, and the shared headers they
#   include/kvpool/core/*.hpp               (and TokenBlockSequence) include
#   lib/libkvpool_c.so*, include/kvpool/kvpool.h   the stable C ABI
#   lib/cmake/kvpool/                       find_package(kvpool) -> kvpool::client, kvpool::c
#   lib/pkgconfig/kvpool.pc                 pkg-config --cflags --libs kvpool
#   lib/pkgconfig/kvpool_c.pc               pkg-config --cflags --libs kvpool_c (the C ABI)
#   lib/systemd/system/kvpoold.service      ExecStart= and --config point into the prefix
#   lib/systemd/system/kvpool-events.service  (with libnats) ExecStart=, EnvironmentFile= too
#   lib/systemd/system/kvpool-exporter.service (with libmicrohttpd) ExecStart= too
#   lib/sysusers.d/kvpool.conf              user and group kvpool
#   etc/kvpool/kvpoold.json                 the default config (/etc/kvpool for prefix /usr)
#   etc/kvpool/kvpool-events.env            (with libnats) the forwarder's settings, commented
#   share/doc/kvpool/README.md, docs/   the README and the pages it links
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVPOOL_INSTALL_UNITDIR "lib/systemd/system" CACHE STRING
    "systemd unit directory, relative to the prefix or absolute")
set(KVPOOL_INSTALL_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "sysusers.d directory, relative to the prefix or absolute")
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_kvpool_configdir_default "/etc/kvpool")
else()
  set(_kvpool_configdir_default "etc/kvpool")
endif()
set(KVPOOL_INSTALL_CONFIGDIR "${_kvpool_configdir_default}" CACHE STRING
    "directory of kvpoold.json, relative to the prefix or absolute")

# ---- programs and the client library -------------------------------------------------------
# kvpoolctl links libkvpool: find it next door once installed, wherever the prefix is.
set_target_properties(kvpoolctl PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS kvpoold kvpoolctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# (Its include directory is the $<INSTALL_INTERFACE:include> of libclient/CMakeLists.txt.)
install(TARGETS kvpool EXPORT kvpoolTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/libclient/include/kvpool/client.hpp
              ${PROJECT_SOURCE_DIR}/libclient/include/kvpool/block.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvpool)
# Exactly what client.hpp and block.hpp include (transitively), plus token_block.hpp for
# TokenBlockSequence, which libkvpool also exports.
install(FILES ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/status.hpp
              ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/hash.hpp
              ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/block_state.hpp
              ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/dtype.hpp
              ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/layout.hpp
              ${PROJECT_SOURCE_DIR}/shared/include/kvpool/core/token_block.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvpool/core)

# The stable C ABI: libkvpool_c.so.<ABI major> and kvpool.h; it finds libkvpool next door.
if(TARGET kvpool_c)
  set_target_properties(kvpool_c PROPERTIES INSTALL_RPATH "$ORIGIN")
  # In the same export set as libkvpool: find_package(kvpool) gives kvpool::c too.
  install(TARGETS kvpool_c EXPORT kvpoolTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/libclient/include/kvpool/kvpool.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvpool)
endif()

# ---- find_package(kvpool) ------------------------------------------------------------------
set(_kvpool_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/kvpool)
install(EXPORT kvpoolTargets NAMESPACE kvpool:: FILE kvpoolTargets.cmake
        DESTINATION ${_kvpool_cmakedir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kvpoolConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvpoolConfig.cmake
                              INSTALL_DESTINATION ${_kvpool_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvpoolConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvpoolConfig.cmake
              ${PROJECT_BINARY_DIR}/kvpoolConfigVersion.cmake
        DESTINATION ${_kvpool_cmakedir})

# ---- files whose paths depend on the prefix chosen at install time -------------------------
# kvpool.pc, and the units with ExecStart= / --config / EnvironmentFile= inside the prefix,
# are written at install time, so `cmake --install BUILD --prefix P` gets paths under P.
# Units of the programs this build made (kvpool-events needs libnats, kvpool-exporter
# libmicrohttpd).
set(_kvpool_units kvpoold.service)
if(TARGET kvpool-events)
  list(APPEND _kvpool_units kvpool-events.service)
endif()
if(TARGET kvpool-exporter)
  list(APPEND _kvpool_units kvpool-exporter.service)
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/kvpool.pc.in ${PROJECT_BINARY_DIR}/kvpool.pc.template @ONLY)
set(_kvpool_pcs kvpool)
if(TARGET kvpool_c)
  # kvpool_c.pc's Version is the C ABI's (major.minor.0), as the library's file name.
  get_target_property(KVPOOL_C_VERSION kvpool_c VERSION)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/kvpool_c.pc.in ${PROJECT_BINARY_DIR}/kvpool_c.pc.template
                 @ONLY)
  list(APPEND _kvpool_pcs kvpool_c)
endif()
install(CODE "
  set(_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(_dest \"\$ENV{DESTDIR}\${_prefix}\")
  # kvpool.pc, kvpool_c.pc
  foreach(_name ${_kvpool_pcs})
    file(READ \"${PROJECT_BINARY_DIR}/\${_name}.pc.template\" _pc)
    string(REPLACE \"%PREFIX%\" \"\${_prefix}\" _pc \"\${_pc}\")
    message(STATUS \"Installing: \${_dest}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/\${_name}.pc\")
    file(WRITE \"\${_dest}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/\${_name}.pc\" \"\${_pc}\")
  endforeach()
  # The systemd units (cmake/KvpoolInstallUnits.cmake).
  set(_configdir \"${KVPOOL_INSTALL_CONFIGDIR}\")
  if(NOT IS_ABSOLUTE \"\${_configdir}\")
    set(_configdir \"\${_prefix}/\${_configdir}\")
  endif()
  set(_unitdir \"${KVPOOL_INSTALL_UNITDIR}\")
  if(IS_ABSOLUTE \"\${_unitdir}\")
    set(_unitdir \"\$ENV{DESTDIR}\${_unitdir}\")
  else()
    set(_unitdir \"\${_dest}/\${_unitdir}\")
  endif()
  set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
  set(_srcdir \"${PROJECT_SOURCE_DIR}/systemd\")
  set(_units \"${_kvpool_units}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/KvpoolInstallUnits.cmake\")
")

# ---- operating files -----------------------------------------------------------------------
install(FILES ${PROJECT_SOURCE_DIR}/systemd/kvpool.sysusers.conf
        DESTINATION ${KVPOOL_INSTALL_SYSUSERSDIR} RENAME kvpool.conf)
install(FILES ${PROJECT_SOURCE_DIR}/systemd/kvpoold.json DESTINATION ${KVPOOL_INSTALL_CONFIGDIR})
if(TARGET kvpool-events)
  # Every line commented out: the unit reads it (optional) for KVPOOL_WORKER_ID.
  install(FILES ${PROJECT_SOURCE_DIR}/systemd/kvpool-events.env DESTINATION ${KVPOOL_INSTALL_CONFIGDIR})
endif()
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
