# Conan 2 recipe for kiln: a header-only package (one package id for every configuration).
# xsimd is its one requirement; where Conan has no remote to fetch it from (an offline machine,
# or one that takes xsimd from Debian's libxsimd-dev), declare it a platform requirement in the
# profile: [platform_requires] xsimd/8.1.0 (scripts/check-packages.sh does).
#   conan create . --build=missing          the package, then test_package/ builds a consumer
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import cmake_layout
from conan.tools.files import copy, load


class KilnConan(ConanFile):
    name = "kiln"
    description = "A compile-time tensor compiler for C++20: expression templates, constexpr passes, SIMD kernels"
    license = "LicenseRef-unspecified"  # the project has not chosen a license yet
    topics = ("tensor", "compiler", "autodiff", "header-only", "simd")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "include/*", "CMakeLists.txt", "cmake/*"
    no_copy_source = True

    def set_version(self):
        # the version is CMakeLists.txt's, so the two cannot drift apart
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(kiln VERSION (\d+\.\d+\.\d+)", text).group(1)

    def requirements(self):
        self.requires("xsimd/[>=8 <9]")

    def layout(self):
        cmake_layout(self)

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        self.info.clear()

    def package(self):
        # every header, the export ABI's C header (kiln/export/kiln_model.h) too
        copy(self, "*.h*", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))
        # kiln_add_runtime and kiln_add_model, which CMakeDeps includes as build modules
        for f in ("kilnRuntime.cmake", "kilnModel.cmake", "kiln_model_header.c"):
            copy(self, f, src=os.path.join(self.source_folder, "cmake"),
                 dst=os.path.join(self.package_folder, self._modules_dir))

    _modules_dir = os.path.join("share", "kiln", "cmake")

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "kiln")
        self.cpp_info.set_property("cmake_target_name", "kiln::kiln")
        self.cpp_info.set_property("pkg_config_name", "kiln")
        self.cpp_info.set_property("cmake_build_modules", [os.path.join(self._modules_dir, f)
                                                           for f in ("kilnRuntime.cmake", "kilnModel.cmake")])
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
