// kiln/core/fixed_string.hpp: a string usable as a template argument (leaf names).
#pragma once

#include <cstddef>
#include <string_view>

namespace kiln {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit on purpose, "x" -> name
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  [[nodiscard]] constexpr std::string_view view() const { return {chars, N - 1}; }
  [[nodiscard]] static constexpr std::size_t size() { return N - 1; }
};

/// Concatenation, for names built from names: `Name + fixed_string(".weight")`.
template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const fixed_string<A>& a, const fixed_string<B>& b) {
  fixed_string<A + B - 1> r;
  for (std::size_t i = 0; i + 1 < A; ++i) r.chars[i] = a.chars[i];
  for (std::size_t i = 0; i < B; ++i) r.chars[A - 1 + i] = b.chars[i];
  return r;
}
template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B - 1> operator+(const fixed_string<A>& a, const char (&b)[B]) {
  return a + fixed_string<B>(b);
}

/// The decimal digits of a non-negative integer, as a name part: digits<12>() is "12".
template <std::size_t V>
constexpr auto digits() {
  constexpr std::size_t n = [] {
    std::size_t k = 1;
    for (std::size_t v = V; v >= 10; v /= 10) ++k;
    return k;
  }();
  fixed_string<n + 1> r;
  std::size_t v = V;
  for (std::size_t i = n; i-- > 0; v /= 10) r.chars[i] = static_cast<char>('0' + v % 10);
  return r;
}

}  // namespace kiln
