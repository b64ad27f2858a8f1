// KILN_LOGS parsing, stage printing, explain() and DOT dumps.
#include "support.hpp"

#include <sstream>

using namespace kiln;

namespace {
using X = input<"x", f32, shape<dyn, 64>>;
using Soft = decltype(softmax(X{}));

int count(const std::string& s, std::string_view what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("KILN_LOGS values parse like TORCH_LOGS") {
  std::string unknown;
  const log_stages a = parse_logs("graph, plan", &unknown);
  CHECK(a.graph);
  CHECK(a.plan);
  CHECK(!a.prims);
  CHECK(!a.fusion);
  CHECK(unknown.empty());
  const log_stages all = parse_logs("all");
  CHECK((all.graph && all.prims && all.fusion && all.plan));
  const log_stages b = parse_logs("fusion,bogus,,dynamo", &unknown);
  CHECK(b.fusion);
  CHECK(unknown == "bogus, dynamo");
  CHECK(!parse_logs("").any());
}

TEST_CASE("every stage prints from the frozen plan") {
  std::ostringstream os;
  print_stages(os, parse_logs("all"), traced<Soft>::value.thaw(), passes::thaw_schedule(plan<Soft>::schedule));
  const std::string out = os.str();
  CHECK(out.find("[kiln] graph (as captured): 2 nodes, 1 leaves") != std::string::npos);
  CHECK(out.find("%1 = softmax f32 [dyn, 64] %0") != std::string::npos);
  CHECK(out.find("[kiln] prims (decomposed, canonicalised)") != std::string::npos);
  CHECK(out.find("amax") != std::string::npos);
  CHECK(out.find("[kiln] fusion: 1 kernels") != std::string::npos);
  CHECK(out.find("kernel 0: reduction over [dyn, 64] reducing axes 2") != std::string::npos);
  CHECK(out.find("reads 1 (256*N B), writes 1 (256*N B)") != std::string::npos);
  CHECK(out.find("[kiln] plan: 0 scratch buffers, peak scratch 0 B") != std::string::npos);
}

TEST_CASE("explain() as a value") {
  constexpr explanation e = explain(softmax(X{}));
  static_assert(e.graph_nodes == 2 && e.kernels == 1);
  static_assert(e.prim_nodes > e.graph_nodes);
  CHECK(e.bytes_read.at(1000) == 256000);
}

TEST_CASE("DOT: one cluster per kernel, every edge drawn") {
  const std::string soft = to_dot(softmax(X{}));
  CHECK(soft.rfind("digraph kiln {", 0) == 0);
  CHECK(count(soft, "subgraph cluster_") == 1);
  CHECK(soft.find("kernel 0: reduction [dyn, 64]") != std::string::npos);
  constexpr const auto& s = plan<Soft>::schedule;
  int edges = 0;
  for (const node& n : s.g.nodes) edges += n.nin();
  CHECK(count(soft, " -> ") == edges);
  auto x = input<"x", f32, shape<dyn, 8>>{};
  auto mlp = linear(relu(linear(x, param<"w1", f32, shape<4, 8>>{}, param<"b1", f32, shape<4>>{})),
                    param<"w2", f32, shape<2, 4>>{}, param<"b2", f32, shape<2>>{});
  const std::string m = to_dot(mlp);
  CHECK(count(m, "subgraph cluster_") == 2);
  CHECK(count(m, "kernel 0: matmul") == 1);
  CHECK(m.find("shape=ellipse") != std::string::npos);
  CHECK(m.find("style=dashed") != std::string::npos);  // the transposed weights are a view
}
