// The decomposition and canonicalisation passes: structure checked with static_assert on the
// frozen pass results, numbers checked by running the eager backend before and after on fresh
// random inputs, and the passes called as ordinary run-time functions.
#include "support.hpp"

using namespace kiln;

namespace {

template <class G>
constexpr bool all_primitive(const G& g) {
  for (const node& n : g.nodes)
    if (!passes::is_primitive(n.o)) return false;
  return true;
}

/// Max |before - after| / (1 + |before|) over all elements, as f64.
double max_rel_diff(const any_tensor& a, const any_tensor& b) {
  REQUIRE(a.shape() == b.shape());
  any_tensor x(f64, a.shape()), y(f64, b.shape());
  x.copy_from(a);
  y.copy_from(b);
  double worst = 0;
  for (index_t i = 0; i < x.numel(); ++i) {
    const double p = x.data<double>()[i], q = y.data<double>()[i];
    if (std::isnan(p) && std::isnan(q)) continue;
    worst = std::max(worst, std::fabs(p - q) / (1 + std::fabs(p)));
  }
  return worst;
}

/// Evaluates expression e with the eager backend on its traced graph and on its primitive,
/// canonicalised graph (the frozen plan), and returns the largest relative difference.
template <class E>
double before_after(const E& e, std::initializer_list<feed> feeds) {
  constexpr const auto& g = traced<E>::value;
  constexpr const auto& p = prims_plan<E>::graph;
  static_assert(!check_graph(p), "the pass result is a valid graph");
  static_assert(all_primitive(p), "only primitives are left");
  const auto leaves = bind_leaves(g, e, feeds);
  return max_rel_diff(eager::run(g, leaves)[0], eager::run(p, leaves)[0]);
}

using X = input<"x", f32, shape<dyn, 16>>;

/// Builds neg(neg x) * 1 / 1 + (-0.0) - 0.0 (and + 0.0 when plus_zero) from constants, as
/// decompositions do, canonicalises it and counts the nodes left.
constexpr int identities_left(bool plus_zero) {
  passes::builder b;
  node leaf = passes::builder::make(op::input, f32, dims{dyn, 16});
  leaf.set_name("x");
  leaf.slot = 0;
  b.g.leaves = 1;
  const int x = b.emit(leaf);
  int y = b.unary(op::neg, b.unary(op::neg, x));
  y = b.mul(y, b.constant(1, f32));
  y = b.div(y, b.constant(1, f32));
  y = b.add(b.constant(-0.0, f32), y);
  y = b.sub(y, b.constant(0.0, f32));
  if (plus_zero) y = b.add(y, b.constant(0.0, f32));
  b.g.outputs = {y};
  const graph g = passes::canonicalize(b.g);
  return check_graph(g) ? -1 : static_cast<int>(g.nodes.size());
}
using XD = input<"x", f64, shape<dyn, 16>>;
}  // namespace

