// kiln/core/shape.hpp: shapes that mix static extents with dynamic ones, and broadcasting.
//
// A shape is a value (`dims`: a rank and up to max_rank extents) so that passes can compute
// with it in constant evaluation. `shape<3, dyn, 4>` is the same value carried in a type, for
// placeholders and for compile-time error messages, where it prints readably.
#pragma once

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <utility>

#include "config.hpp"

namespace kiln {

/// An extent known only at run time.
inline constexpr index_t dyn = -1;
/// Whether an extent is dynamic: dyn, or, in the symbolic-extent pass (passes/extents.hpp), a
/// named dynamic extent (any other negative value: two equal names are one run-time extent).
/// The shape rules treat every dynamic extent alike, keep a name where the result is that
/// extent, and give dyn where it is not known which.
constexpr bool is_dyn(index_t e) { return e < 0; }

struct dims {
  int rank = 0;  ///< -1 marks a shape poisoned by an earlier compile-time error (see check.hpp)
  index_t e[max_rank]{};  // a C array: indexing it costs no function call in constant evaluation

  constexpr dims() = default;
  constexpr dims(std::initializer_list<index_t> l) : rank(static_cast<int>(l.size())) {
    int i = 0;
    for (index_t x : l) e[i++] = x;  // more than max_rank extents fails constant evaluation
  }
  template <std::size_t N>
  constexpr explicit dims(const std::array<index_t, N>& a) : rank(static_cast<int>(N)) {
    static_assert(N <= max_rank, "kiln: rank exceeds kiln::max_rank");
    for (std::size_t i = 0; i < N; ++i) e[i] = a[i];
  }

  constexpr index_t operator[](int i) const { return e[i]; }
  constexpr index_t& operator[](int i) { return e[i]; }
  constexpr bool poisoned() const { return rank < 0; }
  constexpr bool is_static() const {
    for (int i = 0; i < rank; ++i)
      if (is_dyn(e[i])) return false;
    return rank >= 0;
  }
  /// Product of the extents (of a static shape; a run-time shape is always static).
  constexpr index_t numel() const {
    index_t n = 1;
    for (int i = 0; i < rank; ++i) n *= e[i];
    return n;
  }
  friend constexpr bool operator==(const dims& a, const dims& b) {
    if (a.rank != b.rank) return false;
    for (int i = 0; i < a.rank; ++i)
      if (a.e[i] != b.e[i]) return false;
    return true;
  }

  static constexpr dims poison() {
    dims d;
    d.rank = -1;
    return d;
  }
};

/// The most elements a run-time shape may count, over its non-zero extents (so that an empty
/// tensor's other extents are bounded too): the byte counts, strides and offsets of elements of
/// up to 16 bytes then never overflow index_t.
inline constexpr index_t max_elements = index_t{1} << 59;

/// Whether a run-time shape is one kiln can address: no negative (or dyn) extent, and the
/// product of the non-zero extents at most max_elements (found without overflowing).
constexpr bool countable(const dims& d) {
  if (d.rank < 0) return false;
  index_t n = 1;
  for (int i = 0; i < d.rank; ++i) {
    const index_t x = d.e[i];
    if (x < 0 || (x > 0 && n > max_elements / x)) return false;
    if (x > 0) n *= x;
  }
  return true;
}

/// countable() for a static shape, whose dyn extents are checked when they are known (a
/// poisoned shape's mistake is reported where it was made).
constexpr bool countable_static(dims d) {
  if (d.poisoned()) return true;
  for (int i = 0; i < d.rank; ++i)
    if (is_dyn(d.e[i])) d.e[i] = 1;
  return countable(d);
}

/// A shape carried in a type: `shape<dyn, 784>`.
template <index_t... E>
struct shape {
  static_assert(sizeof...(E) <= max_rank, "kiln: rank exceeds kiln::max_rank");
  static_assert(((E >= 0 || E == dyn) && ...), "kiln: extents must be >= 0 or kiln::dyn");
  static constexpr dims value{E...};
};

namespace detail {
template <dims D>
constexpr index_t extent_at(std::size_t i) { return D.e[i]; }
template <dims D>
struct as_shape_impl {
  template <std::size_t... I>
  static shape<extent_at<D>(I)...> make(std::index_sequence<I...>);
  using type = decltype(make(std::make_index_sequence<static_cast<std::size_t>(D.rank > 0 ? D.rank : 0)>{}));
};
}  // namespace detail
/// The type `shape<...>` for a shape value (used to print shapes in compile errors).
template <dims D>
using as_shape = typename detail::as_shape_impl<D>::type;

/// Whether two extents may be equal at run time.
constexpr bool extents_compatible(index_t a, index_t b) { return is_dyn(a) || is_dyn(b) || a == b; }

struct broadcast_result {
  dims shape;
  bool ok = true;
};

/// NumPy broadcasting of two shapes, right-aligned. With dynamic extents the result is what is
/// known statically; the run-time check happens again on concrete shapes.
constexpr broadcast_result broadcast(const dims& a, const dims& b) {
  broadcast_result r;
  if (a.poisoned() || b.poisoned()) return {dims::poison(), true};
  const int n = std::max(a.rank, b.rank);
  r.shape.rank = n;
  for (int i = 0; i < n; ++i) {
    const int ia = a.rank - n + i, ib = b.rank - n + i;
    const index_t x = ia >= 0 ? a.e[ia] : 1;
    const index_t y = ib >= 0 ? b.e[ib] : 1;
    index_t z;
    if (x == y) z = x;
    else if (x == 1) z = y;
    else if (y == 1) z = x;
    else if (is_dyn(x) && is_dyn(y)) z = dyn;  // two different dynamic extents: either may be 1
    else if (is_dyn(x)) z = y;  // the dynamic extent must turn out to be y or 1
    else if (is_dyn(y)) z = x;
    else {
      r.ok = false;
      z = x;
    }
    r.shape.e[i] = z;
  }
  return r;
}

/// Whether `from` can be broadcast to exactly `to` (broadcast_to semantics).
constexpr bool broadcastable_to(const dims& from, const dims& to) {
  if (from.poisoned() || to.poisoned()) return true;
  if (from.rank > to.rank) return false;
  for (int i = 0; i < from.rank; ++i) {
    const index_t x = from.e[i], y = to.e[to.rank - from.rank + i];
    if (!(x == 1 || extents_compatible(x, y))) return false;
  }
  return true;
}

/// "[2, dyn, 3]"
KILN_RUNTIME std::string to_string(const dims& d);

/// Row-major (C order) strides of a shape, in elements.
constexpr dims contiguous_strides(const dims& shape) {
  dims s;
  s.rank = shape.rank;
  index_t acc = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    s.e[i] = acc;
    acc *= shape.e[i];
  }
  return s;
}

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME std::string to_string(const dims& d) {
  if (d.poisoned()) return "[invalid]";
  std::string s = "[";
  for (int i = 0; i < d.rank; ++i) {
    if (i) s += ", ";
    s += d.e[i] == dyn ? std::string("dyn") : std::to_string(d.e[i]);
  }
  return s + "]";
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
