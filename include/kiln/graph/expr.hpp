// kiln/graph/expr.hpp: capture. Expression nodes, the operators and functions that build them,
// and the compile-time shape and dtype checks.
//
// An expression's type names its graph: `exp(a) + b` is built from the node types
//   ex::unary<op::exp, ex::bound<float, 2>>                         (registered as ex::id<H1, 1, 0>)
//   ex::binary<op::add, ex::id<H1, 1, 0>, ex::bound<float, 2>>      (registered as ex::id<H2, 2, 0>)
// and has type ex::id<H2, 2, 0>: each built node is registered under its structural hash
// (record.hpp), so type names stay short however deep the expression is. Node types say
// nothing about how to compute; each knows its dtype and static shape and can describe itself
// as a graph node (make()); trace.hpp turns the registered records into a graph value.
// Expression objects hold only their leaf data (bound tensors, which are shared handles, and
// scalars), so returning one never dangles.
//
// Dtypes follow PyTorch: mixed operands promote (bool < i32 < i64 < bf16 < f32 < f64), C++
// scalars are "weak" (x_f32 * 2.0 stays f32), float functions and `/` on integers give f32,
// sum of integers gives i64. Promotion is made explicit in the graph with cast nodes.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../core/dtype.hpp"
#include "../core/fixed_string.hpp"
#include "../core/shape.hpp"
#include "../core/shape_rules.hpp"
#include "../core/tensor.hpp"
#include "binding.hpp"
#include "check.hpp"
#include "graph.hpp"
#include "ops.hpp"
#include "record.hpp"

