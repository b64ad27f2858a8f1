// kiln/core/fixed_string.hpp: a string usable as a template argument (leaf names).
#pragma once

#include <cstddef>
#include <string_view>

namespace kiln {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit on purpose, "x" -> name
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  [[nodiscard]] constexpr std::string_view view() const { return {chars, N - 1}; }
  [[nodiscard]] static constexpr std::size_t size() { return N - 1; }
};

}  // namespace kiln
