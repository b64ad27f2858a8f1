// kiln/passes/extents.hpp: symbolic extents. Every dynamic extent of a leaf gets a name (a
// negative value other than dyn), and the shape rule of each op (graph.hpp's infer, the one
// rule) carries the names through the graph: an extent a rule keeps keeps its name, one it
// cannot tell (two different names that broadcast, a slice of a dynamic axis) becomes dyn. Two
// nodes whose symbolic shapes are equal have equal shapes at run time, whatever the leaves'
// extents; so a schedule can say, for every backend, which kernels surely fit the loop nest
// their first node sets.
#pragma once

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "../core/cvec.hpp"
#include "../core/shape_rules.hpp"
#include "../graph/graph.hpp"
#include "fuse.hpp"

namespace kiln::passes {

/// The name of axis `axis` of leaf slot `slot`'s dynamic extent: -2, -3, ... (dyn is -1).
constexpr index_t extent_name(int slot, int axis) { return -2 - (static_cast<index_t>(slot) * max_rank + axis); }

/// An extent of a symbolic shape that is a name: known to equal every other extent of that name.
constexpr bool is_named(index_t e) { return e <= -2; }

/// The shape of every node of g with dynamic extents named (see above). A node whose rule
/// fails on named extents (it cannot, for a graph check_graph accepts) keeps its static shape.
template <class G>
constexpr cvec<dims> symbolic_shapes(const G& g) {
  const std::size_t n = g.nodes.size();
  cvec<dims> sym(n, dims{});
  dims* sy = sym.data();  // raw pointers: no call per element in constant evaluation
  const node* nd = g.nodes.data();
  for (std::size_t u = 0; u < n; ++u) {
    const node& x = nd[u];
    dims r = x.shape;
    if (kind_of(x.o) == op_kind::leaf) {
      for (int i = 0; i < r.rank; ++i)
        if (is_dyn(r.e[i])) r.e[i] = extent_name(x.slot, i);
    } else if (kind_of(x.o) != op_kind::constant) {
      const inferred s = infer(x, [&](int j) { return operand{nd[x.in[j]].o, nd[x.in[j]].dt, sy[x.in[j]]}; });
      if (!s.error) r = s.shape;
    }
    sy[u] = r;
  }
  return sym;
}

/// For each kernel of schedule (or fused graph) s, whether its nodes surely have at run time
/// the shapes its loop nest assumes: every node's symbolic shape is the space's (for a row
/// kernel: the space of its reductions' input, or that reduced), with no extent left dyn.
/// Otherwise a backend checks the kernel's shapes at run time and may run it node by node.
/// Two passes over the graph for all kernels (a pass per kernel would cost kernels x nodes
/// steps of constant evaluation).
template <class Sched>
constexpr auto kernels_fit(const Sched& s) {
  constexpr std::size_t nk = std::tuple_size_v<std::remove_cvref_t<decltype(s.kernels)>>;
  std::array<bool, nk> fit{};
  const cvec<dims> sym_shapes = symbolic_shapes(s.g);
  const dims* sym = sym_shapes.data();
  const node* nd = s.g.nodes.data();
  const int* ko = s.kernel_of.data();
  const kernel* ks = s.kernels.data();
  bool* ok = fit.data();
  cvec<dims> space(nk, dims{});
  cvec<char> have(nk, 0);
  dims* sp = space.data();
  char* hv = have.data();
  for (std::size_t k = 0; k < nk; ++k) ok[k] = true;
  const auto certain = [](const dims& d) {
    for (int i = 0; i < d.rank; ++i)
      if (d.e[i] == dyn) return false;
    return true;
  };
  const std::size_t n = s.g.nodes.size();
  for (std::size_t i = 0; i < n; ++i) {
    const int k = ko[i];
    if (k < 0 || !ok[k]) continue;
    const node& x = nd[i];
    const dims& own = sym[i];
    if (ks[k].kind == kernel_kind::reduction) {
      if (kind_of(x.o) == op_kind::reduce) {
        const dims& src = sym[x.in[0]];
        if (hv[k] && !(src == sp[k])) ok[k] = false;
        sp[k] = src;
        hv[k] = 1;
      }
    } else if (!hv[k]) {
      sp[k] = own;
      hv[k] = 1;
    } else if (!(own == sp[k])) {
      ok[k] = false;
    }
    if (!certain(own)) ok[k] = false;
  }
  // row kernels: each node in the full space or the reduced one
  for (std::size_t k = 0; k < nk; ++k)
    if (ks[k].kind == kernel_kind::reduction && !certain(sp[k])) ok[k] = false;
  for (std::size_t i = 0; i < n; ++i) {
    const int k = ko[i];
    if (k < 0 || !ok[k] || ks[k].kind != kernel_kind::reduction || kind_of(nd[i].o) == op_kind::reduce) continue;
    const kernel& K = ks[k];
    const int r = position_in(nd[i].shape, K.space, K.axes);
    const dims want = r == 0 ? sp[k] : reduce_shape(sp[k], K.axes, r == 1).shape;
    if (!(sym[i] == want)) ok[k] = false;
  }
  return fit;
}

}  // namespace kiln::passes
