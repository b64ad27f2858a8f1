// Tracing expression types into graph values; freezing; the validity check; passes called at
// run time as ordinary functions.
#include "support.hpp"

using namespace kiln;

namespace {
using X = input<"x", f32, shape<dyn, 784>>;
using W = param<"w1", f32, shape<784, 256>>;
using B = param<"b1", f32, shape<256>>;
using Layer = decltype(relu(matmul(X{}, W{}) + B{}));

/// A plan type holding a pass result as a static constexpr member.
template <class E>
struct pruned_plan {
  static constexpr auto graph = freeze([] { return passes::remove_dead(traced<E>::value.thaw()); });
};

/// The same result frozen within capacities that hold it and within capacities that do not
/// (freeze_within then sizes it with one run more).
template <class E>
struct bounded_plan {
  static constexpr auto make = [] { return passes::remove_dead(traced<E>::value.thaw()); };
  static constexpr auto roomy = freeze_within<64, 4>(make);
  static constexpr auto tight = freeze_within<2, 1>(make);
};

template <class A, class B>
constexpr bool same_frozen(const A& a, const B& b) {
  if (a.nodes.size() != b.nodes.size() || a.outputs.size() != b.outputs.size() || a.leaves != b.leaves) return false;
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    const node &x = a.nodes[i], &y = b.nodes[i];
    if (x.o != y.o || x.dt != y.dt || !(x.shape == y.shape) || x.slot != y.slot || x.label() != y.label()) return false;
    for (int j = 0; j < 4; ++j)
      if (x.in[j] != y.in[j]) return false;
  }
  for (std::size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i] != b.outputs[i]) return false;
  return true;
}
}  // namespace

TEST_CASE("freeze_within gives freeze's graph, whether or not its capacities hold it") {
  using P = bounded_plan<Layer>;
  static_assert(P::roomy.nodes.size() == 6 && P::tight.nodes.size() == 6);
  static_assert(same_frozen(P::roomy, pruned_plan<Layer>::graph));
  static_assert(same_frozen(P::tight, pruned_plan<Layer>::graph));
  // a graph that differs is told apart
  static_assert(!same_frozen(P::roomy, traced<decltype(relu(X{}))>::value));
  CHECK(P::tight.nodes[5].o == op::relu);
}

TEST_CASE("trace: nodes, order, shapes, dtypes and names of an MLP layer") {
  constexpr const auto& g = traced<Layer>::value;
  static_assert(g.nodes.size() == 6);  // x, w1, matmul, b1, add, relu
  static_assert(g.leaves == 3);
  static_assert(!check_graph(g));
  static_assert(g.nodes[0].o == op::input && g.nodes[0].label() == "x");
  static_assert(g.nodes[1].o == op::param && g.nodes[1].label() == "w1");
  static_assert(g.nodes[2].o == op::matmul && g.nodes[2].in[0] == 0 && g.nodes[2].in[1] == 1);
  static_assert(g.nodes[2].shape == dims{dyn, 256});
  static_assert(g.nodes[4].o == op::add && g.nodes[4].in[1] == 3);
  static_assert(g.nodes[5].o == op::relu && g.outputs[0] == 5);
  static_assert(g.nodes[3].slot == 2);
  static_assert(count_op(g, op::matmul) == 1);
}

TEST_CASE("trace: promotion casts and scalars are explicit nodes") {
  using E = decltype(input<"n", i32, shape<3>>{} * 2.5 + input<"m", i32, shape<3>>{});
  constexpr const auto& g = traced<E>::value;
  static_assert(!check_graph(g));
  static_assert(count_op(g, op::cast) == 2);  // both i32 operands become f32
  static_assert(count_op(g, op::scalar) == 1);
  static_assert(g.nodes[g.outputs[0]].dt == f32);
  // the leaf table has one slot per leaf, numbered in trace order
  std::vector<int> slots;
  for (const node& n : g.nodes)
    if (kind_of(n.o) == op_kind::leaf) slots.push_back(n.slot);
  CHECK(slots == std::vector<int>{0, 1, 2});
}

TEST_CASE("trace: a repeated placeholder is one node; other repeats appear once per use") {
  using Sub = decltype(exp(X{}) * 2.0f);  // x, exp, the scalar 2, mul
  using E = decltype(Sub{} + Sub{});
  constexpr const auto& s = traced<Sub>::value;
  constexpr const auto& g = traced<E>::value;
  static_assert(s.nodes.size() == 4);
  static_assert(g.nodes.size() == 2 * s.nodes.size() - 1 + 1, "x once; exp, 2 and mul twice; add");
  static_assert(count_op(g, op::input) == 1 && count_op(g, op::scalar) == 2);
  static_assert(g.leaves == 3);
  static_assert(!check_graph(g));
}

