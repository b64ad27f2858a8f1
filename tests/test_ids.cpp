// Built expressions are ids (ex::id<H, NT, NS>, graph/record.hpp): the same structure is the
// same type, in every translation unit; a different structure is a different type; names stay
// short at any depth; and tracing through the registered records gives back the expression.
#include "ids_common.hpp"
#include "support.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

using namespace kiln;

namespace {
using ids::X;
using ids::Y;

// the same structure is the same type (a scalar's value is data, not structure; a C++ double
// next to an f32 tensor is an f32 scalar) ...
static_assert(std::is_same_v<decltype(tanh(X{}) * 2.0f), decltype(tanh(X{}) * 3.0f)>);
static_assert(std::is_same_v<decltype(X{} * 2.0f), decltype(X{} * 2.0)>);
// ... and any difference in structure is a different type
static_assert(!std::is_same_v<decltype(tanh(X{})), decltype(sin(X{}))>);                     // op
static_assert(!std::is_same_v<decltype(X{} + Y{}), decltype(Y{} + X{})>);                    // operand order
static_assert(!std::is_same_v<decltype(tanh(X{})), decltype(tanh(Y{}))>);                    // leaf name
static_assert(!std::is_same_v<decltype(X{} * 2.0f), decltype(X{} * X{})>);                   // leaf kind
static_assert(!std::is_same_v<decltype(sum<0>(X{})), decltype(sum<1>(X{}))>);                // axes
static_assert(!std::is_same_v<decltype(sum<1>(X{})), decltype(sum<1>(X{}, keepdim))>);       // keepdim
static_assert(!std::is_same_v<decltype(slice<1, 0, 4>(X{})), decltype(slice<1, 4, 8>(X{}))>);  // range
static_assert(!std::is_same_v<decltype(cast<f64>(X{})), decltype(cast<i32>(X{}))>);           // dtype
static_assert(!std::is_same_v<decltype(tanh(tanh(X{}))), decltype(tanh(tanh(tanh(X{}))))>);  // depth
// an expression's type carries its numbers of bound tensors and scalars (its leaf data)
static_assert(decltype(X{} * 2.0f + 1.0f)::scalar_leaves == 2 && decltype(X{} * 2.0f)::tensor_leaves == 0);
// a const expression type (decltype of a constexpr variable) traces as the expression
constexpr auto two_ops = tanh(X{} + Y{});
static_assert(traced<decltype(two_ops)>::value.nodes.size() == 4);

/// Recomputes x -> tanh(x * y), n times.
double deep_reference(double x, double y, int n) {
  for (int i = 0; i < n; ++i) x = std::tanh(x * y);
  return x;
}

// ---- random expressions -------------------------------------------------------------------
// An expression of x and y chosen by a seed, and the same function computed directly.

constexpr std::uint64_t next(std::uint64_t s) { return s * 6364136223846793005ull + 1442695040888963407ull; }
constexpr int pick(std::uint64_t s, int depth) { return depth == 0 ? 6 + static_cast<int>((s >> 40) & 1) : static_cast<int>((s >> 33) % 6); }

template <std::uint64_t S, int D>
constexpr auto random_expr() {
  constexpr std::uint64_t s = next(S), l = next(s ^ 0x9e3779b97f4a7c15ull), r = next(s + 12345);
  constexpr int p = pick(s, D);
  if constexpr (p == 0) return tanh(random_expr<l, D - 1>());
  else if constexpr (p == 1) return random_expr<l, D - 1>() * 0.5f + 0.25f;
  else if constexpr (p == 2) return random_expr<l, D - 1>() + random_expr<r, D - 1>();
  else if constexpr (p == 3) return max(random_expr<l, D - 1>(), random_expr<r, D - 1>());
  else if constexpr (p == 4) return random_expr<l, D - 1>() * random_expr<r, D - 1>();
  else if constexpr (p == 5) return sin(random_expr<l, D - 1>() - random_expr<r, D - 1>());
  else if constexpr (p == 6) return X{};
  else return Y{};
}

double random_reference(std::uint64_t seed, int depth, double x, double y) {
  const std::uint64_t s = next(seed), l = next(s ^ 0x9e3779b97f4a7c15ull), r = next(s + 12345);
  switch (pick(s, depth)) {
    case 0: return std::tanh(random_reference(l, depth - 1, x, y));
    case 1: return random_reference(l, depth - 1, x, y) * 0.5 + 0.25;
    case 2: return random_reference(l, depth - 1, x, y) + random_reference(r, depth - 1, x, y);
    case 3: return std::max(random_reference(l, depth - 1, x, y), random_reference(r, depth - 1, x, y));
    case 4: return random_reference(l, depth - 1, x, y) * random_reference(r, depth - 1, x, y);
    case 5: return std::sin(random_reference(l, depth - 1, x, y) - random_reference(r, depth - 1, x, y));
    case 6: return x;
    default: return y;
  }
}

template <std::uint64_t Seed>
void check_random_expr(const tensor<float, 2>& x, const tensor<float, 2>& y) {
  constexpr int depth = 5;
  const auto e = random_expr<Seed, depth>();
  using E = decltype(e);
  static_assert(!check_graph(traced<E>::value));
  const tensor<float, 2> got = eval(e, {{"x", x}, {"y", y}});
  const tensor<float, 2> ref = eval(e, {{"x", x}, {"y", y}}, eager::backend);
  REQUIRE(got.numel() == x.numel());
  for (index_t i = 0; i < x.numel(); ++i) {
    const double want = random_reference(Seed, depth, x.data()[i], y.data()[i]);
    INFO("seed " << Seed << ", element " << i);
    CHECK(kt::close(got.data()[i], want, 1e-4, 1e-4));
    CHECK(kt::close(ref.data()[i], want, 1e-4, 1e-4));
  }
}

template <std::uint64_t... Seeds>
void check_random_exprs(std::integer_sequence<std::uint64_t, Seeds...>) {
  const auto x = kt::random<float, 2>({5, 8}, -1, 1), y = kt::random<float, 2>({5, 8}, -1, 1);
  (check_random_expr<Seeds + 1>(x, y), ...);
}
}  // namespace

