# Builds and runs tests/consumer/main.cpp against the package, through CMakeDeps and
# CMakeToolchain (what `conan create` runs after packaging), header-only and with
# kiln_add_runtime, and a model exported with kiln_add_model, called from C.
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class KilnTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            for program in ("consumer", "consumer_separate", "caller"):
                self.run(os.path.join(self.cpp.build.bindir, program), env="conanrun")
