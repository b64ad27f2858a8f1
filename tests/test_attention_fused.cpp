// Fused attention (the attention and attention_grad primitives, FlashAttention-2's tiling on the
// CPU): the plan holds no score matrix; values over many tiles (lengths that are not multiples
// of a tile, causal with tq < tk and tq > tk, grouped-query heads, masks, a row with every key
// masked, q read through a permuted view) against a plain loop in double on both backends;
// gradients (q, k, v and an additive mask) and forward-mode derivatives against the unfused
// math path, which a dyn query length selects; threads change no bit. Fresh random inputs.
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

namespace {

constexpr index_t B = 2, H = 4, HK = 2, TQ = 70, TK = 90, D = 24, DV = 40;

// (one set of placeholders for the fused path, and q with a dyn length for the math path)
using Q = input<"q", f64, shape<B, H, TQ, D>>;
using QD = input<"q", f64, shape<B, H, dyn, D>>;
using K = input<"k", f64, shape<B, HK, TK, D>>;
using V = input<"v", f64, shape<B, HK, TK, DV>>;
using A = input<"a", f64, shape<TQ, TK>>;
using R = input<"r", f64, shape<B, H, TQ, DV>>;

constexpr bool has_op(const auto& nodes, op o) {
  for (const node& n : nodes)
    if (n.o == o) return true;
  return false;
}

}  // namespace

TEST_CASE("fused attention: one kernel, no score matrix in memory, no matmul") {
  using QF = input<"q", f32, shape<2, 8, 256, 64>>;
  constexpr auto y = scaled_dot_product_attention<causal>(QF{}, QF{}, QF{});
  constexpr explanation e = explain(y);
  static_assert(e.matmul_kernels == 0 && e.reduction_kernels == 0);
  static_assert(e.kernels == 1);  // the default scale folded into it: no pass over q
  // reads q (three times: as q, k and v), writes the value with its logsumexp and the output
  static_assert(e.bytes_written.fixed <= 2 * 8 * 256 * (65 + 64) * 4);
  static_assert(e.scratch.fixed < 2 * 8 * 256 * 256 * 4);  // not even one score matrix
  static_assert(has_op(plan<std::remove_cvref_t<decltype(y)>>::schedule.g.nodes, op::attention));
  // forward and backward: attention_grad reads q, k, v, the forward's value and the cotangent
  // in place (no concatenation copies them); the kernels are attention, the cotangent 2 y,
  // attention_grad and dq + dk + dv (q is k and v too)
  constexpr auto step = outputs(y, grad(sum(y * y), wrt(QF{})));
  using S = std::remove_cvref_t<decltype(step)>;
  static_assert(explain(step).kernels == 4);
  static_assert(has_op(plan<S>::schedule.g.nodes, op::attention_grad) && !has_op(plan<S>::schedule.g.nodes, op::concat));
  // at T = 4096 too: the plan's scratch holds no [T, T] buffer (one would be 64 MiB a head)
  using QL = input<"q", f32, shape<1, 2, 4096, 64>>;
  static_assert(explain(scaled_dot_product_attention(QL{}, QL{}, QL{})).scratch.fixed < 4096 * 4096 * 4);
  static_assert(explain(scaled_dot_product_attention<causal>(QL{}, QL{}, QL{})).scratch.fixed < 4096 * 4096 * 4);
  // the math path: what a dyn length, or bf16, takes
  using QB = input<"q", bf16, shape<2, 8, 256, 64>>;
  static_assert(explain(scaled_dot_product_attention(QB{}, QB{}, QB{})).matmul_kernels == 2);
  static_assert(explain(scaled_dot_product_attention(QD{}, K{}, V{})).matmul_kernels == 2);
}

