// kiln/eval.hpp: evaluating an expression now, with the default backend (the CPU backend's
// fused kernels of the expression's plan) or any other (backend/backend.hpp).
//
//   tensor<float, 2> c = a + b * 2;                       // bound tensors: eager style
//   auto y = relu(matmul(input<"x", f32, shape<dyn, 4>>{}, param<"w", f32, shape<4, 3>>{}));
//   auto out = eval(y, {{"x", x}, {"w", w}});           // placeholders bound by name
//   auto ref = eval(y, {{"x", x}, {"w", w}}, eager::backend);  // the reference
//   auto f = compile(y);                                 // kiln::default_backend
//   auto out2 = f({{"x", x}, {"w", w}});
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "backend/default.hpp"
#include "debug/logs.hpp"
#include "core/tensor.hpp"
#include "graph/expr.hpp"
#include "graph/expr_nn.hpp"
#include "graph/grad.hpp"
#include "graph/trace.hpp"
#include "passes/pipeline.hpp"

namespace kiln {

/// A tensor bound to a placeholder by name.
struct feed {
  std::string_view name;
  any_tensor value;
};

/// The leaf table of graph g for expression value e, with placeholders bound from `feeds`.
/// Throws if a placeholder has no tensor, a tensor has the wrong dtype or shape, or a feed
/// names no placeholder of the graph.
template <class G, traceable E>
std::vector<any_tensor> bind_leaves(const G& g, const E& e, std::span<const feed> feeds) {
  std::vector<any_tensor> leaves(static_cast<std::size_t>(g.leaves));
  std::vector<char> used(feeds.size(), 0);
  // bound tensors and C++ scalars: each data item to its slot (a shared subtree's later uses
  // map to the first use's slots, and must hold the same values)
  constexpr const auto& bind = traced<E>::binding;
  const auto shared_mismatch = [](const char* what) {
    return std::logic_error(std::string("kiln: a subexpression that kiln traces once (the loss under several grad "
                                        "nodes, or another structurally equal use of it) holds different ") +
                            what + " in two of its uses; make the two expressions differ in structure, or bind the "
                                   "value through a kiln::input");
  };
  for (std::size_t i = 0; i < bind.first.size(); ++i) {
    any_tensor& slot = leaves[static_cast<std::size_t>(bind.first[i])];
    const any_tensor& t = e.data.tensors[i];
    if (!t.defined()) throw std::invalid_argument("kiln: an undefined tensor was used in an expression");
    if (!slot.defined()) slot = t;
    else if (!(slot.shares_storage(t) && slot.bytes() == t.bytes() && slot.shape() == t.shape() &&
               slot.strides() == t.strides()))
      throw shared_mismatch("tensors");
  }
  std::vector<char> scalar_set(leaves.size(), 0);
  std::vector<scalar_value> scalar_of(leaves.size());
  for (std::size_t i = 0; i < bind.second.size(); ++i) {
    const auto s = static_cast<std::size_t>(bind.second[i]);
    const scalar_value v = e.data.scalars[i];
    if (scalar_set[s]) {
      if (std::bit_cast<std::uint64_t>(v.f) != std::bit_cast<std::uint64_t>(scalar_of[s].f) || v.i != scalar_of[s].i)
        throw shared_mismatch("C++ scalars");
      continue;
    }
    scalar_set[s] = 1;
    scalar_of[s] = v;
  }
  for (const node& n : g.nodes) {
    if (kind_of(n.o) != op_kind::leaf || n.o == op::bound) continue;
    any_tensor& slot = leaves[static_cast<std::size_t>(n.slot)];
    if (n.o == op::scalar) {
      const scalar_value v = scalar_of[static_cast<std::size_t>(n.slot)];
      slot = any_tensor(n.dt, dims{});
      visit(n.dt, [&]<dtype D>() {
        *reinterpret_cast<storage_t<D>*>(slot.bytes()) =
            storage_t<D>(is_floating(D) ? static_cast<compute_t<D>>(v.f) : static_cast<compute_t<D>>(v.i));
      });
      continue;
    }
    const std::string what = std::string(name(n.o)) + " '" + std::string(n.label()) + "'";
    const feed* f = nullptr;
    for (std::size_t i = 0; i < feeds.size(); ++i)
      if (feeds[i].name == n.label()) {
        f = &feeds[i];
        used[i] = 1;
      }
    if (!f) throw std::invalid_argument("kiln: eval: no tensor bound to " + what);
    const any_tensor& t = f->value;
    if (!t.defined()) throw std::invalid_argument("kiln: eval: the tensor bound to " + what + " is undefined");
    if (t.dt() != n.dt) throw dtype_error(what, n.dt, t.dt());
    bool fits = t.rank() == n.shape.rank;
    for (int i = 0; fits && i < n.shape.rank; ++i) fits = n.shape.e[i] == dyn || n.shape.e[i] == t.shape().e[i];
    if (!fits) throw shape_error(what, n.shape, t.shape(), "differ (declared, bound)");
    slot = t;
  }
  for (std::size_t i = 0; i < feeds.size(); ++i)
    if (!used[i])
      throw std::invalid_argument("kiln: eval: the graph has no input or param named '" +
                                  std::string(feeds[i].name) + "'");
  return leaves;
}

template <class G, traceable E>
std::vector<any_tensor> bind_leaves(const G& g, const E& e, std::initializer_list<feed> feeds) {
  return bind_leaves(g, e, std::span<const feed>(feeds.begin(), feeds.size()));
}

/// Evaluates an expression, or each expression of kiln::outputs(...), with backend B (the
/// default backend unless named: `eval_all(e, feeds, kiln::eager::backend)`).
template <traceable E, backend_type B = default_backend>
std::vector<any_tensor> eval_all(const E& e, std::span<const feed> feeds, B = B{}) {
  // the leaf table is laid out by the captured graph; every later stage keeps its slots
  return B::template run<program<E>>(bind_leaves(traced<E>::value, e, feeds), {});
}
template <traceable E, backend_type B = default_backend>
std::vector<any_tensor> eval_all(const E& e, std::initializer_list<feed> feeds = {}, B b = B{}) {
  return eval_all(e, std::span<const feed>(feeds.begin(), feeds.size()), b);
}

/// Evaluates an expression, returning a dtype-erased tensor.
template <expression E, backend_type B = default_backend>
any_tensor eval_any(const E& e, std::initializer_list<feed> feeds, B b = B{}) {
  if constexpr (E::shape.poisoned()) return any_tensor{};  // the mistake was reported where it was made
  else return eval_all(e, feeds, b)[0];
}
template <expression E>
any_tensor eval_any(const E& e) {
  return eval_any(e, {});
}

/// Evaluates an expression with backend B straight into `dest`'s elements (its shape must be
/// the expression's), or into new storage if `dest` is undefined. A destination that shares
/// storage with an operand gets the result through a copy, so `a = transpose(a) + a` reads only
/// old values.
template <expression E, backend_type B = default_backend>
void eval_into(const E& e, any_tensor& dest, B = B{}) {
  if constexpr (!E::shape.poisoned()) {  // else the mistake was reported where it was made
      const std::vector<any_tensor> leaves = bind_leaves(traced<E>::value, e, std::span<const feed>{});
    if (!dest.defined()) dest = B::template run<program<E>>(leaves, {})[0];
    else B::template run<program<E>>(leaves, std::span<const any_tensor>(&dest, 1));
  }
}

/// Tensor assignment (`tensor c = expr;`, `c = expr;`) evaluates with the default backend.
template <expression E>
struct evaluator<E> {
  static void into(const E& e, any_tensor& dest) { eval_into(e, dest); }
};

/// Evaluates an expression into a new tensor of its dtype and rank.
template <expression E, backend_type B = default_backend>
auto eval(const E& e, std::span<const feed> feeds, B b = B{}) {
  if constexpr (E::shape.poisoned()) return any_tensor{};  // the mistake was reported where it was made
  else return tensor<storage_t<E::dt>, E::shape.rank>(std::move(eval_all(e, feeds, b)[0]));
}
template <expression E, backend_type B = default_backend>
auto eval(const E& e, std::initializer_list<feed> feeds = {}, B b = B{}) {
  return eval(e, std::span<const feed>(feeds.begin(), feeds.size()), b);
}

/// An expression compiled for a backend: call it with the tensors of its placeholders.
///   auto f = kiln::compile(gelu(linear(x, w, b)));   // kiln::default_backend
///   tensor<float, 2> y = f({{"x", xv}, {"w", wv}, {"b", bv}});
/// An expression gives one tensor of its dtype and rank; kiln::outputs(...) gives a vector.
template <traceable E, backend_type B = default_backend>
class compiled {
 public:
  explicit compiled(const E& e) : e_(e) { (void)plan<E>::schedule; }
  auto operator()(std::initializer_list<feed> feeds = {}) const {
    std::vector<any_tensor> out = eval_all(e_, feeds, B{});
    if constexpr (expression<E>) return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
    else return out;
  }
  auto operator()(std::span<const feed> feeds) const {
    std::vector<any_tensor> out = eval_all(e_, feeds, B{});
    if constexpr (expression<E>) return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
    else return out;
  }
  /// The same, writing output q into out[q] when that is defined with the output's dtype and
  /// shape (it may be a strided view), else into a new tensor stored in out[q] (out is resized
  /// to the number of outputs): repeated calls reuse the caller's memory, like torch's `out=`.
  void operator()(std::span<const feed> feeds, std::vector<any_tensor>& out) const {
      out.resize(traced<E>::value.outputs.size());
    out = B::template run<program<E>>(bind_leaves(traced<E>::value, e_, feeds), out);
  }
  void operator()(std::initializer_list<feed> feeds, std::vector<any_tensor>& out) const {
    (*this)(std::span<const feed>(feeds.begin(), feeds.size()), out);
  }
  /// The frozen plan the calls run.
  static constexpr const auto& schedule = plan<E>::schedule;

 private:
  E e_;
};

template <traceable E, backend_type B = default_backend>
compiled<E, B> compile(const E& e, B = B{}) {
  return compiled<E, B>(e);
}

}  // namespace kiln
