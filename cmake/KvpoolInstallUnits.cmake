# Run by `cmake --install` (install(CODE) in KvpoolInstall.cmake): writes the systemd units
# with the paths of the prefix chosen at install time. The sources name /usr/bin and
# /etc/kvpool (what a Debian package would use); here ExecStart= gets <prefix>/<bindir>,
# and --config / EnvironmentFile= get the config directory.
# In: _prefix, _dest (DESTDIR + prefix), _bindir, _configdir (absolute), _unitdir (with
# DESTDIR), _units (file names), _srcdir (systemd/ of the source tree).
foreach(_u IN LISTS _units)
  file(READ "${_srcdir}/${_u}" _unit)
  set(_before "${_unit}")
  string(REPLACE "\nExecStart=/usr/bin/" "\nExecStart=${_prefix}/${_bindir}/" _unit "${_unit}")
  string(REPLACE "--config /etc/kvpool/" "--config ${_configdir}/" _unit "${_unit}")
  string(REPLACE "\nEnvironmentFile=-/etc/kvpool/" "\nEnvironmentFile=-${_configdir}/" _unit "${_unit}")
  # A unit whose ExecStart= no longer matches would install pointing at /usr/bin: refuse.
  if(_unit STREQUAL _before AND NOT _prefix STREQUAL "/usr")
    message(FATAL_ERROR "${_u}: no ExecStart=/usr/bin/... line to rewrite to ${_prefix}")
  endif()
  message(STATUS "Installing: ${_unitdir}/${_u}")
  file(WRITE "${_unitdir}/${_u}" "${_unit}")
endforeach()
