// Binding by type: `X{} = x` feeds, tensor_sets and nn::param_set, the trainer's typed step and
// hyperparameters. Values are checked against binding by name and against plain loops, on fresh
// random inputs; the compile-time checks (kiln::binds) are static_asserts here, and the errors
// they lead to are in tests/compile_fail/bind_*.cpp.
#include "support.hpp"

#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <memory>

using namespace kiln;

namespace {
using X = input<"x", f64, shape<dyn, 5>>;
using W = param<"w", f64, shape<5, 4>>;
using B = param<"b", f64, shape<4>>;

constexpr auto layer() { return relu(matmul(X{}, W{}) + B{}); }
using layer_t = decltype(layer());

// relu(x w + b) by loops
std::vector<double> layer_by_loops(const tensor<double, 2>& x, const tensor<double, 2>& w, const tensor<double, 1>& b) {
  const index_t n = x.size(0);
  std::vector<double> y(static_cast<std::size_t>(n * 4));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < 4; ++j) {
      double s = b(j);
      for (index_t k = 0; k < 5; ++k) s += x(i, k) * w(k, j);
      y[static_cast<std::size_t>(i * 4 + j)] = std::max(s, 0.0);
    }
  return y;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(kt::close(got[i], want[i], 1e-12, 1e-12));
}
}  // namespace

// ---- what binds at compile time -------------------------------------------------------------

static_assert(binds<layer_t, typed_feed<X>, typed_feed<W>, typed_feed<B>>);
static_assert(binds<layer_t, typed_feed<B>, typed_feed<X>, typed_feed<W>>);  // in any order
static_assert(binds<layer_t, typed_feed<X>, tensor_set<std::tuple<W, B>>>);
static_assert(!binds<layer_t, typed_feed<X>, typed_feed<W>>);                                  // b missing
static_assert(!binds<layer_t, typed_feed<X>, typed_feed<W>, typed_feed<B>, typed_feed<X>>);    // x twice
static_assert(!binds<layer_t, typed_feed<X>, typed_feed<W>, typed_feed<param<"B", f64, shape<4>>>>);  // misspelt
static_assert(!binds<layer_t, typed_feed<X>, typed_feed<W>, typed_feed<param<"b", f32, shape<4>>>>);  // other dtype
static_assert(!binds<layer_t, typed_feed<input<"x", f64, shape<dyn, 6>>>, typed_feed<W>, typed_feed<B>>);
static_assert(!binds<layer_t, typed_feed<X>, typed_feed<W>, typed_feed<input<"b", f64, shape<4>>>>);  // another kind
static_assert(binds<decltype(exp(tensor<float, 1>{}))>);  // bound tensors need no feed
static_assert(!binds<layer_t>);

TEST_CASE("eval binds placeholders by type: the same values as by name and by loops") {
  for (const index_t n : {1, 3, 17}) {
    CAPTURE(n);
    const auto x = kt::random<double, 2>({n, 5});
    const auto w = kt::random<double, 2>({5, 4});
    const auto b = kt::random<double, 1>({4});
    const std::vector<double> want = layer_by_loops(x, w, b);
    const tensor<double, 2> typed = eval(layer(), X{} = x, W{} = w, B{} = b);
    check_close(kt::values_of(typed), want);
    // the feeds in another order, any_tensors, the eager backend
    check_close(kt::values_of(eval(layer(), B{} = b.any(), W{} = w.any(), X{} = x.any())), want);
    check_close(kt::values_of(eval(layer(), X{} = x, W{} = w, B{} = b, eager::backend)), want);
    // by name, as before
    check_close(kt::values_of(eval(layer(), {{"x", x}, {"w", w}, {"b", b}})), kt::values_of(typed));
  }
}

