// CPU backend, matmul kernels: kiln::cpu::gemm with the kernel's epilogue (bias, activation,
// residual, cast) applied to each finished row segment, transposed operands read through their
// strides, batched products with broadcast batch axes, every dtype, odd and empty sizes.
#include <set>

#include "cpu_support.hpp"

using namespace kiln;

TEST_CASE("linear + bias + gelu is one kernel that writes its output once") {
  using X = input<"x", f32, shape<dyn, dyn>>;
  using Wt = param<"w", f32, shape<dyn, dyn>>;
  using B = param<"b", f32, shape<dyn>>;
  using E = decltype(gelu(linear(X{}, Wt{}, B{})));
  constexpr explanation e = explain_type<E>();
  static_assert(e.kernels == 1 && e.matmul_kernels == 1, "the bias and gelu are the matmul's epilogue");
  static_assert(e.buffers == 0, "nothing in between is materialised");
  for (const std::array<index_t, 3>& mkn : {std::array<index_t, 3>{1, 1, 1}, {7, 17, 5}, {33, 64, 129}, {130, 40, 17}}) {
    const index_t m = mkn[0], k = mkn[1], n = mkn[2];  // not a structured binding: INFO captures them
    INFO(m << " x " << k << " x " << n);
    cpu::stats() = {};
    CHECK(kt::cpu_vs_eager(E{}, {{"x", kt::rand<float, 2>({m, k})}, {"w", kt::rand<float, 2>({n, k}, -0.3, 0.3)},
                                 {"b", kt::rand<float, 1>({n})}}) <= 1e-4);
    CHECK(cpu::stats().fused == 3);
  }
}

TEST_CASE("transposed and strided operands, residuals, outputs of the product itself") {
  using A = input<"a", f32, shape<dyn, 23>>;
  using Bm = input<"b", f32, shape<23, dyn>>;
  auto a = kt::rand<float, 2>({19, 23});
  auto b = kt::rand<float, 2>({23, 19});
  const std::initializer_list<feed> f = {{"a", a}, {"b", b}};
  CHECK(kt::cpu_vs_eager(matmul(transpose(A{}), transpose(Bm{})), f) <= 1e-4);
  CHECK(kt::cpu_vs_eager(matmul(A{}, Bm{}) + transpose(matmul(transpose(Bm{}), transpose(A{}))), f) <= 1e-4);
  CHECK(kt::cpu_vs_eager(matmul(slice<1, 1, 23, 2>(A{}), slice<0, 0, 11>(Bm{})), f) <= 1e-4);
  // the product is an output and feeds an epilogue; a residual add; a cast epilogue (the
  // product then needs memory of its own)
  CHECK(kt::cpu_vs_eager(outputs(matmul(A{}, Bm{}), tanh(matmul(A{}, Bm{})) + 1.0f), f) <= 1e-4);
  using Sq = input<"s", f32, shape<dyn, 19>>;
  auto sq = kt::rand<float, 2>({19, 19});
  CHECK(kt::cpu_vs_eager(relu(matmul(Sq{}, Sq{})) + Sq{}, {{"s", sq}}) <= 1e-4);
  CHECK(kt::cpu_vs_eager(cast<bf16>(matmul(A{}, Bm{}) * 0.5f), f) <= 1e-2);
  // bound tensors that are transposed views
  CHECK(kt::cpu_vs_eager(matmul(a, a.transpose()) - 1.0f, {}) <= 1e-4);
}

TEST_CASE("batched products with broadcast batch axes") {
  auto check = [](auto a, auto b) {
    INFO(to_string(a.any().shape()) << " x " << to_string(b.any().shape()));
    CHECK(kt::cpu_vs_eager(exp(matmul(a, b) * 0.1f), {}) <= 1e-4);
  };
  check(kt::rand<float, 4>({2, 3, 5, 7}), kt::rand<float, 3>({3, 7, 4}));
  check(kt::rand<float, 3>({1, 5, 7}), kt::rand<float, 3>({4, 7, 6}));
  check(kt::rand<float, 3>({4, 5, 7}), kt::rand<float, 2>({7, 6}));
  check(kt::rand<float, 2>({5, 7}), kt::rand<float, 4>({2, 2, 7, 3}));
  check(kt::rand<float, 4>({2, 1, 3, 7}), kt::rand<float, 4>({1, 3, 7, 2}));
}