TEST_CASE("fused attention: values over many tiles, causal both ways, grouped heads, a permuted q") {
  // q arrives as [b, tq, h, d] (a projection's layout) and is permuted to [b, h, tq, d]
  using QT = input<"q", f32, shape<B, 150, H, D>>;
  using KF = input<"k", f32, shape<B, HK, 130, D>>;
  using VF = input<"v", f32, shape<B, HK, 130, DV>>;
  const auto qt = kt::random<float, 4>({B, 150, H, D}), k = kt::random<float, 4>({B, HK, 130, D});
  const auto v = kt::random<float, 4>({B, HK, 130, DV});
  std::vector<double> qv(static_cast<std::size_t>(B * H * 150 * D));  // q in [b, h, t, d] order
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < 150; ++t)
      for (index_t h = 0; h < H; ++h)
        for (index_t c = 0; c < D; ++c) qv[static_cast<std::size_t>(((b * H + h) * 150 + t) * D + c)] = qt(b, t, h, c);
  const std::vector<double> kv = kt::values(k.any()), vv = kt::values(v.any());
  const problem p{B, H, HK, 150, 130, D, DV};
  const double scale = 1 / std::sqrt(double(D));
  {
    const auto y = scaled_dot_product_attention(permute<0, 2, 1, 3>(QT{}), KF{}, VF{});
    const auto want = attention_by_loops(p, qv, kv, vv, scale, all_keys, nothing_added);
    check_values(eval(y, QT{} = qt, KF{} = k, VF{} = v).any(), want, 2e-5);
    check_values(eval(y, QT{} = qt, KF{} = k, VF{} = v, eager::backend).any(), want, 2e-5);
  }
  {  // causal with tq > tk: the queries from tk on see every key
    const auto y = scaled_dot_product_attention<causal>(permute<0, 2, 1, 3>(QT{}), KF{}, VF{});
    const auto want = attention_by_loops(
        p, qv, kv, vv, scale, [](index_t, index_t, index_t i, index_t j) { return j <= i; }, nothing_added);
    check_values(eval(y, QT{} = qt, KF{} = k, VF{} = v).any(), want, 2e-5);
  }
  {  // causal with tq < tk (top-left aligned), f64
    const any_tensor q = kt::random_f64(dims{B, H, TQ, D}), k64 = kt::random_f64(dims{B, HK, TK, D}),
                     v64 = kt::random_f64(dims{B, HK, TK, DV});
    const auto y = scaled_dot_product_attention<causal>(Q{}, K{}, V{});
    const auto want = attention_by_loops(
        problem{B, H, HK, TQ, TK, D, DV}, kt::values(q), kt::values(k64), kt::values(v64), scale,
        [](index_t, index_t, index_t i, index_t j) { return j <= i; }, nothing_added);
    check_values(eval(y, Q{} = q, K{} = k64, V{} = v64).any(), want, 1e-12);
    check_values(eval(y, Q{} = q, K{} = k64, V{} = v64, eager::backend).any(), want, 1e-12);
  }
}

TEST_CASE("fused attention: a bool mask with a row of no keys (NaN, as the math reference), an additive mask") {
  using M = input<"m", boolean, shape<B, 1, TQ, TK>>;
  const any_tensor q = kt::random_f64(dims{B, H, TQ, D}), k = kt::random_f64(dims{B, HK, TK, D}),
                   v = kt::random_f64(dims{B, HK, TK, DV}), a = kt::random_f64(dims{TQ, TK}, -4, 1);
  auto m = kt::random<bool, 4>({B, 1, TQ, TK});
  for (index_t j = 0; j < TK; ++j) m(1, 0, 5, j) = false;  // batch 1, query 5: nothing to attend to
  const std::vector<double> qv = kt::values(q), kv = kt::values(k), vv = kt::values(v), av = kt::values(a);
  const problem p{B, H, HK, TQ, TK, D, DV};
  const double scale = 0.2;
  {
    const auto y = scaled_dot_product_attention(Q{}, K{}, V{}, M{}, scale);
    const auto want = attention_by_loops(
        p, qv, kv, vv, scale, [&](index_t b, index_t, index_t i, index_t j) { return m(b, 0, i, j); }, nothing_added);
    for (const any_tensor& got : {eval(y, Q{} = q, K{} = k, V{} = v, M{} = m).any(),
                                  eval(y, Q{} = q, K{} = k, V{} = v, M{} = m, eager::backend).any()}) {
      const std::vector<double> g = kt::values(got);
      std::size_t nans = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        CAPTURE(i);
        if (std::isnan(want[i])) {
          ++nans;
          CHECK(std::isnan(g[i]));
        } else {
          CHECK(kt::close(g[i], want[i], 1e-12, 1e-12));
        }
      }
      CHECK(nans == static_cast<std::size_t>(H * DV));  // the masked row of each head
    }
  }
  {
    const auto y = scaled_dot_product_attention<causal>(Q{}, K{}, V{}, A{}, scale);
    const auto want = attention_by_loops(
        p, qv, kv, vv, scale, [](index_t, index_t, index_t i, index_t j) { return j <= i; },
        [&](index_t, index_t, index_t i, index_t j) { return av[static_cast<std::size_t>(i * TK + j)]; });
    check_values(eval(y, Q{} = q, K{} = k, V{} = v, A{} = a).any(), want, 1e-12);
  }
}