TEST_CASE("compile binds by type, with an out= destination, and eval_all of several outputs") {
  const auto f = compile(layer());
  const auto w = kt::random<double, 2>({5, 4});
  const auto b = kt::random<double, 1>({4});
  std::vector<any_tensor> out;
  for (int call = 0; call < 3; ++call) {
    const auto x = kt::random<double, 2>({6, 5});
    const std::vector<double> want = layer_by_loops(x, w, b);
    check_close(kt::values_of(f(X{} = x, W{} = w, B{} = b)), want);
    f(X{} = x, W{} = w, B{} = b, out);  // into the caller's memory, reused from the second call on
    REQUIRE(out.size() == 1);
    const void* mem = out[0].bytes();
    check_close(kt::values_of(out[0]), want);
    f(X{} = x, W{} = w, B{} = b, out);
    CHECK(out[0].bytes() == mem);
  }
  const auto x = kt::random<double, 2>({4, 5});
  const std::vector<any_tensor> all = eval_all(outputs(layer(), sum(layer())), X{} = x, W{} = w, B{} = b);
  REQUIRE(all.size() == 2);
  const std::vector<double> want = layer_by_loops(x, w, b);
  check_close(kt::values_of(all[0]), want);
  double s = 0;
  for (double v : want) s += v;
  CHECK(kt::close(kt::values_of(all[1])[0], s, 1e-12, 1e-12));
}

TEST_CASE("binding by type checks at run time what only run time knows") {
  const auto x = kt::random<double, 2>({3, 5});
  const auto w = kt::random<double, 2>({5, 4});
  const auto b = kt::random<double, 1>({4});
  // an any_tensor's dtype
  CHECK_THROWS_WITH_AS(eval(layer(), X{} = x, W{} = w.any(), B{} = any_tensor(f32, dims{4})),
                       "kiln: param 'b': expected dtype f64, got f32", dtype_error);
  // static extents against the tensor's, and rank
  CHECK_THROWS_WITH_AS(eval(layer(), X{} = x, W{} = kt::random<double, 2>({5, 3}), B{} = b),
                       "kiln: param 'w': shapes [5, 4] and [5, 3] differ (declared, bound)", shape_error);
  CHECK_THROWS_AS(eval(layer(), X{} = any_tensor(f64, dims{5}), W{} = w, B{} = b), shape_error);
  // dyn extents are free; the ops check the rest: x [3, 6] cannot multiply w [5, 4]
  CHECK_THROWS_AS(eval(layer(), X{} = kt::random<double, 2>({3, 6}), W{} = w, B{} = b), shape_error);
  CHECK_THROWS_WITH_AS(eval(layer(), X{} = x, W{} = tensor<double, 2>{}, B{} = b),
                       "kiln: eval: the tensor bound to param 'w' is undefined", std::invalid_argument);
}

TEST_CASE("tensor_set: one tensor per placeholder type, to and from tensors by name") {
  using S = tensor_set<std::tuple<W, B>>;
  static_assert(S::size() == 2 && S::index_of<B>() == 1 && S::index_of<X>() == -1);
  static_assert(std::same_as<S::tensor_type<W>, tensor<double, 2>>);
  S s;  // zeros of the declared shapes
  CHECK(s.get<W>().shape() == std::array<index_t, 2>{5, 4});
  CHECK(kt::values_of(s.get<B>()) == std::vector<double>(4, 0.0));
  s.get<W>() = kt::random<double, 2>({5, 4});
  // by name: the same storage, both ways
  nn::state_dict sd = s;
  REQUIRE(sd.size() == 2);
  CHECK(sd.at("w").bytes() == s.get<W>().any().bytes());
  CHECK(&s.at("b") == &s.get<B>().any());
  CHECK_THROWS_AS((void)s.at("c"), std::out_of_range);
  const S back(sd);
  CHECK(back.get<W>().data() == s.get<W>().data());
  // a missing, an extra, a misshapen tensor
  nn::state_dict missing = sd;
  missing.erase("b");
  CHECK_THROWS_WITH_AS(S{missing}, "kiln: no tensor for param 'b'", std::invalid_argument);
  nn::state_dict extra = sd;
  extra["c"] = any_tensor(f64, dims{4});
  CHECK_THROWS_WITH_AS(S{extra}, "kiln: 'c' is not the name of a placeholder of the set", std::invalid_argument);
  nn::state_dict wrong = sd;
  wrong["b"] = any_tensor(f64, dims{5});
  CHECK_THROWS_AS(S{wrong}, shape_error);
  // a set as one argument, with others
  const auto x = kt::random<double, 2>({2, 5});
  s.get<B>() = kt::random<double, 1>({4});
  check_close(kt::values_of(eval(layer(), X{} = x, s)), layer_by_loops(x, s.get<W>(), s.get<B>()));
}

