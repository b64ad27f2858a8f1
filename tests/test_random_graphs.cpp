// Many random graphs: the fully optimised graph (decompose + canonicalize, called as run-time
// functions) and its fused, planned schedule must compute what the unoptimised graph computes,
// under the eager backend.
#include "support.hpp"

#include <functional>

using namespace kiln;

namespace {

struct random_graph {
  passes::builder b;
  std::mt19937_64& rng;
  std::vector<int> pool;  // nodes that may be used as operands

  int pick() { return pool[std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng)]; }
  int coin(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  int leaf(const char* name, dims shape, int slot) {
    node n = passes::builder::make(op::input, f64, shape);
    n.set_name(name);
    n.slot = slot;
    return b.emit(n);
  }
  int constant() {
    const double choices[] = {0.0, -0.0, 1.0, 2.0, 0.5, -3.0};
    return b.constant(choices[coin(6)], f64);
  }
  int positive(int x) { return b.add(b.unary(op::abs, x), b.constant(1, f64)); }

  /// One random op on operands from the pool.
  int step() {
    const int x = pick();
    switch (coin(16)) {
      case 0: {
        const op u[] = {op::neg, op::abs, op::tanh, op::sigmoid, op::relu, op::gelu, op::gelu_tanh,
                        op::silu, op::sin, op::cos, op::erf};
        return b.unary(u[coin(11)], x);
      }
      case 1: return b.unary(op::exp, b.unary(op::tanh, x));
      case 2: {
        const op u[] = {op::log, op::sqrt, op::rsqrt, op::reciprocal};
        return b.unary(u[coin(4)], positive(x));
      }
      case 3:
      case 4: {
        const op o[] = {op::add, op::sub, op::mul, op::max, op::min};
        const int y = coin(4) == 0 ? constant() : pick();
        return coin(2) ? b.binary(o[coin(5)], x, y) : b.binary(o[coin(5)], y, x);
      }
      case 5: return b.div(x, positive(pick()));
      case 6: return b.where(b.binary(op::gt, x, pick()), x, pick());
      case 7: {  // a reduction that keeps the rank, so the result still broadcasts
        const op r[] = {op::sum, op::mean, op::amax, op::amin};
        const int rank = b.at(x).shape.rank;
        return b.reduce(r[coin(4)], x, 1u << coin(rank), true);
      }
      case 8: {
        node n = passes::builder::make(coin(2) ? op::softmax : op::log_softmax, f64, b.at(x).shape);
        n.in[0] = x;
        n.axis = coin(b.at(x).shape.rank);
        return b.emit(n);
      }
      case 9: {  // a repeated subexpression, operands swapped: CSE must merge it
        const int y = pick();
        b.add(x, y);
        return b.add(y, x);
      }
      case 10: {
        const int rank = b.at(x).shape.rank;
        node n = passes::builder::make(op::var, f64, reduce_shape(b.at(x).shape, 1u << 1, true).shape);
        n.in[0] = x;
        n.axes = rank == 2 ? 2u : 1u;
        n.keepdim = true;
        n.value = 1;
        n.shape = reduce_shape(b.at(x).shape, n.axes, true).shape;
        return b.emit(n);
      }
      case 11: return b.unary(op::neg, b.unary(op::neg, x));
      case 12: return b.mul(x, b.constant(1, f64));
      case 13: {  // transpose twice (composes to the identity) through a reshape round trip
        const dims s = b.at(x).shape;
        return b.reshape(b.transpose(b.transpose(b.reshape(x, s))), s);
      }
      default: {
        const int y = pick();
        return b.add(b.mul(x, constant()), y);
      }
    }
  }
};

double compare(const any_tensor& a, const any_tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (index_t i = 0; i < a.numel(); ++i) {
    const double p = a.data<double>()[i], q = b.data<double>()[i];
    if (std::isnan(p) || std::isnan(q)) {
      REQUIRE(std::isnan(p) == std::isnan(q));
      continue;
    }
    worst = std::max(worst, std::fabs(p - q) / (1 + std::fabs(p)));
  }
  return worst;
}

}  // namespace

TEST_CASE("random graphs: optimised == unoptimised under the eager backend") {
  int total_before = 0, total_after = 0, total_kernels = 0;
  for (int trial = 0; trial < 300; ++trial) {
    random_graph r{{}, kt::rng(), {}};
    const index_t rows = 1 + r.coin(5), cols = 1 + r.coin(6);
    r.b.g.leaves = 3;
    r.pool = {r.leaf("a", dims{rows, cols}, 0), r.leaf("b", dims{1, cols}, 1), r.leaf("c", dims{rows, 1}, 2)};
    const int steps = 1 + r.coin(30);
    for (int s = 0; s < steps; ++s) r.pool.push_back(r.step());
    const int out = r.b.add(r.pool.back(), r.pool[r.pool.size() / 2]);
    r.b.g.outputs = {out};
    const graph g = r.b.g;
    INFO("trial " << trial << ", " << g.nodes.size() << " nodes");
    REQUIRE(check_graph(g) == nullptr);
    const graph opt = passes::to_primitives(g);
    REQUIRE(check_graph(opt) == nullptr);
    for (const node& n : opt.nodes) REQUIRE(passes::is_primitive(n.o));
    const std::vector<any_tensor> leaves = {kt::random<double, 2>({rows, cols}).any(),
                                            kt::random<double, 2>({1, cols}).any(),
                                            kt::random<double, 2>({rows, 1}).any()};
    const any_tensor want = eager::run(g, leaves)[0];
    REQUIRE(compare(want, eager::run(opt, leaves)[0]) < 1e-9);
    // the fused, planned schedule, run kernel by kernel with only what the plan keeps
    const passes::schedule sched = passes::plan(passes::fuse(opt));
    REQUIRE(compare(want, eager::run_schedule(sched, leaves)[0]) < 1e-9);
    total_kernels += static_cast<int>(sched.kernels.size());
    total_before += static_cast<int>(g.nodes.size());
    total_after += static_cast<int>(opt.nodes.size());
  }
  MESSAGE("300 random graphs: " << total_before << " nodes before, " << total_after << " after, "
                                 << total_kernels << " kernels");
}
