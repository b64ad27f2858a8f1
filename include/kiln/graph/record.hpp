// kiln/graph/record.hpp: one small constant per expression type, linking to its operands'.
//
// record_of<E>::value holds E's node and pointers to the records of E's operand types. Each
// builder (ex::build) instantiates its result's record while its operands' records already
// exist, so no instantiation ever recurses through a whole expression: expressions thousands
// of ops deep stay inside the compilers' template-depth limits (900 for g++, 1024 for clang),
// and the records cost memory linear in the number of distinct expression types.
#pragma once

#include <array>
#include <tuple>

#include "graph.hpp"

namespace kiln {

struct record {
  node n;
  int kids = 0;
  std::array<const record*, 4> kid{};
  index_t tree_nodes = 1;  ///< nodes of the expression tree (a shared operand type counts per use)
};

template <class E>
struct record_of;

namespace detail {
template <class E, class... K>
constexpr record make_record(std::tuple<K...>*) {
  record r;
  r.n = E::make();
  r.kids = static_cast<int>(sizeof...(K));
  int j = 0;
  ((r.kid[j++] = &record_of<K>::value), ...);
  r.tree_nodes = 1 + (index_t{0} + ... + record_of<K>::value.tree_nodes);
  return r;
}
}  // namespace detail

template <class E>
struct record_of {
  static constexpr record value = detail::make_record<E>(static_cast<typename E::kids*>(nullptr));
};

}  // namespace kiln