TEST_CASE("a deep expression traces without deep constant-evaluation recursion") {
  auto e0 = input<"x", f32, shape<16>>{};
  auto e1 = tanh(exp(e0) + 1.0f);
  auto e2 = tanh(exp(e1) + 1.0f);
  auto e3 = tanh(exp(e2) + 1.0f);
  auto e4 = tanh(exp(e3) + 1.0f);
  auto e5 = tanh(exp(e4) + 1.0f);
  auto e6 = sigmoid(exp(e5) * e5 - e4);
  constexpr const auto& g = traced<decltype(e6)>::value;
  static_assert(!check_graph(g));
  static_assert(g.nodes.size() > 20);
  auto x = kt::random<float, 1>({16});
  tensor<float, 1> got = eval(e6, {{"x", x}});
  for (index_t i = 0; i < 16; ++i) {
    float v = x(i), p = 0;
    for (int k = 0; k < 5; ++k) {
      p = v;
      v = std::tanh(std::exp(v) + 1.0f);
    }
    REQUIRE(kt::close(got(i), 1 / (1 + std::exp(-(std::exp(v) * v - p))), 1e-5, 1e-6));
  }
}

TEST_CASE("freezing a pass result into a plan type, checked statically and at run time") {
  using P = pruned_plan<Layer>;
  static_assert(P::graph.nodes.size() == 6);
  static_assert(!check_graph(P::graph));
  // the same pass as an ordinary run-time function, where a debugger can step through it
  graph g = traced<Layer>::value.thaw();
  node dead = g.nodes[5];  // a second relu nobody reads
  dead.in[0] = 4;
  g.add(dead);
  CHECK(g.nodes.size() == 7);
  const graph r = passes::remove_dead(g);
  CHECK(r.nodes.size() == 6);
  CHECK(check_graph(r) == nullptr);
  // pass results still evaluate the same under the eager backend
  auto x = kt::random<float, 2>({3, 784});
  auto w = kt::random<float, 2>({784, 256}, -0.1, 0.1);
  auto b = kt::random<float, 1>({256});
  auto leaves = bind_leaves(traced<Layer>::value, Layer{}, {{"x", x}, {"w1", w}, {"b1", b}});
  auto before = eager::run(g, leaves)[0];
  auto after = eager::run(r, leaves)[0];
  tensor<float, 2> tb(before), ta(after);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 256; ++j) REQUIRE(tb(i, j) == ta(i, j));
}

TEST_CASE("check_graph catches broken graphs") {
  graph g = traced<Layer>::value.thaw();
  CHECK(check_graph(g) == nullptr);
  graph forward_ref = g;
  forward_ref.nodes[2].in[0] = 4;
  CHECK(std::string(check_graph(forward_ref)) == "node input is not an earlier node");
  graph bad_shape = g;
  bad_shape.nodes[4].shape = dims{dyn, 255};
  CHECK(std::string(check_graph(bad_shape)) == "node shape does not follow from its inputs");
  graph bad_slot = g;
  bad_slot.nodes[3].slot = 0;
  CHECK(std::string(check_graph(bad_slot)) == "a leaf slot is used twice");
  graph no_out = g;
  no_out.outputs.clear();
  CHECK(std::string(check_graph(no_out)) == "graph has no output");
}

TEST_CASE("infer: one shape and dtype rule per op, for the builder and check_graph alike") {
  passes::builder b;
  b.g.leaves = 4;
  const auto leaf = [&](dtype dt, dims s, int slot) {
    node n = passes::builder::make(op::input, dt, s);
    n.set_name("leaf");
    n.slot = slot;
    return b.emit(n);
  };
  const int x = leaf(f32, dims{dyn, 8}, 0), w = leaf(f32, dims{8, 3}, 1), g = leaf(f32, dims{8}, 2), i = leaf(i64, dims{5}, 3);
  const auto why = [&](const node& n) { return std::string(infer(n, [&](int j) -> const node& { return b.at(n.in[j]); }).error); };
  // the builder's nodes carry what infer gives
  const int y = b.matmul(x, w);
  CHECK(b.at(y).shape == dims{dyn, 3});
  const int s = b.reduce(op::sum, y, 2u, true);
  CHECK(b.at(s).shape == dims{dyn, 1});
  const int r = b.reshape(w, dims{dyn, 4});
  CHECK(b.at(r).shape == dims{6, 4});  // the dyn extent resolved from the element count
  // mistakes are named, with the inputs whose shapes a run-time error cites
  const auto cites = [&](const node& n) {
    const inferred r = infer(n, [&](int j) -> const node& { return b.at(n.in[j]); });
    return std::pair<int, int>{r.cite[0], r.cite[1]};
  };
  node bad = passes::builder::with_inputs(op::add, x, i);
  CHECK(why(bad) == "differ in dtype (inputs of a binary node)");
  CHECK(cites(bad) == std::pair<int, int>{0, 1});
  bad = passes::builder::with_inputs(op::matmul, w, w);
  CHECK(why(bad) == "do not match as [..., m, k] x [..., k, n]");
  bad = passes::builder::with_inputs(op::layer_norm, x, w, g);
  CHECK(why(bad) == "do not match (gamma must cover x's trailing axes)");
  bad = passes::builder::with_inputs(op::gather, w, x);
  CHECK(why(bad) == "are not integer indices (gather's second input)");
  CHECK(cites(bad) == std::pair<int, int>{1, cite_none});
  bad = passes::builder::with_inputs(op::reshape, w);
  bad.shape = dims{5, 5};
  CHECK(why(bad) == "do not have the same number of elements (input, target)");
  CHECK(cites(bad) == std::pair<int, int>{0, cite_own});
  // check_graph checks composite ops now too
  node ln = passes::builder::with_inputs(op::layer_norm, x, g, g);
  ln.in[3] = b.constant(1e-5, f32);
  ln.dt = f32;
  ln.shape = dims{dyn, 8};
  b.g.outputs = {b.emit(ln)};
  CHECK(check_graph(b.g) == nullptr);
  b.g.nodes.back().shape = dims{dyn, 7};
  CHECK(std::string(check_graph(b.g)) == "node shape does not follow from its inputs");
}

