# kiln is header-only: configure without its tests and examples, install (headers, the CMake
# package config to share/kiln, kiln.pc), and leave no debug tree.
set(VCPKG_BUILD_TYPE release)

vcpkg_from_github(
    OUT_SOURCE_PATH SOURCE_PATH
    REPO kiln-project/kiln  # a placeholder until kiln is published (ports/README.md)
    REF "v${VERSION}"
    SHA512 0
    HEAD_REF main
)

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        -DKILN_BUILD_TESTS=OFF
        -DKILN_BUILD_EXAMPLES=OFF
        -DKILN_WITH_CUDA=OFF
        -DKILN_INSTALL_CMAKEDIR=share/kiln
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup()
vcpkg_fixup_pkgconfig()

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
file(WRITE "${CURRENT_BUILDTREES_DIR}/copyright" "kiln has not chosen a license yet.\n")
vcpkg_install_copyright(FILE_LIST "${CURRENT_BUILDTREES_DIR}/copyright")