TEST_CASE_TEMPLATE("every matmul dtype", T, double, bfloat16, std::int32_t, std::int64_t) {
  constexpr dtype D = dtype_of<T>;
  using A = input<"a", D, shape<dyn, 13>>;
  using B = input<"b", D, shape<13, dyn>>;
  using C = input<"c", D, shape<dyn>>;
  auto a = kt::rand<T, 2>({9, 13}, -4, 4);
  auto b = kt::rand<T, 2>({13, 11}, -4, 4);
  auto c = kt::rand<T, 1>({11}, -4, 4);
  const double tol = std::is_same_v<T, double> ? 1e-13 : std::is_same_v<T, bfloat16> ? 1e-2 : 0;
  CHECK(kt::cpu_vs_eager(matmul(A{}, B{}) + C{}, {{"a", a}, {"b", b}, {"c", c}}) <= tol);
  CHECK(kt::cpu_vs_eager(max(matmul(A{}, B{}), C{}), {{"a", a}, {"b", b}, {"c", c}}) <= tol);
}

TEST_CASE("empty products: k = 0 gives zeros (and the epilogue of zeros), m = 0 nothing") {
  using A = input<"a", f32, shape<dyn, dyn>>;
  using B = input<"b", f32, shape<dyn, dyn>>;
  CHECK(kt::cpu_vs_eager(matmul(A{}, B{}) + 1.0f, {{"a", tensor<float, 2>({4, 0})}, {"b", tensor<float, 2>({0, 3})}}) == 0);
  CHECK(kt::cpu_vs_eager(matmul(A{}, B{}) + 1.0f, {{"a", tensor<float, 2>({0, 5})}, {"b", kt::rand<float, 2>({5, 3})}}) == 0);
}

TEST_CASE("an MLP forward: three matmul kernels with their epilogues, buffers reused") {
  auto x = input<"x", f32, shape<dyn, 784>>{};
  auto h1 = relu(linear(x, param<"w1", f32, shape<256, 784>>{}, param<"b1", f32, shape<256>>{}));
  auto h2 = gelu(linear(h1, param<"w2", f32, shape<128, 256>>{}, param<"b2", f32, shape<128>>{}));
  auto y = softmax(linear(h2, param<"w3", f32, shape<10, 128>>{}, param<"b3", f32, shape<10>>{}));
  constexpr explanation e = explain_type<decltype(y)>();
  static_assert(e.kernels == 4 && e.matmul_kernels == 3 && e.reduction_kernels == 1);
  for (index_t batch : {1, 16, 67}) {
    INFO("batch " << batch);
    cpu::stats() = {};
    CHECK(kt::cpu_vs_eager(y, {{"x", kt::rand<float, 2>({batch, 784})},
                               {"w1", kt::rand<float, 2>({256, 784}, -0.05, 0.05)},
                               {"b1", kt::rand<float, 1>({256})},
                               {"w2", kt::rand<float, 2>({128, 256}, -0.1, 0.1)},
                               {"b2", kt::rand<float, 1>({128})},
                               {"w3", kt::rand<float, 2>({10, 128})},
                               {"b3", kt::rand<float, 1>({10})}}) <= 1e-4);
    CHECK(cpu::stats().fused == 12);
  }
}

