// The transformer modules (nn/transformer.hpp): PyTorch's parameter names, and values against
// plain loops in double written from the definitions (PyTorch's MultiheadAttention and
// TransformerEncoderLayer, post- and pre-norm, causal); gradients against central differences;
// the CPU backend against eager in f32. Fresh random inputs and parameters.
#include "attention_reference.hpp"
#include "gradcheck.hpp"

#include <kiln/nn/transformer.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace kiln;

namespace {

constexpr index_t B = 2, T = 6, E = 8, H = 2, F = 12;
using X = input<"x", f64, shape<B, T, E>>;
using vec = std::vector<double>;

/// y [n, out] = x [n, in] w^T + b, w [out, in].
vec linear_ref(const vec& x, const vec& w, const vec& b, index_t n, index_t in, index_t out) {
  vec y(static_cast<std::size_t>(n * out));
  for (index_t i = 0; i < n; ++i)
    for (index_t o = 0; o < out; ++o) {
      double acc = b[static_cast<std::size_t>(o)];
      for (index_t c = 0; c < in; ++c) acc += x[static_cast<std::size_t>(i * in + c)] * w[static_cast<std::size_t>(o * in + c)];
      y[static_cast<std::size_t>(i * out + o)] = acc;
    }
  return y;
}

vec layer_norm_ref(const vec& x, const vec& g, const vec& b, index_t n, index_t d) {
  vec y(x.size());
  for (index_t i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (index_t c = 0; c < d; ++c) mu += x[static_cast<std::size_t>(i * d + c)] / static_cast<double>(d);
    for (index_t c = 0; c < d; ++c) var += std::pow(x[static_cast<std::size_t>(i * d + c)] - mu, 2) / static_cast<double>(d);
    for (index_t c = 0; c < d; ++c)
      y[static_cast<std::size_t>(i * d + c)] =
          (x[static_cast<std::size_t>(i * d + c)] - mu) / std::sqrt(var + 1e-5) * g[static_cast<std::size_t>(c)] + b[static_cast<std::size_t>(c)];
  }
  return y;
}

vec add(vec a, const vec& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

/// PyTorch's self-attention (batch_first) from the parameters in sd under `name`.
vec mha_ref(const vec& x, const nn::state_dict& sd, const std::string& name, bool causal) {
  const index_t dh = E / H;
  const vec qkv = linear_ref(x, kt::values(sd.at(name + ".in_proj_weight")), kt::values(sd.at(name + ".in_proj_bias")),
                             B * T, E, 3 * E);
  vec q(static_cast<std::size_t>(B * H * T * dh)), k(q.size()), v(q.size());
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t h = 0; h < H; ++h)
        for (index_t c = 0; c < dh; ++c) {
          const auto src = static_cast<std::size_t>((b * T + t) * 3 * E + h * dh + c);
          const auto dst = static_cast<std::size_t>(((b * H + h) * T + t) * dh + c);
          q[dst] = qkv[src];
          k[dst] = qkv[src + static_cast<std::size_t>(E)];
          v[dst] = qkv[src + static_cast<std::size_t>(2 * E)];
        }
  const vec o = kt::attention_by_loops(
      kt::problem{B, H, H, T, T, dh, dh}, q, k, v, 1 / std::sqrt(static_cast<double>(dh)),
      [&](index_t, index_t, index_t i, index_t j) { return !causal || j <= i; }, kt::nothing_added);
  vec merged(x.size());  // [b, h, t, dh] -> [b, t, h dh]
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h)
      for (index_t t = 0; t < T; ++t)
        for (index_t c = 0; c < dh; ++c)
          merged[static_cast<std::size_t>((b * T + t) * E + h * dh + c)] = o[static_cast<std::size_t>(((b * H + h) * T + t) * dh + c)];
  return linear_ref(merged, kt::values(sd.at(name + ".out_proj.weight")), kt::values(sd.at(name + ".out_proj.bias")), B * T, E, E);
}

vec layer_ref(const vec& x, const nn::state_dict& sd, const std::string& n, bool norm_first, bool causal, bool gelu) {
  const auto norm = [&](const vec& y, const char* which) {
    return layer_norm_ref(y, kt::values(sd.at(n + which + ".weight")), kt::values(sd.at(n + which + ".bias")), B * T, E);
  };
  const auto ff = [&](const vec& y) {
    vec h = linear_ref(y, kt::values(sd.at(n + ".linear1.weight")), kt::values(sd.at(n + ".linear1.bias")), B * T, E, F);
    for (double& z : h) z = gelu ? 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))) : std::max(z, 0.0);
    return linear_ref(h, kt::values(sd.at(n + ".linear2.weight")), kt::values(sd.at(n + ".linear2.bias")), B * T, F, E);
  };
  if (norm_first) {
    const vec h = add(x, mha_ref(norm(x, ".norm1"), sd, n + ".self_attn", causal));
    return add(h, ff(norm(h, ".norm2")));
  }
  const vec h = norm(add(x, mha_ref(x, sd, n + ".self_attn", causal)), ".norm1");
  return norm(add(h, ff(h)), ".norm2");
}

/// Parameters drawn at random (the initial LayerNorm weights are ones and biases zeros, which
/// would not test their wiring).
template <class P>
nn::param_set<P> random_params() {
  nn::param_set<P> ps;
  nn::state_dict sd = ps;
  for (auto& [name, t] : sd) t.copy_from(kt::random_f64(t.shape(), -0.8, 0.8));
  return ps;
}

}  // namespace

