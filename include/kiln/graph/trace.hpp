// kiln/graph/trace.hpp: expression type -> graph value.
//
// traced<E>::value walks E's records (record.hpp) with an explicit stack, in one constant
// evaluation, emitting operands before the nodes that use them (left to right) and numbering
// leaves in that order: the leaf table's slots. Nothing recurses through the expression's
// type, so the depth of an expression is limited only by constant-evaluation steps.
#pragma once

#include "../core/cvec.hpp"
#include "../core/tensor.hpp"
#include "graph.hpp"
#include "record.hpp"

namespace kiln {

namespace detail {
/// Same placeholder: op, name, dtype and shape. (Compared by value: g++ with ASan does not
/// accept comparing the addresses of two records in a constant expression.)
constexpr bool same_placeholder(const node& a, const node& b) {
  return a.o == b.o && a.dt == b.dt && a.shape == b.shape && a.label() == b.label();
}

constexpr graph walk(const record& root) {
  graph g;
  g.nodes.reserve(static_cast<std::size_t>(root.tree_nodes));
  struct frame {
    const record* r;
    int next;
    std::array<int, 4> ids;
  };
  cvec<frame> stack;
  stack.push_back({&root, 0, {}});
  // a placeholder type used several times is one node (same name, dtype and shape: same value)
  cvec<const node*> placeholder;
  cvec<int> placeholder_id;
  int count = 0, leaves = 0;
  while (!stack.empty()) {
    frame& f = stack.back();
    if (f.next < f.r->kids) {
      const record* kid = f.r->kid[static_cast<std::size_t>(f.next)];
      int seen = -1;
      if (kid->n.o == op::input || kid->n.o == op::param)
        for (std::size_t p = 0; p < placeholder.size() && seen < 0; ++p)
          if (same_placeholder(*placeholder[p], kid->n)) seen = placeholder_id[p];
      if (seen >= 0) {
        f.ids[static_cast<std::size_t>(f.next++)] = seen;
        continue;
      }
      stack.push_back({kid, 0, {}});
      continue;
    }
    node n = f.r->n;
    for (int j = 0; j < f.r->kids; ++j) n.in[static_cast<std::size_t>(j)] = f.ids[static_cast<std::size_t>(j)];
    if (kind_of(n.o) == op_kind::leaf) n.slot = leaves++;
    g.nodes.push_back(n);
    const int id = count++;
    if (n.o == op::input || n.o == op::param) {
      placeholder.push_back(&f.r->n);
      placeholder_id.push_back(id);
    }
    stack.pop_back();
    if (!stack.empty()) {
      frame& parent = stack.back();
      parent.ids[static_cast<std::size_t>(parent.next++)] = id;
    }
  }
  g.outputs = {count - 1};
  g.leaves = leaves;
  return g;
}
}  // namespace detail

/// The frozen graph of expression type E (one output: the expression's value).
template <class E>
struct traced {
  static constexpr auto value = freeze([] { return detail::walk(record_of<E>::value); });
};

/// The graph of an expression, as a run-time value.
template <expression E>
constexpr graph trace(const E&) {
  return traced<E>::value.thaw();
}

}  // namespace kiln
