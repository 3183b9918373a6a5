# Run by CPack once it has installed into its staging folder, before it packs the .deb: Debian's
# layout. The config moves from /usr/etc to /etc, and the unit is the one deploy/systemd ships,
# which names the package's own paths (/usr/bin/wsyncd, /etc/wsync/wsyncd.json).
file(GLOB_RECURSE staged_units "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*/wsyncd.service")
if(NOT staged_units)
  message(FATAL_ERROR "stage_deb: no wsyncd.service under ${CPACK_TEMPORARY_INSTALL_DIRECTORY}")
endif()
foreach(unit IN LISTS staged_units)
  configure_file(${CPACK_WSYNC_SOURCE_DIR}/deploy/systemd/wsyncd.service ${unit} COPYONLY)
  # <staging>/usr/lib/systemd/system/wsyncd.service: the package root is three folders above lib.
  get_filename_component(usr "${unit}/../../../.." ABSOLUTE)
  get_filename_component(root "${usr}/.." ABSOLUTE)
  if(EXISTS "${usr}/etc/wsync")
    file(MAKE_DIRECTORY "${root}/etc")
    file(RENAME "${usr}/etc/wsync" "${root}/etc/wsync")
    file(REMOVE_RECURSE "${usr}/etc")
  endif()
endforeach()
