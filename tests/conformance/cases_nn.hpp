// Conformance cases: kiln's own reductions, products, shape ops and neural-network ops (the
// README's rows; check_ops.py has their PyTorch counterparts, by case name), as a template over
// the float dtype: cases_nn_f32.cpp and cases_nn_f64.cpp instantiate it.
#pragma once

#include "record.hpp"

namespace kc {

template <dtype D>
void nn_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<4, 16>>;
  using B = input<"b", D, shape<4, 16>>;
  using G = input<"g1", D, shape<16>>;
  using Bt = input<"b1", D, shape<16>>;
  using W = input<"w", D, shape<8, 16>>;
  using Wb = input<"wb", D, shape<8>>;
  using L = input<"l", D, shape<8, 5>>;
  using Y = input<"y", kiln::i64, shape<8>>;
  using Cw = input<"cw", D, shape<5>>;
  using P = input<"p", D, shape<2, 3, 4>>;
  using Q = input<"q", D, shape<4, 5>>;
  using V = input<"v", D, shape<4>>;
  using U = input<"u", D, shape<3>>;
  using Xc = input<"x", D, shape<2, 3, 6, 6>>;
  using Wc = input<"k", D, shape<4, 3, 3, 3>>;
  using Bc = input<"c", D, shape<4>>;
  using T = input<"t", D, shape<10, 4>>;
  using I = input<"i", kiln::i64, shape<6>>;
  using Qa = input<"qa", D, shape<1, 2, 5, 8>>;
  using Ka = input<"ka", D, shape<1, 2, 7, 8>>;
  using Va = input<"va", D, shape<1, 2, 7, 8>>;
  using Kc = input<"ka", D, shape<1, 2, 5, 8>>;
  using Vc = input<"va", D, shape<1, 2, 5, 8>>;
  const any_tensor a = uniform(s, D, dims{4, 16}, -3, 3), b = uniform(s, D, dims{4, 16}, -3, 3);
  const any_tensor g1 = uniform(s, D, dims{16}, 0.5, 1.5), b1 = uniform(s, D, dims{16}, -1, 1);
  const any_tensor w = uniform(s, D, dims{8, 16}, -1, 1), wb = uniform(s, D, dims{8}, -1, 1);
  const any_tensor l = uniform(s, D, dims{8, 5}, -3, 3), y = uniform(s, kiln::i64, dims{8}, 0, 5, {1, 2, 2, 4, 1, 0});
  const any_tensor cw = uniform(s, D, dims{5}, 0.2, 2);
  const any_tensor p = uniform(s, D, dims{2, 3, 4}, -2, 2), q = uniform(s, D, dims{4, 5}, -2, 2);
  const any_tensor v = uniform(s, D, dims{4}, -2, 2), u = uniform(s, D, dims{3}, -2, 2);
  const any_tensor xc = uniform(s, D, dims{2, 3, 6, 6}, -2, 2), wc = uniform(s, D, dims{4, 3, 3, 3}, -1, 1);
  const any_tensor bc = uniform(s, D, dims{4}, -1, 1), t = uniform(s, D, dims{10, 4}, -2, 2);
  const any_tensor i = uniform(s, kiln::i64, dims{6}, 0, 10, {9, 0, 4, 4});
  const any_tensor qa = uniform(s, D, dims{1, 2, 5, 8}, -1, 1), ka = uniform(s, D, dims{1, 2, 7, 8}, -1, 1);
  const any_tensor va = uniform(s, D, dims{1, 2, 7, 8}, -1, 1);
  const any_tensor kc5 = uniform(s, D, dims{1, 2, 5, 8}, -1, 1), vc5 = uniform(s, D, dims{1, 2, 5, 8}, -1, 1);
  const std::vector<std::pair<std::string, any_tensor>> x{{"a", a}};