namespace {
/// Whether E, built from placeholders only, is pure (no run-time leaf: tracing and CSE share its
/// repeated subexpressions).
template <class E>
constexpr bool pure_expr(const E&) {
  return record_ref<decltype(as_expr(std::declval<const E&>()))>().pure;
}
}  // namespace

TEST_CASE("kiln's formulas write their constants as literals: over placeholders they stay pure") {
  // A C++ scalar is a run-time leaf: a subexpression holding one is copied at every use (sinh
  // traced 286 nodes, bilinear interpolation 508 and 48 kernels, before its constants were
  // literals).
  using A = input<"a", f32, shape<3, 5>>;
  using Bq = input<"b", f64, shape<3, 5>>;
  using Img = input<"img", f32, shape<2, 2, 5, 6>>;
  static_assert(pure_expr(arange<7>()) && pure_expr(eye<3, 4>()));
  static_assert(pure_expr(expm1(A{})) && pure_expr(log1p(A{})) && pure_expr(sinh(A{})) && pure_expr(cosh(Bq{})));
  static_assert(pure_expr(sign(A{})) && pure_expr(isinf(A{})) && pure_expr(isfinite(Bq{})));
  static_assert(pure_expr(logsumexp<1>(A{})) && pure_expr(remainder(A{}, A{})) && pure_expr(floor_divide(Bq{}, Bq{})));
  static_assert(pure_expr(interpolate<7, 12>(Img{})) && pure_expr(interpolate<8, 9, interpolation::bilinear>(Img{})));
  // after CSE, bilinear interpolation's index arithmetic is one copy per axis
  const auto y = interpolate<8, 9, interpolation::bilinear>(Img{});
  CHECK(traced<decltype(y)>::value.nodes.size() <= 70);
  CHECK(traced<decltype(sinh(A{}))>::value.nodes.size() <= 90);
}

TEST_CASE("node attributes: one list, from which equality, hashes and the recorded key follow") {
  // a node with every attribute set, and for each attribute a copy that differs in it alone
  node base = passes::builder::make(op::slice, f32, dims{4, 5});
  base.in[0] = 0;
  base.axes = 0b101;
  base.keepdim = true;
  base.axis = 1;
  base.begin = 2;
  base.end = 7;
  base.step = 3;
  base.perm.set(0, 1);
  base.value = 0.25;
  std::vector<node> changed;
  for (int f = 0; f < 8; ++f) {
    node n = base;
    switch (f) {
      case 0: n.axes = 0b100; break;
      case 1: n.keepdim = false; break;
      case 2: n.axis = 0; break;
      case 3: n.begin = 1; break;
      case 4: n.end = 6; break;
      case 5: n.step = 2; break;
      case 6: n.perm.set(1, 0); n.perm.set(0, 2); break;
      default: n.value = -0.25; break;
    }
    changed.push_back(n);
  }
  // -0.0 and 0.0 are different attributes (a constant of either is its own value)
  node zero = base, negzero = base;
  zero.value = 0.0;
  negzero.value = -0.0;
  changed.push_back(negzero);
  CHECK(kiln::detail::node_of(kiln::detail::key_of(base)).value == base.value);
  CHECK(same_attributes(kiln::detail::node_of(kiln::detail::key_of(base)), base));
  for (std::size_t f = 0; f < changed.size(); ++f) {
    CAPTURE(f);
    const node& ref = f + 1 == changed.size() ? zero : base;
    const node& n = changed[f];
    CHECK_FALSE(same_attributes(n, ref));
    CHECK_FALSE(passes::detail::same_node(n, ref));
    CHECK_FALSE(kiln::detail::same_node_value(n, ref));
    CHECK(kiln::detail::node_hash(n) != kiln::detail::node_hash(ref));
    CHECK_FALSE(kiln::detail::key_of(n).a == kiln::detail::key_of(ref).a);
    // and the key gives the node back
    CHECK(same_attributes(kiln::detail::node_of(kiln::detail::key_of(n)), n));
  }
  // the same at compile time
  static_assert([] {
    node a = passes::builder::make(op::cumsum, f64, dims{3});
    node b = a;
    b.value = 1;  // reverse
    return !same_attributes(a, b) && kiln::detail::node_hash(a) != kiln::detail::node_hash(b) &&
           same_attributes(kiln::detail::node_of(kiln::detail::key_of(b)), b);
  }());
}
