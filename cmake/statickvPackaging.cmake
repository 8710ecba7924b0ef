# Install rules, the package config and a build-tree export, so statickv can be
# consumed with find_package(statickv CONFIG) from an install prefix or from a
# build tree, and with add_subdirectory.
include(CMakePackageConfigHelpers)

set(statickv_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/statickv)

install(TARGETS statickv EXPORT statickvTargets)
install(DIRECTORY include/statickv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT statickvTargets NAMESPACE statickv:: DESTINATION ${statickv_cmake_dir})

configure_package_config_file(cmake/statickvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/statickvConfig.cmake
  INSTALL_DESTINATION ${statickv_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/statickvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/statickvConfig.cmake
              ${PROJECT_BINARY_DIR}/statickvConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/statickvTorchLinks.cmake
        DESTINATION ${statickv_cmake_dir})

# Build-tree package: find_package(statickv) with statickv_DIR=<build dir>
# (its config includes statickvTorchLinks.cmake from beside it).
configure_file(cmake/statickvTorchLinks.cmake ${PROJECT_BINARY_DIR}/statickvTorchLinks.cmake
               COPYONLY)
export(EXPORT statickvTargets NAMESPACE statickv::
       FILE ${PROJECT_BINARY_DIR}/statickvTargets.cmake)