  record<A>(s, std::string("sum_1") + sfx, sum<1>(A{}), x);
  record<A>(s, std::string("mean_0") + sfx, mean<0>(A{}), x);
  record<A>(s, std::string("var_1") + sfx, var<1>(A{}), x);
  record<A>(s, std::string("amax_1") + sfx, amax<1>(A{}), x);
  record<A>(s, std::string("amin_0") + sfx, amin<0>(A{}), x);
  record<A>(s, std::string("softmax") + sfx, softmax<1>(A{}), x);
  record<A>(s, std::string("log_softmax") + sfx, log_softmax<0>(A{}), x);
  record<A, G, Bt>(s, std::string("layer_norm") + sfx, layer_norm(A{}, G{}, Bt{}), {{"a", a}, {"g1", g1}, {"b1", b1}});
  record<A, W, Wb>(s, std::string("linear") + sfx, linear(A{}, W{}, Wb{}), {{"a", a}, {"w", w}, {"wb", wb}});
  record<A, B>(s, std::string("mse_loss") + sfx, mse_loss(A{}, B{}), {{"a", a}, {"b", b}});
  record<L>(s, std::string("cross_entropy") + sfx, cross_entropy(L{}, Y{}), {{"l", l}, {"y", y}});
  // PyTorch's options: ignored rows, label smoothing, a weight per class, the reductions
  record<L>(s, std::string("cross_entropy_smoothing") + sfx, cross_entropy(L{}, Y{}, {.ignore_index = 2, .label_smoothing = 0.15}),
            {{"l", l}, {"y", y}});
  record<L>(s, std::string("cross_entropy_weight_sum") + sfx, cross_entropy<reduction::sum>(L{}, Y{}, Cw{}),
                {{"l", l}, {"y", y}, {"cw", cw}});
  record<L>(s, std::string("cross_entropy_none") + sfx,
            cross_entropy<reduction::none>(L{}, Y{}, Cw{}, {.ignore_index = 1, .label_smoothing = 0.1}),
            {{"l", l}, {"y", y}, {"cw", cw}});
  record<P, Q>(s, std::string("matmul") + sfx, matmul(P{}, Q{}), {{"p", p}, {"q", q}});
  // a vector operand: a row on the left, a column on the right, its axis dropped
  record<V, Q>(s, std::string("matmul_vec_mat") + sfx, matmul(V{}, Q{}), {{"v", v}, {"q", q}});
  record<P, V>(s, std::string("matmul_mat_vec") + sfx, matmul(P{}, V{}), {{"p", p}, {"v", v}});
  record<U, P>(s, std::string("matmul_vec_batch") + sfx, matmul(U{}, P{}), {{"u", u}, {"p", p}});
  record<G, Bt>(s, std::string("matmul_dot") + sfx, matmul(G{}, Bt{}), {{"g1", g1}, {"b1", b1}});
  record<Xc, Wc, Bc>(s, std::string("conv2d") + sfx, conv2d<1, 1>(Xc{}, Wc{}, Bc{}), {{"x", xc}, {"k", wc}, {"c", bc}});
  record<Xc, Wc>(s, std::string("conv2d_stride") + sfx, conv2d<2, 0>(Xc{}, Wc{}), {{"x", xc}, {"k", wc}});
  record<Xc>(s, std::string("max_pool2d") + sfx, max_pool2d<2>(Xc{}), {{"x", xc}});
  record<Xc>(s, std::string("avg_pool2d") + sfx, avg_pool2d<3, 2, 1>(Xc{}), {{"x", xc}});
  record<T>(s, std::string("embedding") + sfx, embedding(I{}, T{}), {{"t", t}, {"i", i}});
  record<Qa, Ka, Va>(s, std::string("sdpa") + sfx, scaled_dot_product_attention(Qa{}, Ka{}, Va{}),
                     {{"qa", qa}, {"ka", ka}, {"va", va}});
  record<Qa, Kc, Vc>(s, std::string("sdpa_causal") + sfx, scaled_dot_product_attention<causal>(Qa{}, Kc{}, Vc{}),
                     {{"qa", qa}, {"ka", kc5}, {"va", vc5}});
  record<A>(s, std::string("transpose") + sfx, transpose(A{}) * 1.5, x);
  record<P>(s, std::string("permute") + sfx, permute<2, 0, 1>(P{}), {{"p", p}});
  record<A>(s, std::string("reshape") + sfx, reshape<8, 8>(A{}), x);
  record<A>(s, std::string("slice") + sfx, slice<1, 2, 14, 3>(A{}), x);
  record<A, B>(s, std::string("concat") + sfx, concat<0>(A{}, B{}), {{"a", a}, {"b", b}});
  record<G>(s, std::string("broadcast_to") + sfx, broadcast_to<4, 16>(G{}), {{"g1", g1}});
  record<>(s, std::string("cast") + sfx, cast<kiln::i64>(A{}), x);
}

}  // namespace kc