namespace kiln {

namespace detail {
template <class S> struct is_shape : std::false_type {};
template <index_t... E> struct is_shape<shape<E...>> : std::true_type {};

constexpr dims all_dyn(int rank) {
  dims d;
  d.rank = rank;
  for (int i = 0; i < rank; ++i) d.e[i] = dyn;
  return d;
}
constexpr node make_node(op o, dtype dt, const dims& shape) {
  node n;
  n.o = o;
  n.dt = dt;
  n.shape = shape;
  return n;
}

/// A capture node's dtype and shape.
struct typed {
  dtype dt = dtype::f32;
  dims shape{};
};
/// The dtype and shape of node n (its op and attributes) on operands K..., by the catalogue's
/// rule (graph.hpp's infer), as every pass and backend finds them; poisoned (with the dtype
/// `poisoned`) where an operand is, or where the rule refuses them: the builder that made the
/// node has reported that mistake (one error per mistake; a tangent of the wrong shape still
/// makes its jvp node).
/// (One function for every node type: a template per operand list, with infer's lambda in it,
/// cost the compiler memory per node type.)
constexpr typed by_rule(const node& n, const dims* s, const dtype* d, int count, dtype poisoned) {
  for (int j = 0; j < count; ++j)
    if (s[j].poisoned()) return {poisoned, dims::poison()};
  const inferred r = infer(n, [&](int j) { return operand{op::input, d[j], s[j]}; });
  if (r.error) return {poisoned, dims::poison()};
  return {r.dt, r.shape};
}
template <class... K>
constexpr typed by_rule(const node& n, dtype poisoned) {
  const dims s[] = {K::shape..., dims{}};
  const dtype d[] = {K::dt..., dtype::f32};
  return by_rule(n, s, d, static_cast<int>(sizeof...(K)), poisoned);
}
/// Whether node type N's operands satisfy its op's rule (graph.hpp's infer), for a builder's
/// check; true where an operand is poisoned (its mistake was reported where it was made).
template <class N, class Kids = typename N::kids>
inline constexpr bool rule_ok = false;
template <class N, class... K>
inline constexpr bool rule_ok<N, std::tuple<K...>> = (K::shape.poisoned() || ...) || !N::shape.poisoned();
/// Node n with the dtype and shape t.
constexpr node with_type(node n, const typed& t) {
  n.dt = t.dt;
  n.shape = t.shape;
  return n;
}
}  // namespace detail

/// A C++ scalar's value in an expression (which member holds it depends on the dtype).
struct scalar_value {
  double f = 0;
  std::int64_t i = 0;
};

/// The run-time data of an expression: its bound tensors and its scalars, each in leaf
/// (slot) order. Placeholders carry nothing. The structure lives only in the type, so an
/// expression object never nests its operands, and copying it is flat.
template <std::size_t NT, std::size_t NS>
struct leaf_data {
  std::array<any_tensor, NT> tensors{};
  std::array<scalar_value, NS> scalars{};
};

namespace ex {

/// The base of every expression node: its operand types (`kids`) and its leaf data.
template <class... K>
struct node_base : expr_base {
  using kids = std::tuple<K...>;
  static constexpr std::size_t tensor_leaves = (K::tensor_leaves + ... + 0);
  static constexpr std::size_t scalar_leaves = (K::scalar_leaves + ... + 0);
  leaf_data<tensor_leaves, scalar_leaves> data{};
};

/// A leaf: no operands; NT tensors and NS scalars of data.
template <std::size_t NT, std::size_t NS>
struct leaf_base : expr_base {
  using kids = std::tuple<>;
  static constexpr std::size_t tensor_leaves = NT;
  static constexpr std::size_t scalar_leaves = NS;
  leaf_data<NT, NS> data{};
};

}  // namespace ex

/// A named placeholder leaf, bound to a tensor by name when the graph runs.
template <op O, fixed_string Name, dtype D, class S>
struct named_leaf : ex::leaf_base<0, 0> {
  static_assert(detail::is_shape<S>::value, "kiln: a placeholder's third argument must be kiln::shape<...>");
  static_assert(Name.size() > 0 && Name.size() <= max_name, "kiln: placeholder names have 1 to 127 characters");
  static_assert(countable_static(S::value), "kiln: a placeholder's shape may count at most 2^59 elements "
                                            "(kiln::max_elements), so that byte counts and offsets never overflow");
  static constexpr dtype dt = D;
  static constexpr dims shape = S::value;
  static constexpr auto name = Name;  ///< the placeholder's name, a fixed_string
  using shape_type = S;
  static constexpr node make() {
    node n = detail::make_node(O, D, shape);
    n.set_name(Name.view());
    return n;
  }
};

/// A model input: `input<"x", f32, shape<dyn, 784>>`. `X{} = t` binds tensor t to it by type
/// (`eval(y, X{} = t)`, graph/binding.hpp).
template <fixed_string Name, dtype D, class S>
struct input : named_leaf<op::input, Name, D, S> {
  template <bindable_tensor T>
  typed_feed<input> operator=(const T& t) const {
    return bind_to<input>(t);
  }
};
/// A model parameter: `param<"w1", f32, shape<784, 256>>`; `W1{} = t` binds t to it.
template <fixed_string Name, dtype D, class S>
struct param : named_leaf<op::param, Name, D, S> {
  template <bindable_tensor T>
  typed_feed<param> operator=(const T& t) const {
    return bind_to<param>(t);
  }
};

namespace ex {

/// What an op returns when it finds a compile-time mistake (after reporting it): a node whose
/// poisoned shape every later check accepts, so one mistake gives one error.
template <dtype D>
struct invalid : leaf_base<0, 0> {
  static constexpr dtype dt = D;
  static constexpr dims shape = dims::poison();
  static constexpr node make() { return detail::make_node(op::constant, D, dims{}); }
};

/// A tensor captured by an eager-style expression (a handle: shares the tensor's storage).
template <class T, int R>
struct bound : leaf_base<1, 0> {
  static constexpr dtype dt = dtype_of<T>;
  static constexpr dims shape = detail::all_dyn(R);
  static constexpr node make() { return detail::make_node(op::bound, dt, shape); }
};

/// A rank-0 constant known at compile time (its double's bits as the template argument: clang
/// 14 takes no floating-point template arguments). Unlike a C++ scalar, which is a run-time
/// leaf, it is part of the graph: an expression holding only literals and placeholders is pure,
/// so tracing shares it wherever it appears (a loss under many grad nodes is traced once).
template <dtype D, std::uint64_t Bits>
struct literal : leaf_base<0, 0> {
  static constexpr dtype dt = D;
  static constexpr dims shape{};
  static constexpr node make() {
    node n = detail::make_node(op::constant, D, shape);
    n.value = std::bit_cast<double>(Bits);
    return n;
  }
};

/// A C++ scalar in an expression (its value is read at run time; its dtype is fixed by the
/// tensor it meets).
template <dtype D>
struct scalar : leaf_base<0, 1> {
  static constexpr dtype dt = D;
  static constexpr dims shape{};
  static constexpr node make() { return detail::make_node(op::scalar, D, shape); }
};

// Each node type gives its op and attributes (proto); its dtype and shape follow from them by
// the catalogue's rule (detail::by_rule), written nowhere else.
template <op O, class A>
struct unary : node_base<A> {
  static constexpr node proto() { return detail::make_node(O, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <op O, class A, class B>
struct binary : node_base<A, B> {
  static constexpr node proto() { return detail::make_node(O, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<A, B>(proto(), is_comparison(O) ? dtype::boolean : A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class C, class A, class B>
struct select : node_base<C, A, B> {
  static constexpr node proto() { return detail::make_node(op::where, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<C, A, B>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <op O, std::uint32_t Mask, bool Keep, class A>
struct reduce : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(O, dtype::f32, dims{});
    n.axes = Mask;
    n.keepdim = Keep;
    if (O == op::var) n.value = 1;  // unbiased, PyTorch's default correction
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class A, class B>
struct matmul : node_base<A, B> {
  static constexpr node proto() { return detail::make_node(op::matmul, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<A, B>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class S, class A>
struct reshape : node_base<A> {
  static constexpr node proto() { return detail::make_node(op::reshape, dtype::f32, S::value); }  // the target
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class P, class A>
struct permute;
template <int... P, class A>
struct permute<perm<P...>, A> : node_base<A> {
  static_assert(sizeof...(P) <= max_rank);
  static constexpr node proto() {
    node n = detail::make_node(op::permute, dtype::f32, dims{});
    int i = 0;
    ((n.perm.set(i++, P)), ...);
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class S, class A>
struct broadcast : node_base<A> {
  static constexpr node proto() { return detail::make_node(op::broadcast, dtype::f32, S::value); }  // the target
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <int Axis, index_t Begin, index_t End, index_t Step, class A>
struct slice : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(op::slice, dtype::f32, dims{});
    n.axis = Axis;
    n.begin = Begin;
    n.end = End;
    n.step = Step;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <int Axis, class A, class B>
struct concat : node_base<A, B> {
  static constexpr node proto() {
    node n = detail::make_node(op::concat, dtype::f32, dims{});
    n.axis = Axis;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A, B>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <dtype D, class A>
struct cast : node_base<A> {
  static constexpr node proto() { return detail::make_node(op::cast, D, dims{}); }  // the target dtype
  static constexpr detail::typed t = detail::by_rule<A>(proto(), D);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

/// A high-level op with several operands (softmax, layer_norm, linear, mse_loss,
/// cross_entropy); Axis is its axis where it has one. Its result dtype is its first operand's.
template <op O, int Axis, class... K>
struct composite : node_base<K...> {
  static constexpr node proto() {
    node n = detail::make_node(O, dtype::f32, dims{});
    n.axis = Axis;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<K...>(proto(), std::tuple_element_t<0, std::tuple<K...>>::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

/// A built expression: its type names only its structural hash H (record.hpp) and its numbers
/// of bound tensors and scalars, however deep the expression is. Its node, operands, dtype and
/// shape are in the record registered under H.
template <std::uint64_t H, std::size_t NT, std::size_t NS>
struct id : leaf_base<NT, NS> {
  static constexpr std::uint64_t hash = H;
  static constexpr dtype dt = rec(reg::key<H>{}).n.dt;
  static constexpr dims shape = rec(reg::key<H>{}).n.shape;
  static constexpr node make() { return rec(reg::key<H>{}).n; }
};
/// Writes the operands' leaf data one after another into `to` (sized for all of them).
/// std::copy: a memmove for scalars, not an unrolled loop.
template <class Data, class K>
constexpr void append_one(Data& to, std::size_t& t, std::size_t& s, const K& kid) {
  std::copy(kid.data.tensors.begin(), kid.data.tensors.end(), to.tensors.begin() + t);
  std::copy(kid.data.scalars.begin(), kid.data.scalars.end(), to.scalars.begin() + s);
  t += kid.data.tensors.size();
  s += kid.data.scalars.size();
}
template <class Data, class... K>
constexpr void append_leaf_data(Data& to, const K&... k) {
  std::size_t t = 0, s = 0;
  (append_one(to, t, s, k), ...);  // per operand, not a lambda named with all of them
}


/// Builds node R from its operands (R's operand types are ids or leaves): registers R's record
/// now, while its operands' records exist, so tracing never recurses through the expression,
/// and returns the expression as an id holding its operands' leaf data, concatenated.
template <class R, class... K>
constexpr auto build(const K&... k) {  // `auto`: g++ instantiates the body (and the record) now
  static_assert(R::make().label().empty(), "kiln: a registered node has no name");
  constexpr node n = R::make();
  if constexpr (!countable_static(n.shape)) {
    // a broadcast, matmul, window op... of addressable operands whose result is not: the error
    // names the op and its shape, and a poisoned node keeps it the only one
    (void)error::shape_has_too_many_elements<n.o, as_shape<n.shape>, false>::value;
    return invalid<n.dt>{};
  } else {
    constexpr std::uint64_t h = definer_of<R>::hash;
    id<h, R::tensor_leaves, R::scalar_leaves> r{};
    if constexpr (sizeof...(K) == 1) {
      ((r.data = k.data), ...);  // one operand: the same leaf data, copied whole
    } else {
      append_leaf_data(r.data, k...);
    }
    return r;
  }
}

/// A built kiln::outputs(...) (not an expression): like an id, its type names only the
/// structural hash of all the outputs and its numbers of leaves and outputs. With the outputs'
/// types in its name instead (a training step has one per parameter and state), every
/// template instantiated for the step carried that list in its symbol name, and g++ 12 pays
/// for every long name (docs/build-cost.md).
template <std::uint64_t H, std::size_t NT, std::size_t NS, std::size_t N>
struct root : outputs_base {
  static constexpr std::uint64_t hash = H;
  static constexpr std::size_t tensor_leaves = NT, scalar_leaves = NS, size = N;
  leaf_data<NT, NS> data{};
  static constexpr node make() { return rec(reg::key<H>{}).n; }
};

/// Builds the root R of kiln::outputs(...) (R's operand types are ids or leaves) as a root.
template <class R, class... K>
  requires std::derived_from<R, outputs_base>
constexpr auto build_root(const K&... k) {
  constexpr std::uint64_t h = definer_of<R>::hash;
  root<h, R::tensor_leaves, R::scalar_leaves, R::size> r{};
  append_leaf_data(r.data, k...);
  return r;
}

}  // namespace ex

// ---- operands ------------------------------------------------------------------------------

namespace detail {
template <class T> struct is_tensor : std::false_type {};
template <class T, int R> struct is_tensor<tensor<T, R>> : std::true_type {};
}  // namespace detail

/// What may stand for a tensor in an expression: an expression or a kiln::tensor.
template <class T>
concept tensor_operand = expression<T> || detail::is_tensor<std::remove_cvref_t<T>>::value;
/// A C++ number in an expression.
template <class T>
concept scalar_operand = std::is_arithmetic_v<std::remove_cvref_t<T>>;

/// Infinity as a number the compiler knows: `where(mask, scores, -kiln::inf)`. A C++ number in
/// an expression is a run-time value (a leaf of the graph, which may change from call to call),
/// so no pass can tell that it is -inf; kiln::inf enters the graph as a constant of the other
/// operand's dtype, and the rewrite of hand-written attention reads where(m, s, -kiln::inf) as
/// a bool mask. (A number known to the compiler has to be a type: clang 14 takes no double
/// template arguments.)
template <bool Negative>
struct infinity_t {
  constexpr infinity_t<!Negative> operator-() const { return {}; }
  static constexpr double value =
      Negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
};
inline constexpr infinity_t<false> inf{};

namespace detail {
template <class T> struct is_known_scalar : std::false_type {};
template <bool N> struct is_known_scalar<infinity_t<N>> : std::true_type {};
}  // namespace detail
/// A number the compiler knows (kiln::inf, -kiln::inf): a floating-point scalar.
template <class T>
concept known_scalar = detail::is_known_scalar<std::remove_cvref_t<T>>::value;

/// The expression node for an operand (a tensor becomes a bound leaf).
template <tensor_operand X>
constexpr auto as_expr(const X& x) {
  if constexpr (expression<X>) return x;
  else {
    ex::bound<typename X::value_type, X::rank> b{};
    b.data.tensors[0] = x.any();
    (void)record_of<decltype(b)>::value;
    return b;
  }
}

/// `e` converted to dtype D (no node when it already has it).
template <dtype D, class E>
constexpr auto to_dtype(const E& e) {
  if constexpr (E::dt == D) return e;
  else return ex::build<ex::cast<D, E>>(e);
}

template <dtype D, class S>
constexpr ex::scalar<D> make_scalar(S s) {
  (void)record_of<ex::scalar<D>>::value;
  ex::scalar<D> r{};
  if constexpr (is_floating(D)) r.data.scalars[0].f = static_cast<double>(s);
  else r.data.scalars[0].i = static_cast<std::int64_t>(s);
  return r;
}

// ---- pointwise -----------------------------------------------------------------------------

namespace detail {
constexpr bool accepts_bool(op o) { return is_comparison(o) || o == op::max || o == op::min; }

template <op O, class A, class B>
constexpr auto binary_exprs(const A& a, const B& b) {
  constexpr dtype p = promote(A::dt, B::dt);
  constexpr dtype d = O == op::div || is_float_binary(O) ? float_result(p) : p;
  // bool + bool and bool * bool are logical or and and, as PyTorch's add and mul of bools
  constexpr op o = d != dtype::boolean ? O : O == op::add ? op::max : O == op::mul ? op::min : O;
  constexpr bool dtype_ok = d != dtype::boolean || accepts_bool(o);
  constexpr bool shape_ok = broadcast(A::shape, B::shape).ok;
  (void)error::dtype_not_supported<O, d, dtype_ok>::value;
  (void)error::shapes_do_not_broadcast<O, as_shape<A::shape>, as_shape<B::shape>, shape_ok>::value;
  if constexpr (!(dtype_ok && shape_ok)) {
    return ex::invalid<is_comparison(O) ? dtype::boolean : d>{};
  } else {
    auto ca = to_dtype<d>(a);
    auto cb = to_dtype<d>(b);
    return ex::build<ex::binary<o, decltype(ca), decltype(cb)>>(ca, cb);
  }
}

/// The dtype a scalar takes next to a tensor of dtype t (and that the tensor is cast to).
template <op O, class S>
constexpr dtype scalar_pair_dtype(dtype t) {
  const dtype d = promote_with_scalar(t, std::is_floating_point_v<S>);
  return O == op::div || is_float_binary(O) ? float_result(d) : d;
}
}  // namespace detail

/// Builds a binary pointwise node from any two operands (at least one a tensor operand).
template <op O, class A, class B>
  requires((tensor_operand<A> || scalar_operand<A>) && (tensor_operand<B> || scalar_operand<B>) &&
           (tensor_operand<A> || tensor_operand<B>))
constexpr auto binary_op(const A& a, const B& b) {
  if constexpr (tensor_operand<A> && tensor_operand<B>) {
    return detail::binary_exprs<O>(as_expr(a), as_expr(b));
  } else if constexpr (tensor_operand<A>) {
    using E = decltype(as_expr(a));
    constexpr dtype d = detail::scalar_pair_dtype<O, B>(E::dt);
    return detail::binary_exprs<O>(to_dtype<d>(as_expr(a)), make_scalar<d>(b));
  } else {
    using E = decltype(as_expr(b));
    constexpr dtype d = detail::scalar_pair_dtype<O, A>(E::dt);
    return detail::binary_exprs<O>(make_scalar<d>(a), to_dtype<d>(as_expr(b)));
  }
}

#define KILN_BINARY(NAME, OP)                                          \
  template <class A, class B>                                          \
    requires requires(const A& a, const B& b) { binary_op<OP>(a, b); } \
  constexpr auto NAME(const A& a, const B& b) {                        \
    return binary_op<OP>(a, b);                                        \
  }
KILN_BINARY(operator+, op::add)
KILN_BINARY(operator-, op::sub)
KILN_BINARY(operator*, op::mul)
KILN_BINARY(operator/, op::div)
KILN_BINARY(operator<, op::lt)
KILN_BINARY(operator<=, op::le)
KILN_BINARY(operator>, op::gt)
KILN_BINARY(operator>=, op::ge)
KILN_BINARY(add, op::add)
KILN_BINARY(sub, op::sub)
KILN_BINARY(mul, op::mul)
KILN_BINARY(div, op::div)
KILN_BINARY(max, op::max)  ///< elementwise maximum; max(x) / max<axes...>(x) reduce
KILN_BINARY(min, op::min)
KILN_BINARY(pow, op::pow)
KILN_BINARY(fmod, op::fmod)    ///< C's fmod: a - trunc(a / b) b, exact; the sign of a (integers: %, 0 throws)
KILN_BINARY(atan2, op::atan2)  ///< the angle of (b, a) in [-pi, pi], as std::atan2(a, b)
KILN_BINARY(eq, op::eq)
KILN_BINARY(ne, op::ne)
KILN_BINARY(lt, op::lt)
KILN_BINARY(le, op::le)
KILN_BINARY(gt, op::gt)
KILN_BINARY(ge, op::ge)
#undef KILN_BINARY

/// Builds a unary pointwise node; float functions of integers compute in f32.
template <op O, tensor_operand X>
constexpr auto unary_op(const X& x) {
  using E = decltype(as_expr(x));
  constexpr dtype d = is_float_unary(O) ? float_result(E::dt) : E::dt;
  (void)error::dtype_not_supported<O, E::dt, d != dtype::boolean>::value;
  if constexpr (d == dtype::boolean) {
    return ex::invalid<d>{};
  } else {
    auto c = to_dtype<d>(as_expr(x));
    return ex::build<ex::unary<O, decltype(c)>>(c);
  }
}

#define KILN_UNARY(NAME, OP)              \
  template <tensor_operand X>             \
  constexpr auto NAME(const X& x) {       \
    return unary_op<OP>(x);               \
  }
KILN_UNARY(operator-, op::neg)
KILN_UNARY(neg, op::neg)
KILN_UNARY(abs, op::abs)
KILN_UNARY(exp, op::exp)
KILN_UNARY(log, op::log)
KILN_UNARY(sqrt, op::sqrt)
KILN_UNARY(rsqrt, op::rsqrt)
KILN_UNARY(reciprocal, op::reciprocal)
KILN_UNARY(tanh, op::tanh)
KILN_UNARY(sigmoid, op::sigmoid)
KILN_UNARY(relu, op::relu)
KILN_UNARY(gelu, op::gelu)            ///< exact (erf) form, PyTorch's default
KILN_UNARY(gelu_tanh, op::gelu_tanh)  ///< tanh approximation
KILN_UNARY(silu, op::silu)            ///< x * sigmoid(x)
KILN_UNARY(softplus, op::softplus)    ///< log(1 + e^x); x above 20, as PyTorch
KILN_UNARY(sin, op::sin)
KILN_UNARY(cos, op::cos)
KILN_UNARY(erf, op::erf)
KILN_UNARY(atan, op::atan)
KILN_UNARY(asin, op::asin)
KILN_UNARY(acos, op::acos)
#undef KILN_UNARY

// floor, ceil, round (to nearest, ties to even, as torch.round) and trunc; an integer tensor is
// returned as it is, as in PyTorch
#define KILN_ROUNDING(NAME, OP)                                        \
  template <tensor_operand X>                                          \
  constexpr auto NAME(const X& x) {                                    \
    if constexpr (is_integral(decltype(as_expr(x))::dt)) return as_expr(x); \
    else return unary_op<OP>(x);                                       \
  }
KILN_ROUNDING(floor, op::floor)
KILN_ROUNDING(ceil, op::ceil)
KILN_ROUNDING(round, op::round)
KILN_ROUNDING(trunc, op::trunc)
#undef KILN_ROUNDING

/// where(cond, a, b): a where cond is true, else b; cond must be bool. a or b may be scalars,
/// or kiln::inf, -kiln::inf.
template <tensor_operand C, class A, class B>
  requires((tensor_operand<A> || scalar_operand<A> || known_scalar<A>) &&
           (tensor_operand<B> || scalar_operand<B> || known_scalar<B>))
constexpr auto where(const C& c, const A& a, const B& b) {
  using CE = decltype(as_expr(c));
  constexpr bool cond_ok = CE::dt == dtype::boolean;
  (void)error::where_condition_not_bool<CE::dt, cond_ok>::value;
  constexpr bool a_float = std::is_floating_point_v<A> || known_scalar<A>;
  constexpr bool b_float = std::is_floating_point_v<B> || known_scalar<B>;
  constexpr dtype d = [] {
    if constexpr (tensor_operand<A> && tensor_operand<B>)
      return promote(decltype(as_expr(a))::dt, decltype(as_expr(b))::dt);
    else if constexpr (tensor_operand<A>)
      return promote_with_scalar(decltype(as_expr(a))::dt, b_float);
    else if constexpr (tensor_operand<B>)
      return promote_with_scalar(decltype(as_expr(b))::dt, a_float);
    else
      return a_float || b_float ? dtype::f32 : dtype::i64;
  }();
  auto side = [](const auto& v) {
    using X = std::remove_cvref_t<decltype(v)>;
    if constexpr (tensor_operand<X>) return to_dtype<d>(as_expr(v));
    else if constexpr (known_scalar<X>) return ex::literal<d, std::bit_cast<std::uint64_t>(X::value)>{};
    else return make_scalar<d>(v);
  };
  auto ce = as_expr(c);
  auto ae = side(a);
  auto be = side(b);
  using AE = decltype(ae);
  using BE = decltype(be);
  constexpr broadcast_result r1 = broadcast(CE::shape, AE::shape);
  constexpr bool second_ok = !r1.ok || broadcast(r1.shape, BE::shape).ok;
  (void)error::shapes_do_not_broadcast<op::where, as_shape<CE::shape>, as_shape<AE::shape>, r1.ok>::value;
  (void)error::shapes_do_not_broadcast<op::where, as_shape<r1.shape>, as_shape<BE::shape>, second_ok>::value;
  if constexpr (!(cond_ok && r1.ok && second_ok)) return ex::invalid<d>{};
  else return ex::build<ex::select<CE, AE, BE>>(ce, ae, be);
}

/// cast<f64>(x): converts the element type.
template <dtype D, tensor_operand X>
constexpr auto cast(const X& x) {
  return to_dtype<D>(as_expr(x));
}

// ---- reductions ------------------------------------------------------------------------------

/// Tag for reductions that keep reduced axes as extent 1: sum<1>(x, keepdim).
struct keepdim_t {};
inline constexpr keepdim_t keepdim{};

namespace detail {
/// Whether the axes Ax... are in range for a rank-`rank` shape and name distinct axes.
template <int... Ax>
constexpr bool axes_valid(int rank) {
  if (rank < 0) return true;  // poisoned operand: already reported
  if (!((Ax >= -rank && Ax < rank) && ...)) return false;
  const int w[] = {(Ax < 0 ? Ax + rank : Ax)..., -1};
  for (std::size_t i = 0; i < sizeof...(Ax); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (w[i] == w[j]) return false;
  return true;
}
template <int... Ax>
constexpr std::uint32_t axes_mask(int rank) {
  if (rank < 0 || !axes_valid<Ax...>(rank)) return 0;
  if constexpr (sizeof...(Ax) == 0) return rank >= 32 ? ~0u : (1u << rank) - 1u;
  else return ((1u << (Ax < 0 ? Ax + rank : Ax)) | ...);
}
}  // namespace detail

/// Reduction over the axes Ax... (all axes when none are given; negatives count from the end).
template <op O, bool Keep, int... Ax, tensor_operand X>
constexpr auto reduce_op(const X& x) {
  using E = decltype(as_expr(x));
  constexpr int r = E::shape.rank;
  constexpr bool axes_ok = detail::axes_valid<Ax...>(r);
  constexpr bool dtype_ok = (O != op::mean && O != op::var) || is_floating(E::dt);
  (void)error::axis_out_of_range<O, as_shape<E::shape>, axes<Ax...>, axes_ok>::value;
  (void)error::dtype_not_supported<O, E::dt, dtype_ok>::value;
  // sums of integers and bools accumulate in i64, as in PyTorch
  constexpr dtype d = O == op::sum && !is_floating(E::dt) ? dtype::i64 : E::dt;
  if constexpr (!(axes_ok && dtype_ok)) {
    return ex::invalid<d>{};
  } else {
    auto c = to_dtype<d>(as_expr(x));
    return ex::build<ex::reduce<O, detail::axes_mask<Ax...>(r), Keep, decltype(c)>>(c);
  }
}

#define KILN_REDUCTION(NAME, OP)                                              \
  template <int... Ax, tensor_operand X>                                      \
  constexpr auto NAME(const X& x) {                                           \
    return reduce_op<OP, false, Ax...>(x);                                    \
  }                                                                           \
  template <int... Ax, tensor_operand X>                                      \
  constexpr auto NAME(const X& x, keepdim_t) {                                \
    return reduce_op<OP, true, Ax...>(x);                                     \
  }
KILN_REDUCTION(sum, op::sum)
KILN_REDUCTION(mean, op::mean)
KILN_REDUCTION(max, op::amax)
KILN_REDUCTION(min, op::amin)
KILN_REDUCTION(amax, op::amax)
KILN_REDUCTION(amin, op::amin)
KILN_REDUCTION(var, op::var)  ///< unbiased variance (correction 1), as torch.var
#undef KILN_REDUCTION

// ---- contraction ------------------------------------------------------------------------------

namespace detail {
/// matmul's operand shape with torch.matmul's rule for a vector: [k] is a matrix [1, k] on the
/// left (Left), [k, 1] on the right.
constexpr dims as_matrix(const dims& s, bool left) {
  if (s.poisoned() || s.rank != 1) return s;
  return left ? dims{1, s.e[0]} : dims{s.e[0], 1};
}
/// The product's shape without the unit axes that vector operands added.
constexpr dims drop_vector_axes(dims r, bool a_vector, bool b_vector) {
  if (b_vector) --r.rank;
  if (a_vector) {
    r.e[r.rank - 2 >= 0 ? r.rank - 2 : 0] = r.e[r.rank - 1];
    --r.rank;
  }
  return r;
}
template <dims S, class E>
constexpr auto reshaped(const E& e) {
  if constexpr (E::shape == S) return e;
  else return ex::build<ex::reshape<as_shape<S>, E>>(e);
}
}  // namespace detail

/// Batched matrix product [..., m, k] x [..., k, n] -> [..., m, n]; batch extents broadcast. As
/// torch.matmul, a vector operand [k] is a row (on the left) or a column (on the right) whose
/// axis the result drops: a vector times a vector is their dot product (rank 0).
template <tensor_operand A, tensor_operand B>
constexpr auto matmul(const A& a, const B& b) {
  using EA = decltype(as_expr(a));
  using EB = decltype(as_expr(b));
  constexpr dtype d = promote(EA::dt, EB::dt);
  constexpr dims ma = detail::as_matrix(EA::shape, true), mb = detail::as_matrix(EB::shape, false);
  // no silent promotion: an operand that was already an error reports nothing more
  constexpr bool same = EA::dt == EB::dt || EA::shape.poisoned() || EB::shape.poisoned();
  constexpr bool ok = same && d != dtype::boolean && matmul_shape(ma, mb).ok;
  (void)error::matmul_dtypes_differ<EA::dt, EB::dt, same>::value;
  (void)error::dtype_not_supported<op::matmul, d, !same || d != dtype::boolean>::value;
  (void)error::matmul_shapes_do_not_match<as_shape<EA::shape>, as_shape<EB::shape>, matmul_shape(ma, mb).ok>::value;
  if constexpr (!ok) {
    return ex::invalid<d>{};
  } else {
    auto ca = detail::reshaped<ma>(to_dtype<d>(as_expr(a)));
    auto cb = detail::reshaped<mb>(to_dtype<d>(as_expr(b)));
    const auto m = ex::build<ex::matmul<decltype(ca), decltype(cb)>>(ca, cb);
    constexpr bool vector = EA::shape.rank == 1 || EB::shape.rank == 1;
    constexpr dims r = detail::drop_vector_axes(decltype(m)::shape, EA::shape.rank == 1, EB::shape.rank == 1);
    static_assert(!vector || reshape_shape(decltype(m)::shape, r).ok,
                  "kiln::matmul: a vector times a batch with more than one dyn extent (reshape the batch first)");
    return detail::reshaped<r>(m);
  }
}

// ---- shape ops ----------------------------------------------------------------------------------

/// reshape<dyn, 784>(x): at most one extent may be dyn (inferred from the element count).
template <index_t... To, tensor_operand X>
constexpr auto reshape(const X& x) {
  using E = decltype(as_expr(x));
  constexpr bool ok = detail::rule_ok<ex::reshape<shape<To...>, E>>;
  (void)error::reshape_element_counts_differ<as_shape<E::shape>, shape<To...>, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::reshape<shape<To...>, E>>(as_expr(x));
}

/// permute<2, 0, 1>(x): result axis i is x's axis P[i].
template <int... P, tensor_operand X>
constexpr auto permute(const X& x) {
  using E = decltype(as_expr(x));
  constexpr int r = E::shape.rank;
  constexpr bool ok = E::shape.poisoned() || (sizeof...(P) == static_cast<std::size_t>(r) &&
                                               ((P >= 0 && P < r) && ...) && detail::axes_valid<P...>(r));
  (void)error::not_a_permutation<as_shape<E::shape>, perm<P...>, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::permute<perm<P...>, E>>(as_expr(x));
}

namespace detail {
template <int R, int A, int B, std::size_t... I>
constexpr auto swap_perm(std::index_sequence<I...>) {
  constexpr int a = A < 0 ? A + R : A, b = B < 0 ? B + R : B;
  return perm<(static_cast<int>(I) == a ? b : static_cast<int>(I) == b ? a : static_cast<int>(I))...>{};
}
template <class P> struct apply_permute;
template <int... P> struct apply_permute<perm<P...>> {
  template <class X> static constexpr auto run(const X& x) { return permute<P...>(x); }
};
}  // namespace detail

/// Swaps two axes (by default the last two).
template <int A = -2, int B = -1, tensor_operand X>
constexpr auto transpose(const X& x) {
  using E = decltype(as_expr(x));
  constexpr int r = E::shape.rank < 0 ? 0 : E::shape.rank;
  (void)error::axis_out_of_range<op::permute, as_shape<E::shape>, axes<A, B>,
                                 E::shape.poisoned() || (A >= -r && A < r && B >= -r && B < r)>::value;
  if constexpr (A >= -r && A < r && B >= -r && B < r)
    return detail::apply_permute<decltype(detail::swap_perm<r, A, B>(std::make_index_sequence<r>{}))>::run(x);
  else
    return ex::invalid<E::dt>{};
}

/// broadcast_to<4, 3>(x): NumPy broadcasting to an explicit shape.
template <index_t... To, tensor_operand X>
constexpr auto broadcast_to(const X& x) {
  using E = decltype(as_expr(x));
  constexpr bool ok = detail::rule_ok<ex::broadcast<shape<To...>, E>>;
  (void)error::cannot_broadcast_to<as_shape<E::shape>, shape<To...>, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::broadcast<shape<To...>, E>>(as_expr(x));
}

/// slice<Axis, Begin, End, Step>(x): [Begin, End) by Step along Axis. Negative Begin/End count
/// from the end; End = to_end (the default) means the whole axis.
template <int Axis, index_t Begin, index_t End = to_end, index_t Step = 1, tensor_operand X>
constexpr auto slice(const X& x) {
  using E = decltype(as_expr(x));
  constexpr int r = E::shape.rank;
  constexpr int a = Axis < 0 ? Axis + r : Axis;
  constexpr bool ok = detail::rule_ok<ex::slice<a, Begin, End, Step, E>>;
  (void)error::slice_out_of_range<as_shape<E::shape>, slice_args<Axis, Begin, End, Step>, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::slice<a, Begin, End, Step, E>>(as_expr(x));
}

/// concat<Axis>(a, b, ...): joins tensors along Axis.
template <int Axis, tensor_operand A, tensor_operand B, tensor_operand... Rest>
constexpr auto concat(const A& a, const B& b, const Rest&... rest) {
  using EA = decltype(as_expr(a));
  using EB = decltype(as_expr(b));
  constexpr int r = EA::shape.rank;
  constexpr int ax = Axis < 0 ? Axis + r : Axis;
  constexpr dtype d = promote(EA::dt, EB::dt);
  constexpr bool axis_ok = detail::axes_valid<Axis>(r);
  constexpr bool ok = axis_ok && concat_shape(EA::shape, EB::shape, ax).ok;
  (void)error::axis_out_of_range<op::concat, as_shape<EA::shape>, axes<Axis>, axis_ok>::value;
  (void)error::concat_shapes_do_not_match<as_shape<EA::shape>, as_shape<EB::shape>, axes<Axis>, !axis_ok || ok>::value;
  if constexpr (!ok) {
    return ex::invalid<d>{};
  } else {
    auto ca = to_dtype<d>(as_expr(a));
    auto cb = to_dtype<d>(as_expr(b));
    auto joined = ex::build<ex::concat<ax, decltype(ca), decltype(cb)>>(ca, cb);
    if constexpr (sizeof...(Rest) == 0) return joined;
    else return concat<Axis>(joined, rest...);
  }
}

// ---- high-level ops (decomposed into primitives by passes/decompose.hpp) ---------------------

namespace detail {
template <op O, int Axis, tensor_operand X>
constexpr auto along_axis(const X& x) {
  using E = decltype(as_expr(x));
  constexpr int r = E::shape.rank;
  constexpr bool ok = axes_valid<Axis>(r);
  (void)error::axis_out_of_range<O, as_shape<E::shape>, axes<Axis>, ok>::value;
  if constexpr (!ok) {
    return ex::invalid<float_result(E::dt)>{};
  } else {
    auto c = to_dtype<float_result(E::dt)>(as_expr(x));
    return ex::build<ex::composite<O, (Axis < 0 && r > 0 ? Axis + r : Axis), decltype(c)>>(c);
  }
}
}  // namespace detail

/// softmax along Axis, numerically stable (the row maximum is subtracted first).
template <int Axis = -1, tensor_operand X>
constexpr auto softmax(const X& x) {
  return detail::along_axis<op::softmax, Axis>(x);
}
/// log(softmax(x)) along Axis, computed as x - max - log(sum(exp(x - max))).
template <int Axis = -1, tensor_operand X>
constexpr auto log_softmax(const X& x) {
  return detail::along_axis<op::log_softmax, Axis>(x);
}

namespace detail {
template <dtype d, class X, class G, class B>
constexpr auto layer_norm_node(const X& x, const G& gamma, const B& beta, double eps) {
  auto cx = to_dtype<d>(as_expr(x));
  auto cg = to_dtype<d>(as_expr(gamma));
  auto cb = to_dtype<d>(as_expr(beta));
  auto ce = make_scalar<d>(eps);
  return ex::build<ex::composite<op::layer_norm, 0, decltype(cx), decltype(cg), decltype(cb), decltype(ce)>>(
      cx, cg, cb, ce);
}
}  // namespace detail

/// Layer normalisation over the trailing axes that gamma and beta cover:
/// (x - mean) / sqrt(biased var + eps) * gamma + beta.
template <tensor_operand X, tensor_operand G, tensor_operand B>
constexpr auto layer_norm(const X& x, const G& gamma, const B& beta, double eps = 1e-5) {
  using EX = decltype(as_expr(x));
  using EG = decltype(as_expr(gamma));
  using EB = decltype(as_expr(beta));
  constexpr dtype d = float_result(promote(promote(EX::dt, EG::dt), EB::dt));
  constexpr bool ok = layer_norm_shape(EX::shape, EG::shape, EB::shape).ok;
  (void)error::layer_norm_shapes_do_not_match<as_shape<EX::shape>, as_shape<EG::shape>, as_shape<EB::shape>, ok>::value;
  if constexpr (!ok) return ex::invalid<d>{};
  else return detail::layer_norm_node<d>(x, gamma, beta, eps);
}


/// x w^T + b with w [out, in] and b [out], as torch.nn.functional.linear.
template <tensor_operand X, tensor_operand W, tensor_operand B>
constexpr auto linear(const X& x, const W& w, const B& b) {
  using EX = decltype(as_expr(x));
  using EW = decltype(as_expr(w));
  using EB = decltype(as_expr(b));
  constexpr dtype d = promote(promote(EX::dt, EW::dt), EB::dt);
  constexpr bool shape_ok = linear_shape(EX::shape, EW::shape, EB::shape).ok;
  (void)error::dtype_not_supported<op::linear, d, d != dtype::boolean>::value;
  (void)error::linear_shapes_do_not_match<as_shape<EX::shape>, as_shape<EW::shape>, as_shape<EB::shape>, shape_ok>::value;
  if constexpr (!(shape_ok && d != dtype::boolean)) {
    return ex::invalid<d>{};
  } else {
    auto cx = to_dtype<d>(as_expr(x));
    auto cw = to_dtype<d>(as_expr(w));
    auto cb = to_dtype<d>(as_expr(b));
    return ex::build<ex::composite<op::linear, 0, decltype(cx), decltype(cw), decltype(cb)>>(cx, cw, cb);
  }
}

/// Mean squared error over all elements (a and b broadcast).
template <tensor_operand A, tensor_operand B>
constexpr auto mse_loss(const A& a, const B& b) {
  using EA = decltype(as_expr(a));
  using EB = decltype(as_expr(b));
  constexpr dtype d = float_result(promote(EA::dt, EB::dt));
  constexpr bool ok = broadcast(EA::shape, EB::shape).ok;
  (void)error::shapes_do_not_broadcast<op::mse_loss, as_shape<EA::shape>, as_shape<EB::shape>, ok>::value;
  if constexpr (!ok) {
    return ex::invalid<d>{};
  } else {
    auto ca = to_dtype<d>(as_expr(a));
    auto cb = to_dtype<d>(as_expr(b));
    return ex::build<ex::composite<op::mse_loss, 0, decltype(ca), decltype(cb)>>(ca, cb);
  }
}

/// Mean cross-entropy of logits [n, classes] against integer labels [n] (log_softmax then
/// the negative log-likelihood of each label), as torch.nn.functional.cross_entropy.
template <tensor_operand L, tensor_operand Y>
constexpr auto cross_entropy(const L& logits, const Y& labels) {
  using EL = decltype(as_expr(logits));
  using EY = decltype(as_expr(labels));
  constexpr bool shape_ok = cross_entropy_shape(EL::shape, EY::shape).ok;
  (void)error::labels_must_be_integers<EY::dt, is_integral(EY::dt)>::value;
  (void)error::cross_entropy_shapes_do_not_match<as_shape<EL::shape>, as_shape<EY::shape>, shape_ok>::value;
  if constexpr (!(shape_ok && is_integral(EY::dt))) {
    return ex::invalid<float_result(EL::dt)>{};
  } else {
    auto cl = to_dtype<float_result(EL::dt)>(as_expr(logits));
    return ex::build<ex::composite<op::cross_entropy, 1, decltype(cl), EY>>(cl, as_expr(labels));
  }
}

}  // namespace kiln