TEST_CASE("tensor_set: placeholders of one tensor type each keep their own tensor; a dyn shape starts undefined") {
  using P1 = param<"p1", f32, shape<3>>;
  using P2 = param<"p2", f32, shape<3>>;
  using D = input<"d", f32, shape<dyn, 2>>;
  using S = tensor_set<std::tuple<P1, P2, D>>;
  S s;
  CHECK(s.get<P1>().defined());
  CHECK_FALSE(s.get<D>().defined());
  CHECK(s.get<P1>().data() != s.get<P2>().data());
  const auto a = kt::random<float, 1>({3}), b = kt::random<float, 1>({3});
  s.get<P1>() = a;
  s.get<P2>() = b;
  s.get<D>() = kt::random<float, 2>({5, 2});
  CHECK(&s.at("p2") == &s.get<P2>().any());
  const nn::state_dict sd = s;
  CHECK(sd.at("p1").bytes() == a.any().bytes());
  CHECK(sd.at("p2").bytes() == b.any().bytes());
  const S back(sd);  // a dyn extent takes the tensor's
  CHECK(back.get<P2>().data() == b.data());
  CHECK(back.get<D>().shape() == std::array<index_t, 2>{5, 2});
  nn::state_dict wrong_dtype = sd;
  wrong_dtype["p1"] = any_tensor(f64, dims{3});
  CHECK_THROWS_AS(S{wrong_dtype}, dtype_error);
}

TEST_CASE("nn::param_set: a model's parameters by type, against binding by name and by loops") {
  using net = nn::mlp_with<"net", nn::relu, f64, 5, 7, 3>;
  using W0 = std::tuple_element_t<0, net::params>;
  using B0 = std::tuple_element_t<1, net::params>;
  using W1 = std::tuple_element_t<2, net::params>;
  using B1 = std::tuple_element_t<3, net::params>;
  static_assert(W0::name.view() == "net.0.weight" && B1::name.view() == "net.1.bias");
  const nn::param_set<net::params> p = nn::make_params<net>(7);
  // the same initial values as by name (seeded by the names)
  const nn::state_dict by_name = p;
  CHECK(kt::values_of(p.get<W1>()) == kt::values_of(by_name.at("net.1.weight")));
  const auto x = kt::random<double, 2>({4, 5});
  const tensor<double, 2> y = eval(net{}(X{}), X{} = x, p);
  const tensor<double, 2> by_names = eval(net{}(X{}), nn::feeds(p, {{"x", x}}));
  CHECK(kt::values_of(y) == kt::values_of(by_names));
  // linear (x W0^T + b0), relu, linear (h W1^T + b1)
  const auto& w0 = p.get<W0>();
  const auto& b0 = p.get<B0>();
  const auto& w1 = p.get<W1>();
  const auto& b1 = p.get<B1>();
  for (index_t i = 0; i < 4; ++i) {
    double h[7];
    for (index_t j = 0; j < 7; ++j) {
      double s = b0(j);
      for (index_t k = 0; k < 5; ++k) s += x(i, k) * w0(j, k);
      h[j] = std::max(s, 0.0);
    }
    for (index_t j = 0; j < 3; ++j) {
      double s = b1(j);
      for (index_t k = 0; k < 7; ++k) s += h[k] * w1(j, k);
      CHECK(kt::close(y(i, j), s, 1e-12, 1e-12));
    }
  }
}

TEST_CASE("nn::feeds owns its names: the state dict may go first") {
  using net = nn::mlp_with<"net", nn::relu, f64, 5, 7, 3>;
  const auto x = kt::random<double, 2>({2, 5});
  const auto p = nn::make_params<net>(3);
  auto sd = std::make_unique<nn::state_dict>(p.by_name());
  nn::named_feeds f = nn::feeds(*sd, {{std::string("x"), x}});  // the "x" string is gone after this line too
  sd.reset();  // the names the feeds read are their own
  const nn::named_feeds moved = std::move(f);
  CHECK(moved.size() == 5);
  CHECK(kt::values_of(eval(net{}(X{}), moved)) == kt::values_of(eval(net{}(X{}), X{} = x, p)));
}