TEST_CASE("results and scratch buffers may come from the storage cache: stale NaNs there change nothing") {
  // relu(x W^T + b) is a buffer between the matmul kernel and the softmax kernel; it and the
  // result are 64 x 1024 floats (256 KiB: cached sizes). k = 1000 spans several k blocks,
  // whose partial sums the GEMM adds into its destination after the first block stores.
  using X = input<"x", f32, shape<dyn, 1000>>;
  using Wt = param<"w", f32, shape<1024, 1000>>;
  using B = param<"b", f32, shape<1024>>;
  using E = decltype(softmax(relu(linear(X{}, Wt{}, B{}))));
  constexpr const auto& s = plan<E>::schedule;
  const std::vector<any_tensor> leaves = kt::leaves_of(E{}, {{"x", kt::rand<float, 2>({64, 1000})},
                                                           {"w", kt::rand<float, 2>({1024, 1000}, -0.05, 0.05)},
                                                           {"b", kt::rand<float, 1>({1024})}});
  const std::vector<any_tensor> want = eager::run(eager_graph<E>(), leaves);
  kt::storage_cache_scope scope(std::size_t{64} << 20);  // empty (the eager run's blocks gone)
  {
    std::vector<tensor<float, 2>> stale;  // four blocks of the result's size, full of NaNs
    for (int i = 0; i < 4; ++i) {
      stale.emplace_back(std::array<index_t, 2>{64, 1024});
      std::fill(stale.back().data(), stale.back().data() + stale.back().numel(), std::nanf(""));
    }
  }
  REQUIRE(storage_cache_statistics().blocks == 4);
  const std::uint64_t h0 = storage_cache_statistics().hits;
  std::vector<any_tensor> got = cpu::run_schedule<s>(leaves);
  CHECK(storage_cache_statistics().hits >= h0 + 2);  // the buffer and the result
  CHECK(kt::difference(want[0], got[0]) <= 1e-4);
  const any_tensor first = got[0].clone();
  got.clear();  // its block goes back, and serves the next call's result (the schedule keeps
                // its scratch buffer between calls: cpu::detail::scratch_cache)
  const std::uint64_t h1 = storage_cache_statistics().hits;
  got = cpu::run_schedule<s>(leaves);
  CHECK(storage_cache_statistics().hits == h1 + 1);
  CHECK(kt::same_bits(first, got[0]));
}

namespace {

/// Whether kernel K of S, decoded from its code words (what kernel_code reads), is its analysis
/// (but for the graph nodes, which the words leave out, and a pointwise kernel's rank).
template <const auto& S, int K>
constexpr bool decodes_to_its_analysis() {
  using C = cpu::detail::code_info<cpu::detail::code_words_of<S, K>>;
  const auto& a = C::info;
  const auto& b = cpu::detail::kernel_of<S, K>::value;
  bool ok = a.kind == b.kind && (a.kind == passes::kernel_kind::pointwise || a.rank == b.rank) && a.axes == b.axes &&
            a.lanes_reduce == b.lanes_reduce && a.lanes == b.lanes && a.per_node == b.per_node && a.stages == b.stages &&
            a.cached == b.cached && a.c_mem == b.c_mem && a.node.size() == b.node.size() &&
            a.mem_node.size() == b.mem_node.size() && a.red_pos == b.red_pos && a.action == b.action &&
            a.where == b.where && a.avail == b.avail && a.reduction == b.reduction && a.viewed == b.viewed &&
            a.mem_nokeep == b.mem_nokeep && a.mem_out == b.mem_out &&
            C::scalars == cpu::detail::kernel_of<S, K>::z.scalars && C::fits == cpu::detail::fits_of<S>[K];
  const auto same_desc = [](const cpu::detail::ndesc& x, const cpu::detail::ndesc& y) {
    return x.o == y.o && x.dt == y.dt && x.idt == y.idt && x.kind == y.kind;
  };
  for (std::size_t p = 0; p < b.node.size(); ++p) {
    const auto &x = a.args[p], &y = b.args[p];
    ok = ok && same_desc(a.desc[p], b.desc[p]) && x.idx == y.idx && x.value == y.value && x.out == y.out &&
         x.acc == y.acc && x.cache == y.cache && same_desc(C::single[p], cpu::detail::single_desc(S, b.node[p]));
  }
  for (std::size_t m = 0; m < b.mem_node.size(); ++m)
    ok = ok && C::mem_dt[m] == S.g.nodes[static_cast<std::size_t>(b.mem_node[m])].dt;
  return ok;
}
template <const auto& S, int... K>
constexpr bool all_decode(std::integer_sequence<int, K...>) {
  return (decodes_to_its_analysis<S, K>() && ...);
}
template <const auto& S>
constexpr bool every_kernel_decodes() {
  return all_decode<S>(std::make_integer_sequence<int, static_cast<int>(S.kernels.size())>{});
}

/// Kernel K of S's entry in the table its runs call through.
template <const auto& S>
auto run_of(int k) {
  static constexpr auto table =
      cpu::detail::kernel_table<S>(std::make_integer_sequence<int, static_cast<int>(S.kernels.size())>{});
  return table[static_cast<std::size_t>(k)].run;
}

/// How many different functions S's kernel table calls (kernel_code instantiations).
template <const auto& S>
std::size_t distinct_codes() {
  std::set<decltype(run_of<S>(0))> f;
  for (int k = 0; k < static_cast<int>(S.kernels.size()); ++k) f.insert(run_of<S>(k));
  return f.size();
}
/// The most code words of a kernel of S.
template <const auto& S, int... K>
constexpr std::size_t most_words(std::integer_sequence<int, K...>) {
  return std::max({cpu::detail::code_words_of<S, K>.size()...});
}

}  // namespace

