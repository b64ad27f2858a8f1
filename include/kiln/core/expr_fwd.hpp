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

/// Evaluates an expression (defined in eval.hpp, with the CPU backend).
template <expression E>
any_tensor eval_any(const E& e);
/// Evaluates an expression into dest's elements, or new storage if dest is undefined (eval.hpp).
template <expression E>
void eval_into(const E& e, any_tensor& dest);

}  // namespace kiln