// ---- the trainer ----------------------------------------------------------------------------

namespace {
using TX = input<"x", f64, shape<dyn, 5>>;
using TY = input<"y", i64, shape<dyn>>;
using drop_net = nn::sequential<nn::linear<"fc1", 5, 8, f64>, nn::relu, nn::dropout<"drop", 25>,
                                nn::linear<"fc2", 8, 3, f64>>;
constexpr auto drop_loss() { return cross_entropy(drop_net{}(TX{}, nn::train), TY{}); }
}  // namespace

TEST_CASE("the trainer binds by type: the same steps as by name, to the bit") {
  // Adam with clipping by global norm: Adam's hyperparameters, max_norm and the dropout seed
  // are all bound by the trainer, by type
  const auto init = nn::make_params<drop_net>(11);
  optim::trainer typed(drop_loss(), drop_net::params{}, optim::adam{.lr = 0.01}, nn::param_set<drop_net::params>(init.by_name()),
                       optim::clip_grad_norm{.max_norm = 0.5});
  optim::trainer named(drop_loss(), drop_net::params{}, optim::adam{.lr = 0.01}, init.by_name(),
                       optim::clip_grad_norm{.max_norm = 0.5});
  static_assert(std::same_as<decltype(typed), decltype(named)>);
  typed.seed(5);
  named.seed(5);
  for (int s = 0; s < 6; ++s) {
    const auto x = kt::random<double, 2>({9, 5});
    tensor<std::int64_t, 1> y({9});
    for (index_t i = 0; i < 9; ++i) y(i) = static_cast<std::int64_t>(kt::rng()() % 3);
    typed.options().lr = named.options().lr = 0.01 / (s + 1);
    const double lt = typed.step(TX{} = x, TY{} = y);
    const double ln = named.step({{"x", x}, {"y", y}});
    CHECK(lt == ln);
  }
  typed.params().for_each([&]<class P>(std::type_identity<P>, const any_tensor& t) {
    CAPTURE(P::name.view());
    CHECK(kt::values_of(t) == kt::values_of(named.params().get<P>()));
  });
  typed.states().for_each([&]<class P>(std::type_identity<P>, const any_tensor& t) {
    CAPTURE(P::name.view());
    CHECK(kt::values_of(t) == kt::values_of(named.states().get<P>()));
  });
  // the parameters moved, and the initial set was not written (the trainer copies it)
  using W = nn::linear<"fc1", 5, 8, f64>::weight;
  CHECK(kt::values_of(typed.params().get<W>()) != kt::values_of(init.get<W>()));
  // the trained parameters are one argument of eval
  const auto x = kt::random<double, 2>({2, 5});
  CHECK(kt::values_of(eval(drop_net{}(TX{}), TX{} = x, typed.params())) ==
        kt::values_of(eval(drop_net{}(TX{}), nn::feeds(named.params(), {{"x", x}}))));
}

TEST_CASE("optimizer hyperparameters are typed values keyed by name at compile time") {
  const auto a = optim::adam{.lr = 0.1, .beta1 = 0.8, .eps = 1e-6}.hypers(2);
  CHECK(a.get<"eps">() == 1e-6);
  CHECK(a.get<"step_size">() == doctest::Approx(0.1 / (1 - 0.8 * 0.8)));
  static_assert(decltype(a)::index_of<"lr">() == -1);  // Adam feeds lr through step_size
  const auto m = optim::sgd_momentum{.lr = 0.5, .momentum = 0.9}.hypers(1) + optim::clip_grad_norm{.max_norm = 2}.hypers();
  CHECK(m.get<"lr">() == 0.5);
  CHECK(m.get<"buf_keep">() == 0.0);  // the first step takes the gradient as the buffer
  CHECK(m.get<"max_norm">() == 2.0);
  static_assert(std::same_as<optim::hyper<f32, "lr">, input<"optim.lr.f32", f32, shape<>>>);
}