/// The scale the plan of E's attention node applies to its scores (0: no attention node).
template <class E>
constexpr double scores_scale() {
  for (const node& n : plan<E>::schedule.g.nodes)
    if (n.o == op::attention) return attention_scale(n);
  return 0;
}

/// Gradients (q, k, v and the additive mask A) and forward-mode derivatives of the fused
/// attention `fused` against `math`, the same attention on the unfused math path (q's length
/// dyn), and against the eager backend.
template <class F, class M>
void check_derivatives(const F& fused, const M& math) {
  const any_tensor q = kt::random_f64(dims{B, H, TQ, D}), k = kt::random_f64(dims{B, HK, TK, D}),
                   v = kt::random_f64(dims{B, HK, TK, DV}), a = kt::random_f64(dims{TQ, TK}, -3, 1),
                   r = kt::random_f64(dims{B, H, TQ, DV});
  const auto step_f = outputs(fused, grad(sum(fused * R{}), wrt(Q{}, K{}, V{}, A{})));
  const auto step_m = outputs(math, grad(sum(math * R{}), wrt(QD{}, K{}, V{}, A{})));
  const auto got = eval_all(step_f, Q{} = q, K{} = k, V{} = v, A{} = a, R{} = r);
  const auto want = eval_all(step_m, QD{} = q, K{} = k, V{} = v, A{} = a, R{} = r);
  const auto ref = eval_all(step_f, Q{} = q, K{} = k, V{} = v, A{} = a, R{} = r, eager::backend);
  REQUIRE(got.size() == 5);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(kt::difference(want[i], got[i]) < 1e-11);
    CHECK(kt::difference(ref[i], got[i]) < 1e-11);
  }
  // forward mode along random tangents of all four operands
  using UQ = input<"uq", f64, shape<B, H, TQ, D>>;
  using UQD = input<"uq", f64, shape<B, H, dyn, D>>;
  using UK = input<"uk", f64, shape<B, HK, TK, D>>;
  using UV = input<"uv", f64, shape<B, HK, TK, DV>>;
  using UA = input<"ua", f64, shape<TQ, TK>>;
  const any_tensor uq = kt::random_f64(dims{B, H, TQ, D}), uk = kt::random_f64(dims{B, HK, TK, D}),
                   uv = kt::random_f64(dims{B, HK, TK, DV}), ua = kt::random_f64(dims{TQ, TK});
  const auto jf = jvp(fused, tangent(Q{}, UQ{}), tangent(K{}, UK{}), tangent(V{}, UV{}), tangent(A{}, UA{}));
  const auto jm = jvp(math, tangent(QD{}, UQD{}), tangent(K{}, UK{}), tangent(V{}, UV{}), tangent(A{}, UA{}));
  const any_tensor tf = eval(jf, Q{} = q, K{} = k, V{} = v, A{} = a, UQ{} = uq, UK{} = uk, UV{} = uv, UA{} = ua).any();
  const any_tensor tm = eval(jm, QD{} = q, K{} = k, V{} = v, A{} = a, UQD{} = uq, UK{} = uk, UV{} = uv, UA{} = ua).any();
  CHECK(kt::difference(tm, tf) < 1e-11);
}

