// kiln/core/expr_fwd.hpp: what core types need to know about expressions.
#pragma once

#include <concepts>
#include <type_traits>

namespace kiln {

class any_tensor;

/// Every expression node derives from expr_base; the node types live in graph/expr.hpp.
struct expr_base {};

template <class E>
concept expression = std::derived_from<std::remove_cvref_t<E>, expr_base>;

/// kiln::outputs(a, b, ...) derives from outputs_base: several expressions traced into one
/// graph with one output each. It is not an expression (it has no single value to compute with).
struct outputs_base {};

/// What can be traced into a graph: an expression, or several under kiln::outputs.
template <class E>
concept traceable = expression<E> || std::derived_from<std::remove_cvref_t<E>, outputs_base>;

/// How `tensor c = expr;` and `c = expr;` evaluate an expression: eval.hpp specialises this
/// for expressions (with the default backend). The core headers cannot include the backends,
/// so without eval.hpp the assignment fails to compile here, rather than to link.
template <class E>
struct evaluator {
  static void into(const E&, any_tensor&) {
    static_assert(sizeof(E) == 0,
                  "kiln: evaluating an expression into a tensor needs #include <kiln/eval.hpp> (or <kiln/kiln.hpp>)");
  }
};

}  // namespace kiln
