# libkiln.so: the C API's objects and every layer below them in one shared library exporting only
# the C API, installed with its headers, a CMake package (find_package(kiln) -> kiln::kiln) and a
# pkg-config file (kiln.pc). Its dependencies (oneDNN, OpenBLAS, ONNX, protobuf, OpenMP) are
# private: the library records them itself (DT_NEEDED) and consumers link only kiln.
include(CMakePackageConfigHelpers)
find_package(Threads REQUIRED)

add_library(kiln SHARED $<TARGET_OBJECTS:kiln_capi>)
add_library(kiln::kiln ALIAS kiln)
target_link_libraries(kiln PRIVATE kiln_tidy)
# kiln.hpp is C++17 and its run_async hands results between threads.
target_link_libraries(kiln INTERFACE Threads::Threads)
target_compile_features(kiln INTERFACE cxx_std_17)
target_include_directories(kiln PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                       $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
                                       $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# While the major version is 0 any minor version may change the ABI: the SONAME carries both.
set_target_properties(kiln PROPERTIES VERSION ${PROJECT_VERSION}
                                      SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
# The version script exports kiln_* only; --no-undefined makes a missing dependency a link error
# here rather than a load error in an application.
set(KILN_EXPORT_MAP ${CMAKE_SOURCE_DIR}/capi/libkiln.map)
target_link_options(kiln PRIVATE -Wl,--version-script=${KILN_EXPORT_MAP} -Wl,--no-undefined)
set_property(TARGET kiln APPEND PROPERTY LINK_DEPENDS ${KILN_EXPORT_MAP})

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(TARGETS kiln EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES ${CMAKE_SOURCE_DIR}/include/kiln/kiln_c.h ${CMAKE_SOURCE_DIR}/include/kiln/kiln.hpp
              ${CMAKE_BINARY_DIR}/include/kiln/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln COMPONENT dev)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
# 0.x: a request for 0.1 accepts 0.1.y only (SameMinorVersion), as the SONAME does.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR} COMPONENT dev)

# kiln.pc finds its prefix from its own folder (${pcfiledir}), so any install prefix works.
file(RELATIVE_PATH KILN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" KILN_PC_TO_PREFIX "${KILN_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/kiln.pc.in ${CMAKE_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
