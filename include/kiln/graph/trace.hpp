// kiln/graph/trace.hpp: expression type -> graph value.
//
// traced<E>::value walks E's records (record.hpp) with an explicit stack, in one constant
// evaluation, emitting operands before the nodes that use them (left to right) and numbering
// leaves in that order: the leaf table's slots. Nothing recurses through the expression's
// type, so the depth of an expression is limited only by constant-evaluation steps.
//
// A placeholder used several times is one node. So is every use of a share(x) of the same key
// (the loss under several grad nodes, even where it holds bound tensors or C++ scalars: the
// later uses' data items map to the first use's slots, and binding checks they agree). So is
// a pure subtree (no bound tensors or
// scalars) of 8 nodes or more used several times, recognised by its structural hash (64 bits,
// record.hpp) and size: the loss under each of a model's grad nodes is traced once, so tracing
// `grad(loss, wrt(w1 ... wn))` costs the loss once, not n times.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <utility>

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

/// Same node value given the same inputs (the attributes record::hash covers).
constexpr bool same_node_value(const node& a, const node& b) {
  return a.o == b.o && a.dt == b.dt && a.shape == b.shape && same_attributes(a, b) && a.label() == b.label();
}

/// Subtrees smaller than this are emitted again at each use (CSE merges them later): looking
/// them up would cost more than emitting them.
inline constexpr index_t min_shared_tree = 8;

/// Where each of an expression object's bound tensors and C++ scalars (its leaf data, in
/// order) goes in the leaf table: slot[i] of data item i. A shared subtree traced once has its
/// later uses' data pointing at the first use's slots (bind_leaves checks they agree).
struct binding {
  cvec<int> tensor_slot, scalar_slot;
};

