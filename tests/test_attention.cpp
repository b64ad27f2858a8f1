// scaled_dot_product_attention: values against a plain loop in double (masks, causal,
// grouped-query attention, odd and unit lengths, a head size that is not a power of two) on
// both backends, gradients and forward-mode derivatives against central differences in f64, on
// fresh random inputs.
#include "attention_reference.hpp"
#include "gradcheck.hpp"

#include <cmath>
#include <limits>
#include <vector>

using namespace kiln;

using kt::all_keys;
using kt::attention_by_loops;
using kt::check_values;
using kt::nothing_added;
using kt::problem;

TEST_CASE("attention: grouped-query heads, default scale, odd lengths, a head size of 5") {
  constexpr problem p{2, 4, 2, 7, 9, 5, 3};
  using Q = input<"q", f64, shape<2, 4, 7, 5>>;
  using K = input<"k", f64, shape<2, 2, 9, 5>>;
  using V = input<"v", f64, shape<2, 2, 9, 3>>;
  const auto y = scaled_dot_product_attention(Q{}, K{}, V{});
  static_assert(decltype(y)::shape == dims{2, 4, 7, 3});
  const any_tensor q = kt::random_f64(dims{2, 4, 7, 5}), k = kt::random_f64(dims{2, 2, 9, 5}),
                   v = kt::random_f64(dims{2, 2, 9, 3});
  const auto want = attention_by_loops(p, kt::values(q), kt::values(k), kt::values(v), 1 / std::sqrt(5.0), all_keys,
                                       nothing_added);
  check_values(eval(y, Q{} = q, K{} = k, V{} = v).any(), want, 1e-12);
  check_values(eval(y, Q{} = q, K{} = k, V{} = v, eager::backend).any(), want, 1e-12);
}

TEST_CASE("attention: causal, f32, one head per k/v head, a given scale, a dyn batch") {
  constexpr index_t t = 13;
  using Q = input<"q", f32, shape<dyn, 2, t, 8>>;
  using K = input<"k", f32, shape<dyn, 2, t, 8>>;
  using V = input<"v", f32, shape<dyn, 2, t, 8>>;
  const float scale = 0.3f;
  const auto y = scaled_dot_product_attention<causal>(Q{}, K{}, V{}, scale);
  for (const index_t b : {1, 3}) {
    CAPTURE(b);
    const auto q = kt::random<float, 4>({b, 2, t, 8}), k = kt::random<float, 4>({b, 2, t, 8}),
               v = kt::random<float, 4>({b, 2, t, 8});
    const problem p{b, 2, 2, t, t, 8, 8};
    const auto want = attention_by_loops(
        p, kt::values(q.any()), kt::values(k.any()), kt::values(v.any()), scale,
        [](index_t, index_t, index_t i, index_t j) { return j <= i; }, nothing_added);
    check_values(eval(y, Q{} = q, K{} = k, V{} = v).any(), want, 2e-6);
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, eager::backend).any(), want, 2e-6);
  }
}

TEST_CASE("attention: a bool mask broadcast over batch and heads, an additive mask, causal with tq < tk") {
  constexpr problem p{2, 3, 3, 6, 10, 4, 4};
  using Q = input<"q", f64, shape<2, 3, 6, 4>>;
  using K = input<"k", f64, shape<2, 3, 10, 4>>;
  using V = input<"v", f64, shape<2, 3, 10, 4>>;
  using M = input<"m", boolean, shape<6, 10>>;
  using A = input<"a", f64, shape<2, 1, 6, 10>>;
  const any_tensor q = kt::random_f64(dims{2, 3, 6, 4}), k = kt::random_f64(dims{2, 3, 10, 4}),
                   v = kt::random_f64(dims{2, 3, 10, 4}), a = kt::random_f64(dims{2, 1, 6, 10}, -3, 1);
  auto m = kt::random<bool, 2>({6, 10});
  for (index_t i = 0; i < 6; ++i) m(i, 0) = true;  // every query attends to at least key 0
  const std::vector<double> qv = kt::values(q), kv = kt::values(k), vv = kt::values(v), av = kt::values(a);
  const double scale = 0.5;
  {
    const auto y = scaled_dot_product_attention(Q{}, K{}, V{}, M{});
    const auto want = attention_by_loops(
        p, qv, kv, vv, scale, [&](index_t, index_t, index_t i, index_t j) { return m(i, j); }, nothing_added);
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, M{} = m).any(), want, 1e-12);
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, M{} = m, eager::backend).any(), want, 1e-12);
  }
  {
    const auto y = scaled_dot_product_attention(Q{}, K{}, V{}, A{}, 0.25);
    const auto want = attention_by_loops(p, qv, kv, vv, 0.25, all_keys, [&](index_t b, index_t, index_t i, index_t j) {
      return av[static_cast<std::size_t>((b * 6 + i) * 10 + j)];
    });
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, A{} = a).any(), want, 1e-12);
  }
  {  // causal with fewer queries than keys: query i sees keys 0..i (top-left aligned, as PyTorch)
    const auto y = scaled_dot_product_attention<causal>(Q{}, K{}, V{}, M{});
    const auto want = attention_by_loops(
        p, qv, kv, vv, scale, [&](index_t, index_t, index_t i, index_t j) { return m(i, j) && j <= i; },
        nothing_added);
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, M{} = m).any(), want, 1e-12);
  }
}

