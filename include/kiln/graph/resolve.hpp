// kiln/graph/resolve.hpp: a node's shape at run time, by the one shape rule (graph.hpp's infer)
// applied to its operands' run-time shapes. Every backend resolves shapes through it, so the
// rule, and the message of an error, are the same wherever a plan runs.
#pragma once

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "graph.hpp"

namespace kiln {

namespace detail {
/// Throws the shape_error of a failed rule: "kiln: <op>: shapes <a> and <b> <why>" with the
/// shapes the rule cites (a and b; nullptr where it cites fewer).
[[noreturn]] KILN_RUNTIME void throw_inferred(const node& n, const inferred& r, const dims* a, const dims* b);
}  // namespace detail

/// Node n's run-time shape from its operands (`in(j)`: an operand (graph.hpp), or anything
/// with o, dt and shape); throws shape_error naming the op and the shapes its rule cites, or saying that the
/// result has more elements than kiln counts (2^59).
template <class In>
dims resolve_shape(const node& n, In in) {
  const inferred r = infer(n, in);
  if (r.error) [[unlikely]] {
    dims cited[2];
    const dims* p[2] = {nullptr, nullptr};
    for (int c = 0; c < 2; ++c) {
      if (r.cite[c] == cite_own) {
        cited[c] = n.shape;
      } else if (r.cite[c] >= 0 && r.cite[c] < n.nin()) {
        cited[c] = in(r.cite[c]).shape;
      } else {
        continue;
      }
      p[c] = &cited[c];
    }
    detail::throw_inferred(n, r, p[0], p[1]);
  }
  // before anything sizes memory from it: a broadcast or a matmul of addressable operands can
  // still count more elements than any byte count holds
  if (!countable(r.shape)) [[unlikely]]
    throw shape_error(name(n.o), r.shape, "has more than 2^59 elements");
  return r.shape;
}

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME void detail::throw_inferred(const node& n, const inferred& r, const dims* a, const dims* b) {
  if (a && b) throw shape_error(name(n.o), *a, *b, r.error);
  if (a || b) throw shape_error(name(n.o), a ? *a : *b, r.error);
  throw shape_error(name(n.o), dims{}, r.error);
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