TEST_CASE("kernels that differ in a commutative op's operand order or a pointwise kernel's rank share code") {
  // exp(a) + c and d + exp(b): canonicalisation orders an add's operands by node index, the
  // computed value first in one and the leaf first in the other; the kernel orders them by its
  // own sources. e and f: the same kernel at rank 1 and rank 3.
  using A = input<"a", f32, shape<4, 5>>;
  using B = input<"b", f32, shape<3, 7>>;
  using C = input<"c", f32, shape<4, 5>>;
  using D = input<"d", f32, shape<3, 7>>;
  using E = input<"e", f32, shape<6>>;
  using F = input<"f", f32, shape<2, 3, 4>>;
  using H = input<"h", f32, shape<6>>;
  using K = input<"k", f32, shape<2, 3, 4>>;
  const auto ord = outputs(exp(A{}) + C{}, D{} + exp(B{}));
  const auto rk = outputs(sqrt(abs(E{})) - H{}, sqrt(abs(F{})) - K{});
  constexpr const auto& so = plan<decltype(ord)>::schedule;
  constexpr const auto& sr = plan<decltype(rk)>::schedule;
  static_assert(so.kernels.size() == 2 && cpu::compiled_kernels<so> == 1, "one code for both operand orders");
  static_assert(sr.kernels.size() == 2 && cpu::compiled_kernels<sr> == 1, "one code for both ranks");
  CHECK(every_kernel_decodes<so>());
  // each kernel on its own nodes, the shared code's operand order included
  for (int draw = 0; draw < 3; ++draw) {
    CHECK(kt::cpu_vs_eager(ord, {{"a", kt::rand<float, 2>({4, 5}, -2, 2)}, {"b", kt::rand<float, 2>({3, 7}, -2, 2)},
                                 {"c", kt::rand<float, 2>({4, 5})}, {"d", kt::rand<float, 2>({3, 7})}}) <= 1e-6);  // (exp)
    CHECK(kt::cpu_vs_eager(rk, {{"e", kt::rand<float, 1>({6})}, {"f", kt::rand<float, 3>({2, 3, 4})},
                                {"h", kt::rand<float, 1>({6})}, {"k", kt::rand<float, 3>({2, 3, 4})}}) == 0);
  }
}

TEST_CASE("plans of one program share the code of their equal kernels") {
  // exp(a) + c alone, and d + exp(b) beside a row sum in another plan: one code for the two
  // pointwise kernels, each plan's table calling it on its own nodes
  using A = input<"a", f32, shape<4, 5>>;
  using B = input<"b", f32, shape<3, 7>>;
  using C = input<"c", f32, shape<4, 5>>;
  using D = input<"d", f32, shape<3, 7>>;
  using E = input<"e", f32, shape<6, 9>>;
  const auto one = exp(A{}) + C{};
  const auto two = outputs(sum<1>(E{}), D{} + exp(B{}));
  constexpr const auto& s1 = plan<decltype(one)>::schedule;
  constexpr const auto& s2 = plan<decltype(two)>::schedule;
  static_assert(s1.kernels.size() == 1 && s2.kernels.size() == 2);
  constexpr int pw = s2.kernels[0].kind == passes::kernel_kind::pointwise ? 0 : 1;
  static_assert(cpu::detail::code_words_of<s2, pw> == cpu::detail::code_words_of<s1, 0>);
  const bool shared = run_of<s2>(pw) == run_of<s1>(0), sum_apart = run_of<s2>(1 - pw) != run_of<s1>(0);
  CHECK(shared);
  CHECK(sum_apart);
  // what each kernel's code reads, decoded from its words; softmax's row kernel keeps exp's
  // values in its row cache between sweeps
  const auto three = softmax(E{}) * 3.0f;
  constexpr const auto& s3 = plan<decltype(three)>::schedule;
  static_assert(cpu::detail::kernel_of<s3, 0>::value.cached > 0);
  CHECK(every_kernel_decodes<s1>());
  CHECK(every_kernel_decodes<s2>());
  CHECK(every_kernel_decodes<s3>());
  for (int draw = 0; draw < 3; ++draw) {
    CHECK(kt::cpu_vs_eager(one, {{"a", kt::rand<float, 2>({4, 5}, -2, 2)}, {"c", kt::rand<float, 2>({4, 5})}}) <= 1e-6);
    CHECK(kt::cpu_vs_eager(two, {{"b", kt::rand<float, 2>({3, 7}, -2, 2)}, {"d", kt::rand<float, 2>({3, 7})},
                                 {"e", kt::rand<float, 2>({6, 9})}}) <= 1e-6);
    CHECK(kt::cpu_vs_eager(three, {{"e", kt::rand<float, 2>({6, 9}, -3, 3)}}) <= 1e-6);
  }
}