TEST_CASE("fused attention: gradients and forward-mode derivatives agree with the unfused math path") {
  SUBCASE("a scale given at run time: q times it, the kernels' factor 1") {
    const double scale = 0.3;
    const auto fused = scaled_dot_product_attention<causal>(Q{}, K{}, V{}, A{}, scale);
    static_assert(scores_scale<std::remove_cvref_t<decltype(fused)>>() == 1);
    check_derivatives(fused, scaled_dot_product_attention<causal>(QD{}, K{}, V{}, A{}, scale));
  }
  SUBCASE("the default scale 1 / sqrt(d), folded into the kernels (which apply it before the added mask)") {
    const auto fused = scaled_dot_product_attention<causal>(Q{}, K{}, V{}, A{});
    using F = std::remove_cvref_t<decltype(fused)>;
    static_assert(scores_scale<F>() > 0.204 && scores_scale<F>() < 0.205);  // 1 / sqrt(24)
    check_derivatives(fused, scaled_dot_product_attention<causal>(QD{}, K{}, V{}, A{}));
  }
}

TEST_CASE("fused attention: f32 forward and backward give the same bits on 1 and 3 threads") {
  using QF = input<"q", f32, shape<3, 4, 100, 32>>;
  using KF = input<"k", f32, shape<3, 2, 100, 32>>;
  const auto y = scaled_dot_product_attention<causal>(QF{}, KF{}, KF{});
  const auto step = outputs(y, grad(sum(y * y), wrt(QF{}, KF{})));
  const auto q = kt::random<float, 4>({3, 4, 100, 32}), k = kt::random<float, 4>({3, 2, 100, 32});
  const int old = cpu::set_num_threads(1);
  const auto one = eval_all(step, QF{} = q, KF{} = k);
  cpu::set_num_threads(3);
  const auto three = eval_all(step, QF{} = q, KF{} = k);
  cpu::set_num_threads(old);
  const auto ref = eval_all(step, QF{} = q, KF{} = k, eager::backend);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(kt::difference(one[i], three[i]) == 0);
    CHECK(kt::difference(ref[i], one[i]) < 2e-5);
  }
}

