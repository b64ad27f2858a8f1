// bench/kiln_rows.cpp: kiln's rows of the CPU suite. Each workload is written once, as a kiln
// expression on named placeholders (extents `dyn`, so that --quick can shrink them) plus the
// feeds that bind the shared inputs by name. kiln-eager runs it with kiln::eval (the eager
// reference backend, one node at a time, single-threaded); its output is what every other row
// is compared with. kiln is the CPU backend (kiln::compile, the fused plan): see cpu_backend below.
#include <kiln/kiln.hpp>

#include <array>
#include <cstring>
#include <initializer_list>
#include <stdexcept>

#include "cpu_common.hpp"

namespace kb {
namespace {

using namespace kiln;

using feeds = std::initializer_list<feed>;

// A kiln tensor holding a copy of an input buffer (kiln tensors own their storage).
template <int R>
tensor<float, R> copy_of(const fbuf& b, const std::array<index_t, R>& shape) {
  tensor<float, R> t(shape);
  if (t.numel() != b.size()) throw std::logic_error("kiln bench: input size mismatch");
  std::memcpy(t.data(), b.data(), static_cast<std::size_t>(b.size()) * sizeof(float));
  return t;
}

// Runs f() (one evaluation, returning a kiln tensor) and keeps the result alive for out().
template <class Fn>
struct kiln_runner final : runner {
  explicit kiln_runner(Fn f) : f_(std::move(f)) {}
  void run() override {
    y_ = f_();
    if (!y_.is_contiguous()) throw std::logic_error("kiln bench: the result is not contiguous");
  }
  const float* out() const override { return y_.data(); }