TEST_CASE("ids: a built expression's type has a short name however deep it is, in every translation unit") {
  const std::string name = typeid(ids::Deep).name();
  CHECK(name.size() < 80);
  CHECK(name == ids::deep_type_name_elsewhere());
}

TEST_CASE("ids: a 600-step chain traces back to its graph, node by node") {
  constexpr const auto& g = traced<ids::Deep>::value;
  constexpr int steps = ids::deep_steps;
  static_assert(g.nodes.size() == 2 + 2 * steps);  // x, then y, mul, tanh, then mul, tanh per step
  static_assert(g.leaves == 2);
  static_assert(!check_graph(g));
  constexpr bool ok = [&] {
    if (g.nodes[0].o != op::input || g.nodes[0].label() != "x") return false;
    if (g.nodes[1].o != op::input || g.nodes[1].label() != "y") return false;
    for (int i = 0; i < steps; ++i) {
      const int mul = 2 + 2 * i, prev = i == 0 ? 0 : mul - 1;
      const node& m = g.nodes[static_cast<std::size_t>(mul)];
      const node& t = g.nodes[static_cast<std::size_t>(mul + 1)];
      if (m.o != op::mul || m.in[0] != prev || m.in[1] != 1 || t.o != op::tanh || t.in[0] != mul) return false;
    }
    return g.outputs[0] == 1 + 2 * steps;
  }();
  static_assert(ok);
}

TEST_CASE("ids: a 600-step chain is planned and evaluates as written, here and in another translation unit") {
  const auto x = kt::random<float, 2>({3, 8}, -2, 2), y = kt::random<float, 2>({3, 8}, 0.5, 1.5);
  const tensor<float, 2> got = eval(ids::deep(), {{"x", x}, {"y", y}}, eager::backend);
  const tensor<float, 2> there(ids::eval_deep_elsewhere(x.any(), y.any()));
  // the whole pipeline runs on it, the same in both units: 1200 pointwise nodes, in kernels of
  // at most passes::max_kernel_nodes (256) each, so five
  constexpr const auto& s = plan<ids::Deep>::schedule;
  static_assert(s.kernels.size() == 5);
  static_assert([] {
    int total = 0;
    for (const auto& k : plan<ids::Deep>::schedule.kernels) {
      if (k.nodes > passes::max_kernel_nodes) return false;
      total += k.nodes;
    }
    return total == 2 * ids::deep_steps;
  }());
  CHECK(s.g.nodes.size() == ids::deep_plan_nodes_elsewhere());
  // and the CPU backend runs the five kernels
  const tensor<float, 2> fused = eval(ids::deep(), {{"x", x}, {"y", y}});
  for (index_t i = 0; i < x.numel(); ++i) {
    CHECK(kt::close(got.data()[i], deep_reference(x.data()[i], y.data()[i], ids::deep_steps), 1e-4, 1e-5));
    CHECK(got.data()[i] == there.data()[i]);
    CHECK(kt::close(fused.data()[i], got.data()[i], 1e-4, 1e-5));
  }
}

TEST_CASE("ids: random expressions of two inputs compute what they say") {
  check_random_exprs(std::make_integer_sequence<std::uint64_t, 12>{});
}
