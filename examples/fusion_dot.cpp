// Writes the fused plans of softmax, layer_norm and a 3-layer MLP as Graphviz DOT files, one
// cluster per kernel. Render with scripts/render-dot.sh (dot -Tpng).
#include <kiln/kiln.hpp>

#include <cstdio>
#include <fstream>
#include <string>

using namespace kiln;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  auto x = input<"x", f32, shape<dyn, 512>>{};
  auto write = [&](const char* file, const std::string& dot, const explanation& e) {
    std::ofstream(dir + "/" + file) << dot;
    std::printf("%-16s %2d nodes -> %2d prims, %d kernels, scratch %lld*N bytes\n", file, e.graph_nodes, e.prim_nodes,
                e.kernels, static_cast<long long>(e.scratch.per_dyn));
  };
  auto soft = softmax(x);
  write("softmax.dot", to_dot(soft), explain(soft));
  auto ln = layer_norm(x, param<"gamma", f32, shape<512>>{}, param<"beta", f32, shape<512>>{});
  write("layer_norm.dot", to_dot(ln), explain(ln));
  auto h1 = relu(linear(x, param<"w1", f32, shape<256, 512>>{}, param<"b1", f32, shape<256>>{}));
  auto h2 = relu(linear(h1, param<"w2", f32, shape<256, 256>>{}, param<"b2", f32, shape<256>>{}));
  auto mlp = log_softmax(linear(h2, param<"w3", f32, shape<10, 256>>{}, param<"b3", f32, shape<10>>{}));
  write("mlp.dot", to_dot(mlp), explain(mlp));
  return 0;
}