/// Traces the records under `top` into a graph; fills `bind` when given.
constexpr graph walk(const record& top, binding* bind = nullptr) {
  graph g;
  // (the tree's node count bounds the graph's, but repeated subtrees are emitted once: a stack
  // of layers has a tree exponentially larger than its graph, so the reserve is capped)
  g.nodes.reserve(static_cast<std::size_t>(top.tree_nodes < 4096 ? top.tree_nodes : 4096));
  struct frame {
    const record* r;
    int next;
    int ids[4];
    index_t tensors, scalars;  ///< data items before this subtree's (share frames)
  };
  cvec<frame> stack;
  // a placeholder type used several times is one node (same name, dtype and shape: same value)
  cvec<const node*> placeholder;
  cvec<int> placeholder_id;
  // pure subtrees already emitted (see record::hash): a repeated one is emitted once
  struct seen_tree {
    std::uint64_t hash;
    index_t size;
    const node* n;
    int id;
  };
  cvec<seen_tree> trees;
  // trees by hash (open addressing, indices into trees, -1 empty; kept at most half full): a
  // scan of every tree at every visit was most of the trace's cost in constant evaluation
  cvec<int> tree_slot;
  tree_slot.assign(std::size_t{64}, -1);
  const auto tree_home = [](std::uint64_t h, std::size_t mask) {
    return static_cast<std::size_t>((h * 0x9e3779b97f4a7c15ull) >> 32) & mask;
  };
  const auto remember_tree = [&](const seen_tree& t) {
    trees.push_back(t);
    if (2 * trees.size() > tree_slot.size()) {  // grow and reinsert
      tree_slot.assign(2 * tree_slot.size(), -1);
      const std::size_t mask = tree_slot.size() - 1;
      for (std::size_t i = 0; i + 1 < trees.size(); ++i) {
        std::size_t at = tree_home(trees[i].hash, mask);
        while (tree_slot[at] >= 0) at = (at + 1) & mask;
        tree_slot[at] = static_cast<int>(i);
      }
    }
    const std::size_t mask = tree_slot.size() - 1;
    std::size_t at = tree_home(t.hash, mask);
    while (tree_slot[at] >= 0) at = (at + 1) & mask;
    tree_slot[at] = static_cast<int>(trees.size() - 1);
  };
  // shared subtrees already emitted: key, node, and where their data items start
  struct seen_share {
    std::uint64_t key;
    int id;
    index_t tensors, scalars;
  };
  cvec<seen_share> shares;
  index_t tensors = 0, scalars = 0;  // data items met so far, in the expression object's order
  const auto share_key = [](const record* r) { return std::bit_cast<std::uint64_t>(r->n.value); };
  const auto emitted = [&](const record* r) {
    if (r->n.o == op::input || r->n.o == op::param || r->n.o == op::cotangent) {
      for (std::size_t p = 0; p < placeholder.size(); ++p)
        if (same_placeholder(*placeholder[p], r->n)) return placeholder_id[p];
    } else if (r->n.o == op::share) {
      for (const seen_share& sh : shares)
        if (sh.key == share_key(r)) {  // this use's data items are the first use's
          if (bind) {
            for (index_t k = 0; k < r->tensors; ++k) {  // (a copy first: push_back may reallocate)
              const int slot = bind->tensor_slot[static_cast<std::size_t>(sh.tensors + k)];
              bind->tensor_slot.push_back(slot);
            }
            for (index_t k = 0; k < r->scalars; ++k) {
              const int slot = bind->scalar_slot[static_cast<std::size_t>(sh.scalars + k)];
              bind->scalar_slot.push_back(slot);
            }
          }
          tensors += r->tensors;
          scalars += r->scalars;
          return sh.id;
        }
    } else if (r->pure && r->tree_nodes >= min_shared_tree) {
      const std::size_t mask = tree_slot.size() - 1;
      for (std::size_t at = tree_home(r->hash, mask); tree_slot[at] >= 0; at = (at + 1) & mask) {
        const seen_tree& t = trees[static_cast<std::size_t>(tree_slot[at])];
        if (t.hash == r->hash && t.size == r->tree_nodes && same_node_value(*t.n, r->n)) return t.id;
      }
    }
    return -1;
  };
  int count = 0, leaves = 0;
  // a tuple (kiln::outputs) is not a node: each of its operands is an output of the graph
  const bool tuple = top.n.o == op::tuple;
  const int roots = tuple ? top.kids : 1;
  for (int root = 0; root < roots; ++root) {
    const record* r0 = tuple ? top.kid[root] : &top;
    if (const int seen_root = emitted(r0); seen_root >= 0) {
      g.outputs.push_back(seen_root);
      continue;
    }
    int done = -1;  // the node of the last finished subtree: at the end, the root's
    stack.push_back({r0, 0, {}, tensors, scalars});
    while (!stack.empty()) {
      frame& f = stack.back();
      if (f.next < f.r->kids) {
        const record* kid = f.r->kid[f.next];
        if (const int seen = emitted(kid); seen >= 0) {
          f.ids[static_cast<std::size_t>(f.next++)] = seen;
          continue;
        }
        stack.push_back({kid, 0, {}, tensors, scalars});
        continue;
      }
      int id;
      if (f.r->n.o == op::share) {  // not a node: its operand, remembered under its key
        id = f.ids[0];
        shares.push_back({share_key(f.r), id, f.tensors, f.scalars});
      } else {
        node n = f.r->n;
        for (int j = 0; j < f.r->kids; ++j) n.in[static_cast<std::size_t>(j)] = f.ids[static_cast<std::size_t>(j)];
        if (kind_of(n.o) == op_kind::leaf) {
          n.slot = leaves++;
          if (n.o == op::bound) {
            ++tensors;
            if (bind) bind->tensor_slot.push_back(n.slot);
          } else if (n.o == op::scalar) {
            ++scalars;
            if (bind) bind->scalar_slot.push_back(n.slot);
          }
        }
        g.nodes.push_back(n);
        id = count++;
        if (n.o == op::input || n.o == op::param || n.o == op::cotangent) {  // one node per value
          placeholder.push_back(&f.r->n);
          placeholder_id.push_back(id);
        } else if (f.r->pure && f.r->tree_nodes >= min_shared_tree) {
          remember_tree({f.r->hash, f.r->tree_nodes, &f.r->n, id});
        }
      }
      stack.pop_back();
      done = id;
      if (!stack.empty()) {
        frame& parent = stack.back();
        parent.ids[static_cast<std::size_t>(parent.next++)] = id;
      }
    }
    g.outputs.push_back(done);
  }
  g.leaves = leaves;
  return g;
}

}  // namespace detail

namespace detail {
/// traced<E>::binding's value (a named function: g++ 12 evaluates a lambda invoked in a static
/// member's initializer more than once, docs/notes.md).
template <class E>
constexpr auto binding_of() {
  using U = std::remove_cvref_t<E>;
  std::pair<std::array<int, U::tensor_leaves>, std::array<int, U::scalar_leaves>> r{};
  binding b;
  (void)walk(record_ref<E>(), &b);
  // (copy_n: a loop bound of 0 is a "pointless comparison" to nvcc)
  std::copy_n(b.tensor_slot.begin(), r.first.size(), r.first.begin());
  std::copy_n(b.scalar_slot.begin(), r.second.size(), r.second.begin());
  return r;
}
}  // namespace detail

/// The frozen graph of expression type E: one output, the expression's value, or one per
/// operand of kiln::outputs(...).
template <class E>
struct traced {
  // a graph has at most the tree's nodes (shared subtrees are one node)
  static constexpr auto value = freeze_within<static_cast<std::size_t>(std::min<index_t>(record_ref<E>().tree_nodes, 4096)),
                                              static_cast<std::size_t>(record_ref<E>().kids) + 1>([] { return detail::walk(record_ref<E>()); });
  /// The leaf-table slot of each bound tensor and C++ scalar of an E object, in its order.
  static constexpr auto binding = detail::binding_of<E>();
};

/// The graph of an expression, as a run-time value.
template <traceable E>
constexpr graph trace(const E&) {
  return traced<E>::value.thaw();
}

}  // namespace kiln