TEST_CASE("decompose: each high-level op becomes primitives with the same values") {
  auto x = XD{};
  auto xv = kt::random<double, 2>({5, 16}, -3, 3);
  auto g = param<"g", f64, shape<16>>{};
  auto b = param<"b", f64, shape<16>>{};
  auto gv = kt::random<double, 1>({16});
  auto bv = kt::random<double, 1>({16});
  CHECK(before_after(relu(x), {{"x", xv}}) == 0);
  CHECK(before_after(sigmoid(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(silu(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(gelu(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(gelu_tanh(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(mean<1>(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(mean<0>(x, keepdim), {{"x", xv}}) < 1e-15);
  CHECK(before_after(var<1>(x), {{"x", xv}}) < 1e-14);
  CHECK(before_after(softmax(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(softmax<0>(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(log_softmax(x), {{"x", xv}}) < 1e-15);
  CHECK(before_after(layer_norm(x, g, b), {{"x", xv}, {"g", gv}, {"b", bv}}) < 1e-14);
  auto w = param<"w", f64, shape<4, 16>>{};
  auto wb = param<"wb", f64, shape<4>>{};
  auto wv = kt::random<double, 2>({4, 16});
  auto wbv = kt::random<double, 1>({4});
  CHECK(before_after(linear(x, w, wb), {{"x", xv}, {"w", wv}, {"wb", wbv}}) < 1e-14);
  auto t = input<"t", f64, shape<dyn, 16>>{};
  CHECK(before_after(mse_loss(x, t), {{"x", xv}, {"t", kt::random<double, 2>({5, 16})}}) < 1e-14);
  auto labels = input<"y", i64, shape<dyn>>{};
  tensor<std::int64_t, 1> yv({5}, {3, 0, 15, 7, 7});
  CHECK(before_after(cross_entropy(x, labels), {{"x", xv}, {"y", yv}}) < 1e-14);
}

TEST_CASE("decompose: softmax, log_softmax and cross_entropy stay finite for huge inputs") {
  auto x = X{};
  auto xv = kt::random<float, 2>({4, 16}, -3e4, 3e4);  // exp overflows f32 above ~88
  auto labels = input<"y", i32, shape<dyn>>{};
  tensor<int, 1> yv({4}, {1, 2, 3, 4});
  CHECK(before_after(softmax(x), {{"x", xv}}) < 1e-6);
  CHECK(before_after(log_softmax(x), {{"x", xv}}) < 1e-6);
  CHECK(before_after(cross_entropy(x, labels), {{"x", xv}, {"y", yv}}) < 1e-6);
  tensor<float, 2> s = eval(softmax(x), {{"x", xv}});
  for (index_t i = 0; i < s.numel(); ++i) REQUIRE(std::isfinite(s.data()[i]));
}

TEST_CASE("decompose: structure of softmax, layer_norm and a 3-layer MLP") {
  using Soft = decltype(softmax(X{}));
  constexpr const auto& s = prims_plan<Soft>::graph;
  static_assert(count_op(s, op::amax) == 1 && count_op(s, op::sum) == 1 && count_op(s, op::exp) == 1);
  static_assert(count_op(s, op::sub) == 1 && count_op(s, op::reciprocal) == 1 && count_op(s, op::mul) == 1);
  static_assert(count_op(s, op::softmax) == 0);
  using LN = decltype(layer_norm(X{}, param<"g", f32, shape<16>>{}, param<"b", f32, shape<16>>{}));
  constexpr const auto& l = prims_plan<LN>::graph;
  static_assert(count_op(l, op::sum) == 2 && count_op(l, op::rsqrt) == 1 && count_op(l, op::numel) == 0);
  static_assert(count_op(l, op::constant) == 1, "the element count 16 is folded and shared");
  using MLP = decltype(linear(relu(linear(relu(linear(input<"x", f32, shape<dyn, 784>>{},
                                                     param<"w1", f32, shape<256, 784>>{}, param<"b1", f32, shape<256>>{})),
                                          param<"w2", f32, shape<128, 256>>{}, param<"b2", f32, shape<128>>{})),
                              param<"w3", f32, shape<10, 128>>{}, param<"b3", f32, shape<10>>{}));
  constexpr const auto& m = prims_plan<MLP>::graph;
  static_assert(count_op(m, op::matmul) == 3 && count_op(m, op::permute) == 3 && count_op(m, op::max) == 2);
  static_assert(count_op(m, op::constant) == 1, "relu's two zeros are one constant after CSE");
  static_assert(all_primitive(m) && !check_graph(m));
}

TEST_CASE("canonicalize: CSE, identities, folding, dead nodes") {
  auto x = X{};
  auto y = input<"y", f32, shape<dyn, 16>>{};
  // x*y and y*x are one node; the two uses of x are one placeholder node
  constexpr const auto& cse = prims_plan<decltype(x * y + y * x)>::graph;
  static_assert(count_op(cse, op::mul) == 1 && count_op(cse, op::add) == 1);
  // neg(neg x), x * 1, x / 1, x + (-0.0) and x - 0.0 are x; x + 0.0 is not (x = -0.0)
  static_assert(identities_left(false) == 1, "only x is left");
  static_assert(identities_left(true) == 3, "x, the constant 0.0 and the add stay");
  // C++ scalars in an expression are run-time leaves: x * 1.0f keeps its multiply
  constexpr const auto& runtime_one = prims_plan<decltype(x * 1.0f)>::graph;
  static_assert(count_op(runtime_one, op::mul) == 1);
  // permute of permute composes; reshape of reshape collapses; identity permutes vanish
  constexpr const auto& shp = prims_plan<decltype(reshape<dyn, 4>(reshape<dyn, 8>(transpose(transpose(x)))))>::graph;
  static_assert(count_op(shp, op::permute) == 0 && count_op(shp, op::reshape) == 1);
  // a broadcast that the add would do anyway is dropped
  auto row = param<"r", f32, shape<16>>{};
  constexpr const auto& bc = prims_plan<decltype(x + broadcast_to<4, 16>(row))>::graph;
  static_assert(count_op(bc, op::broadcast) == 1, "kept: [dyn,16] + [16] would not give [4, 16]");
  constexpr const auto& bc2 = prims_plan<decltype(reshape<4, 16>(x) + broadcast_to<4, 16>(row))>::graph;
  static_assert(count_op(bc2, op::broadcast) == 0);
}

TEST_CASE("canonicalize: constant folding is exact and respects dtypes") {
  passes::builder b;
  const int c2 = b.constant(2, f32), c3 = b.constant(0.1, f32);
  const int s = b.add(c2, c3);
  b.g.outputs = {b.mul(s, s)};
  const graph g = passes::canonicalize(b.g);  // a run-time call of the pass
  REQUIRE(g.nodes.size() == 1);
  REQUIRE(g.nodes[0].o == op::constant);
  const float two_point_one = 2.0f + static_cast<float>(0.1);
  CHECK(static_cast<float>(g.nodes[0].value) == two_point_one * two_point_one);
  // integers: 7 / 2 is not folded (integer division is the backend's business); 7 - 9 is
  passes::builder ib;
  const int a = ib.constant(7, i32), c = ib.constant(9, i32);
  ib.g.outputs = {ib.sub(a, c)};
  const graph ig = passes::canonicalize(ib.g);
  REQUIRE(ig.nodes.size() == 1);
  CHECK(ig.nodes[0].value == -2);
  // comparisons fold to bool; where on a constant condition picks a branch
  passes::builder wb;
  const int x = wb.emit([] {
    node n = passes::builder::make(op::input, f32, dims{3});
    n.set_name("x");
    n.slot = 0;
    return n;
  }());
  wb.g.leaves = 1;
  const int cond = wb.binary(op::lt, wb.constant(1, f32), wb.constant(2, f32));
  wb.g.outputs = {wb.where(cond, x, wb.constant(5, f32))};
  const graph wg = passes::canonicalize(wb.g);
  CHECK(check_graph(wg) == nullptr);
  CHECK(count_op(wg, op::where) == 1);  // the condition folded to a constant; where itself stays
  CHECK(count_op(wg, op::lt) == 0);
}

TEST_CASE("passes run as ordinary functions and agree with their compile-time results") {
  using E = decltype(layer_norm(softmax(X{}) * 2.0f, param<"g", f32, shape<16>>{}, param<"b", f32, shape<16>>{}));
  const graph g = traced<E>::value.thaw();
  const graph d = passes::decompose(g);
  CHECK(check_graph(d) == nullptr);
  const graph c = passes::canonicalize(d);
  constexpr const auto& frozen = prims_plan<E>::graph;
  REQUIRE(c.nodes.size() == frozen.nodes.size());
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    REQUIRE(c.nodes[i].o == frozen.nodes[i].o);
    for (int j = 0; j < 4; ++j) REQUIRE(c.nodes[i].in[j] == frozen.nodes[i].in[j]);
  }
}

namespace {
// The pipeline is one list: its order, and what runs when.
static_assert(passes::pipeline[0].name == "decompose" && passes::pipeline[1].name == "canonicalize");
static_assert(passes::pipeline[passes::fuse_stage].name == "fuse" && passes::stage_count == passes::fuse_stage + 2);
static_assert(passes::stage_of(passes::pass::differentiate) == 2 && passes::pipeline[2].derivatives_only);

template <class G, class F>
void require_same_graph(const G& a, const F& b) {
  REQUIRE(a.nodes.size() == b.nodes.size());
  REQUIRE(a.outputs.size() == b.outputs.size());
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    REQUIRE(a.nodes[i].o == b.nodes[i].o);
    REQUIRE(a.nodes[i].shape == b.nodes[i].shape);
    for (int j = 0; j < 4; ++j) REQUIRE(a.nodes[i].in[j] == b.nodes[i].in[j]);
  }
  for (std::size_t i = 0; i < a.outputs.size(); ++i) REQUIRE(a.outputs[i] == b.outputs[i]);
}

/// passes::compile at run time (checking the graph after every stage) and plan<E> in constant
/// evaluation run the same list: the same graph, kernels and buffers.
template <class E>
void same_at_run_time() {
  const passes::schedule s = passes::compile(traced<E>::value.thaw(), true);
  constexpr const auto& f = plan<E>::schedule;
  static_assert(!check_graph(f.g));
  require_same_graph(s.g, f.g);
  REQUIRE(s.kernels.size() == f.kernels.size());
  REQUIRE(s.buffers.size() == f.buffers.size());
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i) {
    REQUIRE(s.kernel_of[i] == f.kernel_of[i]);
    REQUIRE(s.buffer_of[i] == f.buffer_of[i]);
  }
}
}  // namespace

TEST_CASE("the pipeline runs the same stages at run time and at compile time") {
  using W = param<"w", f32, shape<16, 16>>;
  same_at_run_time<decltype(layer_norm(softmax(X{}) * 2.0f, param<"g", f32, shape<16>>{}, param<"b", f32, shape<16>>{}))>();
  same_at_run_time<decltype(gelu(matmul(X{}, W{})) + X{})>();
  // with derivatives: differentiate, canonicalize and partition run too
  const auto l = sum(tanh(matmul(X{}, W{})));
  using L = decltype(l);
  same_at_run_time<decltype(outputs(l, grad(l, W{})))>();
  static_assert(stage_runs_for<decltype(grad(l, W{})), 2>() && !stage_runs_for<L, 2>());
  CHECK(passes::to_primitives(traced<L>::value.thaw(), true).nodes.size() == prims_plan<L>::graph.nodes.size());
  // every decomposition and derivative rule that emits several nodes: the node order must not
  // depend on the order in which a compiler evaluates function arguments
  using Y = input<"y", i64, shape<dyn>>;
  const auto z = sigmoid(X{}) + silu(X{}) + gelu_tanh(X{}) * var<1>(X{});
  same_at_run_time<decltype(outputs(z, cross_entropy(X{}, Y{})))>();
  const auto r = sum(abs(X{}) * rsqrt(X{} * X{} + 1.0f) + erf(X{}) + max(X{}, tanh(X{})) + pow(X{} * X{} + 1.0f, X{}) +
                     amax<1>(X{}));
  same_at_run_time<decltype(outputs(r, grad(r, X{})))>();
  const auto q = sum(sigmoid(matmul(X{}, W{})) * X{});
  same_at_run_time<decltype(grad(q, W{}))>();
}

TEST_CASE("symbolic extents: the shape rule carries each leaf's dynamic extents by name") {
  using A = input<"a", f32, shape<dyn, 8>>;
  using B = input<"b", f32, shape<dyn, 8>>;
  // a + a keeps a's name; a + b cannot tell (either may be 1); a reshape keeps a name where the
  // rest of the extents match; a matmul keeps the rows' name; a slice of a dyn axis loses it
  const auto y = outputs(exp(A{}) + A{}, A{} + B{}, reshape<dyn, 4, 2>(A{}), matmul(A{}, transpose(B{})),
                         slice<0, 1, to_end>(A{}));
  using Y = decltype(y);
  constexpr const auto& g = traced<Y>::value;
  const graph rg = g.thaw();  // also as a run-time call
  const cvec<dims> sym = passes::symbolic_shapes(rg);
  const auto at = [&](int q) { return sym[static_cast<std::size_t>(g.outputs[static_cast<std::size_t>(q)])]; };
  const index_t na = passes::extent_name(0, 0), nb = passes::extent_name(1, 0);
  CHECK(na != nb);
  CHECK(passes::is_named(na));
  CHECK(at(0) == dims{na, 8});
  CHECK(at(1) == dims{dyn, 8});
  CHECK(at(2) == dims{na, 4, 2});
  CHECK(at(3) == dims{na, nb});
  CHECK(at(4) == dims{dyn, 8});
  // the same at compile time
  constexpr auto csym = [] {
    const auto s = passes::symbolic_shapes(traced<Y>::value);
    std::array<dims, 5> r{};
    for (std::size_t q = 0; q < 5; ++q) r[q] = s[static_cast<std::size_t>(traced<Y>::value.outputs[q])];
    return r;
  }();
  for (int q = 0; q < 5; ++q) CHECK(csym[static_cast<std::size_t>(q)] == at(q));
}

TEST_CASE("symbolic extents: a kernel of one name fits its loop nest, one of two names is checked at run time") {
  using A = input<"a", f32, shape<dyn, 8>>;
  using B = input<"b", f32, shape<dyn, 8>>;
  using One = decltype(exp(A{}) * A{} + sin(A{}));
  using Two = decltype(exp(A{}) * B{} + sin(A{}));
  constexpr const auto& one = plan<One>::schedule;
  constexpr const auto& two = plan<Two>::schedule;
  static_assert(one.kernels.size() == 1 && two.kernels.size() == 1);
  CHECK(passes::kernels_fit(one)[0]);
  CHECK_FALSE(passes::kernels_fit(two)[0]);
  // both give the eager backend's values, a 1 broadcast against the other extent included
  const any_tensor a = kt::random_tensor(f32, dims{5, 8}), b = kt::random_tensor(f32, dims{1, 8});
  CHECK(max_rel_diff(eval_any(Two{}, {{"a", a}, {"b", b}}), eval_any(Two{}, {{"a", a}, {"b", b}}, eager::backend)) < 1e-6);
  CHECK(max_rel_diff(eval_any(One{}, {{"a", a}}), eval_any(One{}, {{"a", a}}, eager::backend)) < 1e-6);
}
