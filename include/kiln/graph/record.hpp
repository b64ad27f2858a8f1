// kiln/graph/record.hpp: one small constant per expression type, linking to its operands'.
//
// record_of<E>::value holds E's node and pointers to the records of E's operand types. Each
// builder (ex::build) instantiates its result's record while its operands' records already
// exist, so no instantiation ever recurses through a whole expression: expressions thousands
// of ops deep stay inside the compilers' template-depth limits (900 for g++, 1024 for clang),
// and the records cost memory linear in the number of distinct expression types.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <tuple>

#include "graph.hpp"

namespace kiln {

struct record {
  node n;
  int kids = 0;
  const record* const* kid = nullptr;  ///< the operands' records (record_of<E>::kid_records)
  index_t tree_nodes = 1;  ///< nodes of the expression tree (a shared operand type counts per use)
  /// A hash of the whole subtree's structure, and whether the subtree is pure (no bound tensor
  /// or C++ scalar: those are a new leaf at each use). Two pure subtrees with the same structure
  /// compute the same value, so tracing emits them once (a loss shared by many grads, say).
  std::uint64_t hash = 0;
  bool pure = true;
};

template <class E>
struct record_of;

namespace detail {
template <class... K>
constexpr std::array<const record*, sizeof...(K)> kid_records(std::tuple<K...>*) {
  return {&record_of<K>::value...};
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
  h = mix(h, n.axes | (std::uint64_t{n.keepdim} << 32));
  h = mix(h, static_cast<std::uint64_t>(n.axis));
  h = mix(h, static_cast<std::uint64_t>(n.begin));
  h = mix(h, static_cast<std::uint64_t>(n.end));
  h = mix(h, static_cast<std::uint64_t>(n.step));
  h = mix(h, n.perm.bits);
  h = mix(h, std::bit_cast<std::uint64_t>(n.value));
  for (char c : n.label()) h = mix(h, static_cast<std::uint64_t>(static_cast<unsigned char>(c)));
  return h;
}

template <class E, std::size_t N>
constexpr record make_record(const std::array<const record*, N>& kids) {
  record r;
  r.n = E::make();
  r.kids = static_cast<int>(N);
  r.kid = kids.data();
  r.hash = node_hash(r.n);
  r.pure = r.n.o != op::bound && r.n.o != op::scalar;
  for (const record* k : kids) {
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
  static constexpr record value = detail::make_record<E>(kid_records);
};

}  // namespace kiln
