// kiln/graph/record.hpp: one small constant per expression type, linking to its operands'.
//
// record_of<E>::value holds E's node and pointers to the records of E's operand types. Each
// builder (ex::build) instantiates its result's record while its operands' records already
// exist, so no instantiation ever recurses through a whole expression: expressions thousands
// of ops deep stay inside the compilers' template-depth limits (900 for g++, 1024 for clang),
// and the records cost memory linear in the number of distinct expression types.
//
// Built expressions have short types. A record's structural hash H (64 bits, over the node and
// its operands' hashes) names it: `ex::id<H, NT, NS>` (expr.hpp) is the type of every built
// expression, whatever its depth, and `rec(key<H>{})` finds its record. The registration is a
// friend function that `define<K, Kids...>` defines when a builder instantiates it: K is the
// node's attributes as a value, Kids the operands' (short) types. Two expressions of the same
// structure instantiate the same `define` and get the same id. Two different structures with
// the same hash would define `rec(key<H>)` twice: a compile error (redefinition of rec), never
// a wrong graph. Symbol names, and so the compilers' work per node, no longer grow with the
// depth of the expression (nested types made -O2 builds quadratic in depth).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "graph.hpp"

namespace kiln {

struct record {
  node n;
  int kids = 0;
  const record* const* kid = nullptr;  ///< the operands' records
  index_t tree_nodes = 1;  ///< nodes of the expression tree (a shared operand type counts per use)
  /// A hash of the whole subtree's structure, and whether the subtree is pure (no bound tensor
  /// or C++ scalar: those are a new leaf at each use). Two pure subtrees with the same structure
  /// compute the same value, so tracing emits them once (a loss shared by many grads, say).
  std::uint64_t hash = 0;
  bool pure = true;
  /// Bound tensors and C++ scalars of the subtree (per use, like tree_nodes): the length of its
  /// part of an expression object's leaf data.
  index_t tensors = 0, scalars = 0;
};

template <class E>
struct record_of;

/// The registry of built expressions: `rec(key<H>{})` is the record of hash H, defined by the
/// `define` that registered it.
namespace reg {
#if defined(__NVCC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1301  // the same warning as g++'s, from nvcc's front end
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"
#endif
template <std::uint64_t H>
struct key {
  friend constexpr const record& rec(key);
};
/// The same for the plans a backend runs under their expression's hash (the CPU backend's copy_of):
/// `sched(plan_key<H>{})` is the schedule that the backend's registration defines.
template <std::uint64_t H>
struct plan_key {
  friend constexpr const auto& sched(plan_key);
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__NVCC__)
#pragma nv_diagnostic pop
#endif
/// Registers schedule S under hash H (a friend of the same namespace as plan_key's).
template <std::uint64_t H, const auto& S>
struct enrol_plan {
  friend constexpr const auto& sched(plan_key<H>) { return S; }
};
}  // namespace reg

namespace ex {
template <std::uint64_t H, std::size_t NT, std::size_t NS>
struct id;
template <std::uint64_t H, std::size_t NT, std::size_t NS, std::size_t N>
struct root;
}

namespace detail {
template <class E>
struct is_id : std::false_type {};
template <std::uint64_t H, std::size_t NT, std::size_t NS>
struct is_id<ex::id<H, NT, NS>> : std::true_type {};
template <std::uint64_t H, std::size_t NT, std::size_t NS, std::size_t N>
struct is_id<ex::root<H, NT, NS, N>> : std::true_type {};
}  // namespace detail

/// The record of expression type E: a registered one for a built expression (ex::id), else
/// record_of<E> (leaves).
template <class E>
constexpr const record& record_ref() {
  using U = std::remove_cvref_t<E>;  // decltype of a constexpr expression is const
  if constexpr (detail::is_id<U>::value) return rec(reg::key<U::hash>{});
  else return record_of<U>::value;
}
/// &record_ref<E>(), spelled as a function: nvcc's front end rejects `&f<T>()...` in a pack
/// expansion ("expression must be an lvalue").
template <class E>
constexpr const record* record_ptr() {
  return &record_ref<E>();
}

/// A node's attributes as a value that can be a template argument (no pointer, no double):
/// everything a builder's make() sets. Placeholders, the only named nodes, are leaves and are
/// never registered.
struct node_key {
  op o = op::input;
  dtype dt = dtype::f32;
  dims shape{};
  attributes a{};  ///< graph.hpp's one list of the attributes
};

namespace detail {
constexpr node_key key_of(const node& n) { return {n.o, n.dt, n.shape, attributes_of(n)}; }
constexpr node node_of(const node_key& k) {
  node n;
  n.o = k.o;
  n.dt = k.dt;
  n.shape = k.shape;
  set_attributes(n, k.a);
  return n;
}

template <class... K>
constexpr std::array<const record*, sizeof...(K)> kid_records(std::tuple<K...>*) {
  return {record_ptr<K>()...};
}
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) {  // splitmix64 of the combination
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A hash of everything that defines a node's value given its inputs.
constexpr std::uint64_t node_hash(const node& n) {
  std::uint64_t h = mix(static_cast<std::uint64_t>(n.o), static_cast<std::uint64_t>(n.dt));
  h = mix(h, static_cast<std::uint64_t>(n.shape.rank));
  for (int i = 0; i < n.shape.rank; ++i) h = mix(h, static_cast<std::uint64_t>(n.shape.e[i]));
  const attributes a = attributes_of(n);
  for (const std::uint64_t w : a.w) h = mix(h, w);
  for (char c : n.label()) h = mix(h, static_cast<std::uint64_t>(static_cast<unsigned char>(c)));
  return h;
}

template <std::size_t N>
constexpr record make_record(const node& n, const std::array<const record*, N>& kids) {
  record r;
  r.n = n;
  r.kids = static_cast<int>(N);
  r.kid = kids.data();
  r.hash = node_hash(r.n);
  r.pure = r.n.o != op::bound && r.n.o != op::scalar;
  r.tensors = r.n.o == op::bound;
  r.scalars = r.n.o == op::scalar;
  for (const record* k : kids) {
    r.tensors += k->tensors;
    r.scalars += k->scalars;
    r.tree_nodes += k->tree_nodes;
    r.hash = mix(r.hash, k->hash);
    r.pure = r.pure && k->pure;
  }
  return r;
}
}  // namespace detail

template <class E>
struct record_of {
  static constexpr auto kid_records = detail::kid_records(static_cast<typename E::kids*>(nullptr));
  static constexpr record value = detail::make_record(E::make(), kid_records);
};

namespace reg {
/// Registers the record of a node with attributes K and operand types Kids under its hash.
template <node_key K, class... Kids>
struct define {
  static constexpr std::array<const record*, sizeof...(Kids)> kid_records{record_ptr<Kids>()...};
  static constexpr record value = detail::make_record(detail::node_of(K), kid_records);
  static constexpr std::uint64_t hash = value.hash;
  friend constexpr const record& rec(key<hash>) { return value; }
};

template <class R, class Kids = typename R::kids>
struct definer;
template <class R, class... Kids>
struct definer<R, std::tuple<Kids...>> {
  using type = define<detail::key_of(R::make()), Kids...>;
};
}  // namespace reg

/// The registration of expression node type R (a shallow type: its operands are ids or
/// leaves); instantiating it defines rec(key<R's hash>).
template <class R>
using definer_of = typename reg::definer<R>::type;

}  // namespace kiln
