// kiln quick start: eager-style expressions on bound tensors, and a model written with named
// placeholders whose graph is built at compile time.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <random>

using namespace kiln;

int main() {
  // Eager style: c = a + b * 2 runs when it is assigned (broadcasting b over a's rows).
  tensor<float, 2> a({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 1> b({3}, {10, 20, 30});
  tensor<float, 2> c = a + b * 2;
  std::printf("a + b * 2 =\n");
  for (index_t i = 0; i < 2; ++i) std::printf("  %6.1f %6.1f %6.1f\n", c(i, 0), c(i, 1), c(i, 2));

  // A two-layer MLP written with placeholders. Its type is its graph: shapes and dtypes are
  // checked while this file compiles (try changing 16 to 17 in W2's shape).
  using X = input<"x", f32, shape<dyn, 8>>;
  using W1 = param<"w1", f32, shape<8, 16>>;
  using B1 = param<"b1", f32, shape<16>>;
  using W2 = param<"w2", f32, shape<16, 4>>;
  auto logits = matmul(gelu(matmul(X{}, W1{}) + B1{}), W2{});
  auto probs = exp(logits) / sum<1>(exp(logits), keepdim);

  constexpr const auto& g = traced<decltype(probs)>::value;
  static_assert(!check_graph(g), "the traced graph is valid");
  std::printf("\ntraced graph: %zu nodes, %d leaves\n", g.nodes.size(), g.leaves);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const node& n = g.nodes[i];
    std::printf("  %%%-2zu = %-8s %-4s %-10s", i, std::string(name(n.o)).c_str(), std::string(name(n.dt)).c_str(),
                to_string(n.shape).c_str());
    for (int j = 0; j < n.nin(); ++j) std::printf(" %%%d", n.in[j]);
    if (!n.label().empty()) std::printf(" \"%s\"", std::string(n.label()).c_str());
    std::printf("\n");
  }

  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto fill = [&](auto t) {
    for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
    return t;
  };
  // Tensors are bound to the placeholders by type: leaving one out, binding one twice or
  // binding a placeholder that probs does not have is a compile error that names it.
  auto xv = fill(tensor<float, 2>({3, 8}));
  auto p = eval(probs, X{} = xv, W1{} = fill(tensor<float, 2>({8, 16})), B1{} = fill(tensor<float, 1>({16})),
                W2{} = fill(tensor<float, 2>({16, 4})));
  std::printf("\nsoftmax(MLP(x)) for 3 random rows (each row sums to 1):\n");
  for (index_t i = 0; i < 3; ++i) {
    float row = 0;
    for (index_t j = 0; j < 4; ++j) row += p(i, j);
    std::printf("  %.4f %.4f %.4f %.4f  (sum %.6f)\n", p(i, 0), p(i, 1), p(i, 2), p(i, 3), row);
  }
  return 0;
}