TEST_CASE("fused attention: hand-written attention is rewritten into it (scale, additive mask), and only that") {
  using KH = input<"k", f64, shape<B, H, TK, D>>;
  using VH = input<"v", f64, shape<B, H, TK, DV>>;
  const double scale = 0.25;
  // softmax(q k^T * s + a) v, as a PyTorch user writes it
  const auto hand = matmul(softmax(matmul(Q{}, transpose(KH{})) * scale + A{}), VH{});
  using Hand = std::remove_cvref_t<decltype(hand)>;
  static_assert(has_op(plan<Hand>::schedule.g.nodes, op::attention) && explain(hand).matmul_kernels == 0);
  // not attention: softmax over another axis; a bool mask applied with where (its -inf is a
  // run-time C++ number)
  constexpr auto other_axis = matmul(softmax<-2>(matmul(Q{}, transpose(KH{}))), VH{});
  static_assert(!has_op(plan<std::remove_cvref_t<decltype(other_axis)>>::schedule.g.nodes, op::attention));
  using M = input<"m", boolean, shape<TQ, TK>>;
  constexpr auto masked =
      matmul(softmax(where(M{}, matmul(Q{}, transpose(KH{})), -std::numeric_limits<double>::infinity())), VH{});
  static_assert(!has_op(plan<std::remove_cvref_t<decltype(masked)>>::schedule.g.nodes, op::attention));
  // the three spellings: the scale after the product or on q before it, the mask added or
  // applied with where(m, s, -kiln::inf) (masked_fill's; kiln::inf is a constant)
  const auto before = matmul(softmax(matmul(Q{} * scale, transpose(KH{})) + A{}), VH{});
  static_assert(explain(before).matmul_kernels == 0 && explain(before).reduction_kernels == 0);
  const auto with_where = matmul(softmax(where(M{}, matmul(Q{}, transpose(KH{})) * scale, -kiln::inf)), VH{});
  static_assert(explain(with_where).matmul_kernels == 0 && explain(with_where).reduction_kernels == 0);

  const any_tensor q = kt::random_f64(dims{B, H, TQ, D}), k = kt::random_f64(dims{B, H, TK, D}),
                   v = kt::random_f64(dims{B, H, TK, DV}), a = kt::random_f64(dims{TQ, TK}, -3, 1);
  const std::vector<double> av = kt::values(a);
  const auto added = [&](index_t, index_t, index_t i, index_t j) { return av[static_cast<std::size_t>(i * TK + j)]; };
  const problem p{B, H, H, TQ, TK, D, DV};
  check_values(eval(hand, Q{} = q, KH{} = k, VH{} = v, A{} = a).any(),
               attention_by_loops(p, kt::values(q), kt::values(k), kt::values(v), scale, all_keys, added), 1e-12);
  check_values(eval(before, Q{} = q, KH{} = k, VH{} = v, A{} = a).any(),
               attention_by_loops(p, kt::values(q), kt::values(k), kt::values(v), scale, all_keys, added), 1e-12);
  auto mt = kt::random<bool, 2>({TQ, TK});
  for (index_t j = 0; j < TK; ++j) mt(3, j) = false;  // query 3 attends to nothing: NaN, as the math path
  const any_tensor by_where = eval(with_where, Q{} = q, KH{} = k, VH{} = v, M{} = mt).any();
  const std::vector<double> want = attention_by_loops(
      p, kt::values(q), kt::values(k), kt::values(v), scale,
      [&](index_t, index_t, index_t i, index_t j) { return mt(i, j); }, nothing_added);
  const std::vector<double> g = kt::values(by_where);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    if (std::isnan(want[i])) CHECK(std::isnan(g[i]));
    else CHECK(kt::close(g[i], want[i], 1e-12, 1e-12));
  }
  // one k/v head broadcast over the q heads by the matmuls: grouped-query attention, one group
  using K1 = input<"k", f64, shape<B, 1, TK, D>>;
  using V1 = input<"v", f64, shape<B, 1, TK, DV>>;
  const any_tensor k1 = kt::random_f64(dims{B, 1, TK, D}), v1 = kt::random_f64(dims{B, 1, TK, DV});
  const auto hand1 = matmul(softmax(matmul(Q{}, transpose(K1{})) * scale + A{}), V1{});
  static_assert(explain(hand1).matmul_kernels == 0);
  check_values(eval(hand1, Q{} = q, K1{} = k1, V1{} = v1, A{} = a).any(),
               attention_by_loops(problem{B, H, 1, TQ, TK, D, DV}, kt::values(q), kt::values(k1), kt::values(v1),
                                  scale, all_keys, added),
               1e-12);
  // its gradients are the fused op's
  const auto fused = scaled_dot_product_attention(Q{}, KH{}, VH{}, A{}, scale);
  const auto got = eval_all(outputs(hand, grad(sum(hand * hand), wrt(Q{}, KH{}, VH{}, A{}))), Q{} = q, KH{} = k,
                            VH{} = v, A{} = a);
  const auto ref = eval_all(outputs(fused, grad(sum(fused * fused), wrt(Q{}, KH{}, VH{}, A{}))), Q{} = q, KH{} = k,
                            VH{} = v, A{} = a);
  REQUIRE(got.size() == 5);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(kt::difference(ref[i], got[i]) < 1e-12);
  }
}