TEST_CASE("transformer modules: PyTorch's parameter names and initial values") {
  using layer = nn::transformer_encoder_layer<"enc", E, H, F, nn::attention_options{.norm_first = true}, f64>;
  const nn::state_dict sd = nn::make_params<layer>(3);
  std::set<std::string> names;
  for (const auto& [name, t] : sd) names.insert(name);
  CHECK(names == std::set<std::string>{"enc.self_attn.in_proj_weight", "enc.self_attn.in_proj_bias",
                                       "enc.self_attn.out_proj.weight", "enc.self_attn.out_proj.bias", "enc.linear1.weight",
                                       "enc.linear1.bias", "enc.linear2.weight", "enc.linear2.bias", "enc.norm1.weight",
                                       "enc.norm1.bias", "enc.norm2.weight", "enc.norm2.bias"});
  CHECK(sd.at("enc.self_attn.in_proj_weight").shape() == dims{3 * E, E});
  // Xavier-uniform in_proj: bound sqrt(6 / (E + 3E)); biases zero; LayerNorm ones and zeros
  const double bound = std::sqrt(6.0 / (4.0 * E));
  double largest = 0;
  for (double w : kt::values(sd.at("enc.self_attn.in_proj_weight"))) largest = std::max(largest, std::abs(w));
  CHECK(largest <= bound);
  CHECK(largest > 0.8 * bound);
  for (double z : kt::values(sd.at("enc.self_attn.in_proj_bias"))) CHECK(z == 0);
  for (double z : kt::values(sd.at("enc.self_attn.out_proj.bias"))) CHECK(z == 0);
  for (double z : kt::values(sd.at("enc.norm2.weight"))) CHECK(z == 1);
}

TEST_CASE("transformer modules: multihead attention and encoder layers (post-norm, pre-norm causal) against loops") {
  const any_tensor x = kt::random_f64(dims{B, T, E});
  const vec xv = kt::values(x);
  {
    using attn = nn::multihead_attention<"attn", E, H, nn::causal_attention, f64>;
    const auto ps = random_params<attn::params>();
    kt::check_values(eval(attn{}(X{}), X{} = x, ps).any(), mha_ref(xv, ps, "attn", true), 1e-12);
  }
  {
    using layer = nn::transformer_encoder_layer<"enc", E, H, F, nn::attention_options{}, f64>;
    const auto ps = random_params<layer::params>();
    kt::check_values(eval(layer{}(X{}), X{} = x, ps).any(), layer_ref(xv, ps, "enc", false, false, false), 1e-12);
  }
  {
    using layer = nn::transformer_encoder_layer<"dec", E, H, F, nn::attention_options{.causal = true, .norm_first = true, .gelu = true}, f64>;
    const auto ps = random_params<layer::params>();
    kt::check_values(eval(layer{}(X{}), X{} = x, ps).any(), layer_ref(xv, ps, "dec", true, true, true), 1e-12);
  }
}

TEST_CASE("transformer modules: rms_norm and the positional embedding against loops") {
  using norm = nn::rms_norm<"rms", E, f64>;
  using pos = nn::positional_embedding<"wpe", 10, E, f64>;
  const any_tensor x = kt::random_f64(dims{B, T, E});
  const auto ns = random_params<norm::params>();
  const auto ps = random_params<pos::params>();
  const vec xv = kt::values(x), w = kt::values(ns.get<norm::weight>().any()), p = kt::values(ps.get<pos::weight>().any());
  vec want(xv.size()), want_pos(xv.size());
  for (index_t i = 0; i < B * T; ++i) {
    double ms = 0;
    for (index_t c = 0; c < E; ++c) ms += xv[static_cast<std::size_t>(i * E + c)] * xv[static_cast<std::size_t>(i * E + c)] / E;
    for (index_t c = 0; c < E; ++c) {
      const auto at = static_cast<std::size_t>(i * E + c);
      want[at] = xv[at] / std::sqrt(ms + std::numeric_limits<double>::epsilon()) * w[static_cast<std::size_t>(c)];
      want_pos[at] = xv[at] + p[static_cast<std::size_t>(i % T * E + c)];  // row t of the table
    }
  }
  kt::check_values(eval(norm{}(X{}), X{} = x, ns).any(), want, 1e-12);
  kt::check_values(eval(pos{}(X{}), X{} = x, ps).any(), want_pos, 1e-12);
}

TEST_CASE("transformer modules: a causal pre-norm block's gradients (central differences; CPU against eager in f32)") {
  using layer = nn::transformer_encoder_layer<"blk", E, H, F, nn::attention_options{.causal = true, .norm_first = true, .gelu = true}, f64>;
  const auto ps = random_params<layer::params>();
  const nn::state_dict sd = ps;
  std::vector<feed> f{{"x", kt::random_f64(dims{B, T, E})}};
  for (const auto& [name, t] : sd) f.push_back({name, t});
  kt::gradcheck<X>(layer{}(X{}), f);  // (the parameters' gradients: CPU against eager, below)

  using layer32 = nn::transformer_encoder_layer<"blk", E, H, F, nn::causal_attention>;
  using X32 = input<"x", f32, shape<dyn, T, E>>;
  const auto y = layer32{}(X32{});
  const auto step = outputs(y, grad(sum(y * y), wrt(X32{}, layer32::self_attn::in_proj_weight{}, layer32::linear1::weight{},
                                                     layer32::norm1::weight{}, layer32::linear2::bias{})));
  const auto p32 = nn::make_params<layer32>(5);
  const auto x32 = kt::random<float, 3>({3, T, E});
  const auto cpu = eval_all(step, X32{} = x32, p32);
  const auto ref = eval_all(step, X32{} = x32, p32, eager::backend);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(kt::difference(ref[i], cpu[i]) < 1e-5);
  }
}
