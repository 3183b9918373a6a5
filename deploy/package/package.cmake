# What a system install carries beyond the binaries, and the .deb that carries it all: the
# systemd unit, the sysusers file and the config at the paths the unit names.
#   cmake --install build                       # to CMAKE_INSTALL_PREFIX (/usr/local by default)
#   cpack --config build/CPackConfig.cmake -B build/package    # wsync_<version>_<arch>.deb
# An install puts the config in <prefix>/etc/wsync (/etc/wsync for the prefix /usr) and a unit
# naming this build's install paths (GNUInstallDirs: configure with the prefix you install to). The .deb installs to /usr, with the
# config in /etc/wsync and the unit as deploy/systemd/wsyncd.service ships it
# (deploy/package/stage_deb.cmake lays its staging folder out so).
include(GNUInstallDirs)

# The prefix /usr keeps its config in /etc (GNUInstallDirs' FULL_SYSCONFDIR says so); any other
# prefix in <prefix>/etc.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(wsync_config_dir /etc/wsync)
else()
  set(wsync_config_dir etc/wsync)
endif()
file(READ ${PROJECT_SOURCE_DIR}/deploy/systemd/wsyncd.service wsync_unit)
string(REPLACE "/usr/bin/wsyncd" "${CMAKE_INSTALL_FULL_BINDIR}/wsyncd" wsync_unit "${wsync_unit}")
string(REPLACE "/etc/wsync/" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/wsync/" wsync_unit "${wsync_unit}")
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/deploy/wsyncd.service CONTENT "${wsync_unit}")
install(FILES ${PROJECT_BINARY_DIR}/deploy/wsyncd.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/wsync.sysusers DESTINATION lib/sysusers.d
        RENAME wsync.conf)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/wsyncd.json ${PROJECT_SOURCE_DIR}/deploy/wsyncd.example.json
        DESTINATION ${wsync_config_dir})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME wsync)
set(CPACK_PACKAGE_VENDOR wsync)
set(CPACK_PACKAGE_CONTACT "wsync maintainers <maintainers@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "weight-sync daemon for RL training: trainer-to-inference-engine weight updates")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# The libraries the binaries load, read from them by dpkg-shlibdeps. NCCL and the CUDA driver are
# loaded at run time (dlopen), only in CUDA mode, from the node's own install: not dependencies.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS systemd)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/package/postinst ${PROJECT_SOURCE_DIR}/deploy/package/prerm
    ${PROJECT_SOURCE_DIR}/deploy/package/postrm ${PROJECT_SOURCE_DIR}/deploy/package/conffiles
    ${PROJECT_SOURCE_DIR}/deploy/package/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_WSYNC_SOURCE_DIR ${PROJECT_SOURCE_DIR})
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/deploy/package/stage_deb.cmake)
include(CPack)