TEST_CASE("attention: one query and one key, rank 2 (no heads), bf16 operands") {
  using Q1 = input<"q", f64, shape<1, 3, 1, 6>>;
  using V1 = input<"v", f64, shape<1, 3, 1, 2>>;
  const any_tensor q = kt::random_f64(dims{1, 3, 1, 6}), k = kt::random_f64(dims{1, 3, 1, 6});
  const any_tensor v = kt::random_f64(dims{1, 3, 1, 2});
  // one key: its weight is 1, the output is v
  const auto y1 = scaled_dot_product_attention<causal>(Q1{}, input<"k", f64, shape<1, 3, 1, 6>>{}, V1{});
  check_values(eval(y1, Q1{} = q, input<"k", f64, shape<1, 3, 1, 6>>{} = k, V1{} = v).any(), kt::values(v), 1e-15);

  using Q2 = input<"q", f64, shape<5, 3>>;
  using K2 = input<"k", f64, shape<4, 3>>;
  using V2 = input<"v", f64, shape<4, 2>>;
  const any_tensor q2 = kt::random_f64(dims{5, 3}), k2 = kt::random_f64(dims{4, 3}), v2 = kt::random_f64(dims{4, 2});
  const auto want = attention_by_loops(problem{1, 1, 1, 5, 4, 3, 2}, kt::values(q2), kt::values(k2), kt::values(v2),
                                       1 / std::sqrt(3.0), all_keys, nothing_added);
  check_values(eval(scaled_dot_product_attention(Q2{}, K2{}, V2{}), Q2{} = q2, K2{} = k2, V2{} = v2).any(), want, 1e-12);

  // bf16: computed from the bf16-rounded operands, within bf16's resolution
  using QB = input<"q", bf16, shape<2, 4, 8>>;
  const any_tensor qb = kt::random_tensor(bf16, dims{2, 4, 8});
  const auto yb = eval(scaled_dot_product_attention(QB{}, QB{}, QB{}), QB{} = qb);
  const std::vector<double> qbv = kt::values(qb);
  check_values(yb.any(),
               attention_by_loops(problem{1, 2, 2, 4, 4, 8, 8}, qbv, qbv, qbv, 1 / std::sqrt(8.0), all_keys, nothing_added),
               2e-2);
}

TEST_CASE("attention: gradients of q, k and v against central differences (GQA, causal, additive mask)") {
  using Q = input<"q", f64, shape<1, 4, 5, 3>>;
  using K = input<"k", f64, shape<1, 2, 5, 3>>;
  using V = input<"v", f64, shape<1, 2, 5, 2>>;
  using A = input<"a", f64, shape<5, 5>>;
  const std::vector<feed> f = {{"q", kt::random_f64(dims{1, 4, 5, 3})},
                               {"k", kt::random_f64(dims{1, 2, 5, 3})},
                               {"v", kt::random_f64(dims{1, 2, 5, 2})},
                               {"a", kt::random_f64(dims{5, 5})}};
  kt::gradcheck<Q, K, V>(scaled_dot_product_attention<causal>(Q{}, K{}, V{}), f);
  kt::gradcheck<Q, K, V, A>(scaled_dot_product_attention(Q{}, K{}, V{}, A{}, 0.7), f);
}

TEST_CASE("attention: the CPU backend's gradients agree with eager's") {
  using Q = input<"q", f32, shape<dyn, 2, 33, 16>>;
  using KV = input<"kv", f32, shape<dyn, 1, 33, 16>>;
  const auto y = scaled_dot_product_attention<causal>(Q{}, KV{}, KV{});
  const auto step = outputs(y, grad(sum(y * y), wrt(Q{}, KV{})));
  const auto q = kt::random<float, 4>({3, 2, 33, 16});
  const auto kv = kt::random<float, 4>({3, 1, 33, 16});
  const auto cpu = eval_all(step, Q{} = q, KV{} = kv);
  const auto ref = eval_all(step, Q{} = q, KV{} = kv, eager::backend);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(kt::difference(ref[i], cpu[i]) < 1e-5);
  }
}