TEST_CASE("kernels of equal code, a model's repeated layers and their gradients, share one instantiation") {
  // three layers of one width: each layer's kernels (a matmul with its bias and GELU epilogue, a
  // LayerNorm row kernel) are the same code on other nodes, and so are most of their gradients'
  using X = input<"x", f32, shape<dyn, 24>>;
  using W1 = param<"w1", f32, shape<24, 24>>;
  using W2 = param<"w2", f32, shape<24, 24>>;
  using W3 = param<"w3", f32, shape<24, 24>>;
  using B1 = param<"b1", f32, shape<24>>;
  using B2 = param<"b2", f32, shape<24>>;
  using B3 = param<"b3", f32, shape<24>>;
  using G = param<"g", f32, shape<24>>;
  using Z = param<"z", f32, shape<24>>;
  constexpr auto layer = [](auto h, auto w, auto b) { return layer_norm(gelu(linear(h, w, b)), G{}, Z{}); };
  constexpr auto y = layer(layer(layer(X{}, W1{}, B1{}), W2{}, B2{}), W3{}, B3{});
  constexpr auto l = sum(y * y);
  const auto fwd = y;
  const auto bwd = outputs(grad(l, X{}), grad(l, W1{}), grad(l, W2{}), grad(l, W3{}), grad(l, B2{}), grad(l, G{}));
  constexpr const auto& sf = plan<decltype(fwd)>::schedule;
  constexpr const auto& sb = plan<decltype(bwd)>::schedule;
  // (the first layer makes GELU's constants, the others reuse them: one form all the same, as
  // canonicalisation puts a commutative op's constant operand last)
  static_assert(sf.kernels.size() == 6 && cpu::compiled_kernels<sf> == 2, "the later layers compile nothing");
  static_assert(3 * cpu::compiled_kernels<sb> < 2 * static_cast<int>(sb.kernels.size()), "the gradients share code");
  // what each kernel's code reads, decoded from its words: row kernels of several sweeps and
  // cached values, matmul epilogues, constants and scalars among them
  CHECK(every_kernel_decodes<sf>());
  CHECK(every_kernel_decodes<sb>());
  // the table calls one function per distinct code, small kernels' (shared across plans) and
  // large ones' (shared in the plan) alike
  static_assert(most_words<sb>(std::make_integer_sequence<int, static_cast<int>(sb.kernels.size())>{}) >
                cpu::detail::max_shared_words);
  CHECK(distinct_codes<sf>() == static_cast<std::size_t>(cpu::compiled_kernels<sf>));
  CHECK(distinct_codes<sb>() == static_cast<std::size_t>(cpu::compiled_kernels<sb>));
  // each kernel still runs on its own nodes: every value against the eager backend
  for (index_t n : {1, 5, 67}) {
    INFO("batch " << n);
    const std::initializer_list<feed> f = {
        {"x", kt::rand<float, 2>({n, 24})},          {"w1", kt::rand<float, 2>({24, 24}, -0.3, 0.3)},
        {"w2", kt::rand<float, 2>({24, 24}, -0.3, 0.3)}, {"w3", kt::rand<float, 2>({24, 24}, -0.3, 0.3)},
        {"b1", kt::rand<float, 1>({24})},            {"b2", kt::rand<float, 1>({24})},
        {"b3", kt::rand<float, 1>({24})},            {"g", kt::rand<float, 1>({24}, 0.5, 1.5)},
        {"z", kt::rand<float, 1>({24})}};
    CHECK(kt::cpu_vs_eager(fwd, f) <= 1e-4);
    CHECK(kt::cpu_vs_eager(bwd, f) <= 1e-3);
  }
}
