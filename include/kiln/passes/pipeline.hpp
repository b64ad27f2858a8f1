// kiln/passes/pipeline.hpp: the passes in order, and plan types that hold their frozen result.
#pragma once

#include "../graph/graph.hpp"
#include "../graph/trace.hpp"
#include "canonicalize.hpp"
#include "decompose.hpp"

namespace kiln::passes {

/// trace -> decompose -> canonicalize: the graph in primitives, simplified.
constexpr graph to_primitives(const graph& g) { return canonicalize(decompose(g)); }

}  // namespace kiln::passes

namespace kiln {

/// The frozen primitive graph of expression type E, computed while the program compiles.
template <class E>
struct prims_plan {
  static constexpr auto graph = freeze([] { return passes::to_primitives(traced<E>::value.thaw()); });
};

}  // namespace kiln