// The primitive itself, beyond what autodiff gives it (the value's cotangent alone, the
// logsumexp's zero not passed): a cotangent of value ++ logsumexp, as a graph reading the
// logsumexp would give, checked by central differences of the eager forward in double, and the
// CPU kernel (f64 and f32, causal, grouped heads, an additive mask) against eager with either
// form of the cotangent.
TEST_CASE("attention_grad: a logsumexp cotangent by finite differences; the kernel against eager, either cotangent") {
  const dims qs{B, H, TQ, D}, ks{B, HK, TK, D}, vs{B, HK, TK, DV}, ms{TQ, TK};
  for (const bool causal : {false, true}) {
    node fwd;
    fwd.o = op::attention;
    fwd.dt = dtype::f64;
    fwd.axis = causal ? 1 : 0;
    fwd.value = 0.3;
    node bwd = fwd;
    bwd.o = op::attention_grad;
    const any_tensor q = kt::random_tensor(f64, qs), k = kt::random_tensor(f64, ks), v = kt::random_tensor(f64, vs),
                     mask = kt::random_tensor(f64, ms, -1, 1);
    // (eager's routines, through its one entry for a node)
    const auto forward = [&](const any_tensor& qq, const any_tensor& kk, const any_tensor& vv) {
      const any_tensor in[]{qq, kk, vv, mask};
      return eager::detail::run_node(fwd, in);
    };
    const any_tensor y = forward(q, k, v);
    const auto backward = [&](const any_tensor& gg) {
      const any_tensor in[]{q, k, v, mask, y, gg};
      return eager::detail::run_node(bwd, in);
    };
    dims gs = y.shape(), vgs = y.shape();
    vgs.e[3] = DV;
    const any_tensor g = kt::random_tensor(f64, gs);  // every column, the logsumexp's too
    any_tensor gv(f64, vgs), gz(f64, gs);             // g's value columns; those with a zero logsumexp column
    for (index_t row = 0; row < B * H * TQ; ++row)
      for (index_t c = 0; c <= DV; ++c) {
        const double x = g.data<double>()[row * (DV + 1) + c];
        if (c < DV) gv.data<double>()[row * DV + c] = x;
        gz.data<double>()[row * (DV + 1) + c] = c < DV ? x : 0.0;
      }
    const any_tensor grad = backward(g);
    // d/dx sum(g * attention(q, k, v)) at a few entries of q, k and v, in double
    const auto loss = [&](const any_tensor& qq, const any_tensor& kk, const any_tensor& vv) {
      const any_tensor yy = forward(qq, kk, vv);
      double s = 0;
      for (index_t i = 0; i < yy.numel(); ++i) s += yy.data<double>()[i] * g.data<double>()[i];
      return s;
    };
    const index_t rows = H * TQ + HK * TK;
    std::uniform_int_distribution<index_t> pick(0, 1 << 30);
    for (int which = 0; which < 3; ++which)
      for (int trial = 0; trial < 6; ++trial) {
        const any_tensor& x = which == 0 ? q : which == 1 ? k : v;
        const index_t idx = pick(kt::rng()) % x.numel();
        const index_t w = x.shape().e[3], row = idx / w, col = idx % w;  // row over [b, heads, t]
        const index_t b = row / (x.shape().e[1] * x.shape().e[2]), in_b = row % (x.shape().e[1] * x.shape().e[2]);
        // where the gradient's row lies: dq's rows, then dk ++ dv's, each batch element's in turn
        const index_t grow = b * rows + (which == 0 ? in_b : H * TQ + in_b), gcol = which == 2 ? D + col : col;
        const double want_g = grad.data<double>()[grow * (D + DV) + gcol];
        const double eps = 1e-5, x0 = x.data<double>()[idx];
        any_tensor xp(f64, x.shape());  // a copy: x's own storage stays as it is
        xp.copy_from(x);
        xp.data<double>()[idx] = x0 + eps;
        const double up = which == 0 ? loss(xp, k, v) : which == 1 ? loss(q, xp, v) : loss(q, k, xp);
        xp.data<double>()[idx] = x0 - eps;
        const double down = which == 0 ? loss(xp, k, v) : which == 1 ? loss(q, xp, v) : loss(q, k, xp);
        // (the loss sums 23k terms: its rounding, over 2 eps, is about 1e-7)
        CHECK(kt::close((up - down) / (2 * eps), want_g, 1e-5, 1e-6));
      }
    // the kernel, f64 and f32, against eager: the full cotangent, and the value's alone against
    // the full one with a zero logsumexp column
    const auto on_cpu = [&](dtype dt, const any_tensor& gg) {
      const auto as = [&](const any_tensor& t) {
        any_tensor c(dt, t.shape());
        c.copy_from(t);
        return c;
      };
      const any_tensor qc = as(q), kc = as(k), vc = as(v), mc = as(mask), yc = as(y), gc = as(gg);
      any_tensor out(dt, grad.shape());
      const auto view_of = [](const any_tensor& t) { return cpu::detail::view{t.bytes(), t.dt(), t.shape(), t.strides()}; };
      cpu::detail::run_attention_grad(view_of(qc), view_of(kc), view_of(vc), view_of(mc), view_of(yc), view_of(gc),
                                      view_of(out), causal, 0.3);
      return out;
    };
    CHECK(kt::difference(grad, on_cpu(f64, g)) < 1e-12);
    const any_tensor ref_z = backward(gz);
    CHECK(kt::difference(ref_z, backward(gv)) < 1e-14);
    CHECK(kt::difference(ref_z, on_cpu(f64, gv)) < 1e-12);
    any_tensor ref32(f32, grad.shape());
    ref32.copy_from(grad);
    CHECK(kt::difference(ref32, on_cpu(f32, g)) < 2e-4);
  }
}