 private:
  Fn f_;
  decltype(std::declval<Fn&>()()) y_;
};
template <class Fn>
std::unique_ptr<runner> make_runner(Fn f) {
  return std::make_unique<kiln_runner<Fn>>(std::move(f));
}

enum class backend { eager, cpu };

// ---- kiln cpu ------------------------------------------------------------------------------
// The CPU backend: kiln::compile(e) (kiln::cpu::backend) freezes the expression's plan at compile
// time; the runner holds the compiled object and calls it with the workload's inputs bound by
// name, as the eager line in pick() does, into the output tensor of its previous call. Its thread count is
// KILN_NUM_THREADS, which bench_cpu and bench/run.sh set to the suite's --threads.
constexpr bool cpu_built = true;
template <class E, class Bind>
std::unique_ptr<runner> cpu_backend(const E& e, Bind bind) {
  // the output is written into the runner's tensor from the second call on (as the peers write
  // into preallocated outputs), and the plan's scratch buffers stay mapped between calls
  return make_runner([fn = kiln::compile(e), bind, outs = std::vector<any_tensor>{}]() mutable {
    return bind([&](feeds f) {
      fn(f, outs);
      return decltype(fn(f))(outs[0]);
    });
  });
}
constexpr const char* cpu_missing =
    "not available: the CPU backend, kiln::compile(expr, kiln::cpu), is not built yet";

template <class E, class Bind>
std::unique_ptr<runner> pick(backend be, const E& e, Bind bind) {
  if (be == backend::cpu) return cpu_backend(e, bind);
  return make_runner([e, bind] { return bind([&e](feeds f) { return kiln::eval(e, f, kiln::eager::backend); }); });
}

std::unique_ptr<runner> make(backend be, const workload& w) {
  const auto& in = w.in;
  const index_t m = w.m, n = w.n, k = w.k;
  switch (w.what) {
    case kind::gelu_chain: {
      auto x = input<"x", f32, shape<dyn>>{};
      auto a = input<"a", f32, shape<dyn>>{};
      auto b = input<"b", f32, shape<dyn>>{};
      auto tx = copy_of<1>(in[0], {n}), ta = copy_of<1>(in[1], {n}), tb = copy_of<1>(in[2], {n});
      return pick(be, gelu(x * a + b), [=](auto&& run) { return run({{"x", tx}, {"a", ta}, {"b", tb}}); });
    }
    case kind::gelu_tanh_chain: {
      auto x = input<"x", f32, shape<dyn>>{};
      auto a = input<"a", f32, shape<dyn>>{};
      auto b = input<"b", f32, shape<dyn>>{};
      auto tx = copy_of<1>(in[0], {n}), ta = copy_of<1>(in[1], {n}), tb = copy_of<1>(in[2], {n});
      return pick(be, gelu_tanh(x * a + b), [=](auto&& run) { return run({{"x", tx}, {"a", ta}, {"b", tb}}); });
    }
    case kind::softmax: {
      auto x = input<"x", f32, shape<dyn, dyn>>{};
      auto tx = copy_of<2>(in[0], {m, n});
      return pick(be, softmax(x), [=](auto&& run) { return run({{"x", tx}}); });
    }
    case kind::layer_norm: {
      auto x = input<"x", f32, shape<dyn, dyn>>{};
      auto g = param<"gamma", f32, shape<dyn>>{};
      auto b = param<"beta", f32, shape<dyn>>{};
      auto tx = copy_of<2>(in[0], {m, n});
      auto tg = copy_of<1>(in[1], {n}), tb = copy_of<1>(in[2], {n});
      return pick(be, layer_norm(x, g, b, layer_norm_eps),
                  [=](auto&& run) { return run({{"x", tx}, {"gamma", tg}, {"beta", tb}}); });
    }
    case kind::matmul: {
      auto a = input<"a", f32, shape<dyn, dyn>>{};
      auto b = input<"b", f32, shape<dyn, dyn>>{};
      auto ta = copy_of<2>(in[0], {m, k}), tb = copy_of<2>(in[1], {k, n});
      return pick(be, matmul(a, b), [=](auto&& run) { return run({{"a", ta}, {"b", tb}}); });
    }
    case kind::linear_gelu: {
      auto x = input<"x", f32, shape<dyn, dyn>>{};
      auto wt = param<"w", f32, shape<dyn, dyn>>{};
      auto bias = param<"bias", f32, shape<dyn>>{};
      auto tx = copy_of<2>(in[0], {m, k}), tw = copy_of<2>(in[1], {k, n});
      auto tb = copy_of<1>(in[2], {n});
      return pick(be, gelu(matmul(x, wt) + bias),
                  [=](auto&& run) { return run({{"x", tx}, {"w", tw}, {"bias", tb}}); });
    }
    case kind::mlp: {
      auto x = input<"x", f32, shape<dyn, mlp_in>>{};
      auto w1 = param<"w1", f32, shape<mlp_in, mlp_hidden>>{};
      auto b1 = param<"b1", f32, shape<mlp_hidden>>{};
      auto w2 = param<"w2", f32, shape<mlp_hidden, mlp_hidden>>{};
      auto b2 = param<"b2", f32, shape<mlp_hidden>>{};
      auto w3 = param<"w3", f32, shape<mlp_hidden, mlp_out>>{};
      auto b3 = param<"b3", f32, shape<mlp_out>>{};
      auto logits = matmul(relu(matmul(relu(matmul(x, w1) + b1), w2) + b2), w3) + b3;
      auto tx = copy_of<2>(in[0], {m, mlp_in});
      auto t1 = copy_of<2>(in[1], {mlp_in, mlp_hidden}), t2 = copy_of<2>(in[3], {mlp_hidden, mlp_hidden});
      auto t3 = copy_of<2>(in[5], {mlp_hidden, mlp_out});
      auto tb1 = copy_of<1>(in[2], {mlp_hidden}), tb2 = copy_of<1>(in[4], {mlp_hidden});
      auto tb3 = copy_of<1>(in[6], {mlp_out});
      return pick(be, logits, [=](auto&& run) {
        return run({{"x", tx}, {"w1", t1}, {"b1", tb1}, {"w2", t2}, {"b2", tb2}, {"w3", t3}, {"b3", tb3}});
      });
    }
  }
  return nullptr;
}

}  // namespace

const impl kiln_eager_impl{
    "kiln-eager", [](int) { return 1; },
    [](const workload& w, int) { return make(backend::eager, w); }, [](kind) -> const char* { return nullptr; }};

const impl kiln_cpu_impl{
    "kiln", [](int t) { return t; },  // KILN_NUM_THREADS, set to --threads by bench_cpu and run.sh
    [](const workload& w, int) { return make(backend::cpu, w); },
    [](kind) -> const char* { return cpu_built ? nullptr : cpu_missing; }};

}  // namespace kb
