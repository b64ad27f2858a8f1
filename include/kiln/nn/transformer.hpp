// kiln/nn/transformer.hpp: the modules of a transformer, with PyTorch's parameter names and
// initial values, so that a state_dict moves between the two.
//
//   nn::layer_norm<"ln", 128>                         torch.nn.LayerNorm(128)
//   nn::rms_norm<"norm", 128>                         torch.nn.RMSNorm(128)
//   nn::multihead_attention<"attn", 128, 4, causal>    torch.nn.MultiheadAttention(128, 4,
//                                                     batch_first=True), self-attention
//   nn::transformer_encoder_layer<"layer", 128, 4, 512, opts>   torch.nn.TransformerEncoderLayer
//   nn::positional_embedding<"wpe", 256, 128>          a learned [positions, dim] table, added
//
// Inputs are [batch, tokens, dim] (batch_first); the batch may be dyn, tokens and dim are static.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "modules.hpp"

namespace kiln::nn {

/// torch.nn.LayerNorm(Dim) over the last axis: weight [Dim] (ones) "<Name>.weight", bias [Dim]
/// (zeros) "<Name>.bias", eps 1e-5.
template <fixed_string Name, index_t Dim, dtype D = dtype::f32>
struct layer_norm {
  static_assert(Dim > 0, "kiln: nn::layer_norm needs a static, positive size");
  using weight = param<Name + ".weight", D, shape<Dim>>;
  using bias = param<Name + ".bias", D, shape<Dim>>;
  using params = std::tuple<weight, bias>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return kiln::detail::layer_norm_literal_eps<std::bit_cast<std::uint64_t>(1e-5)>(x, weight{}, bias{});
  }
  static void init(state_dict& sd, std::uint64_t) {
    init::constant(sd.at(std::string(weight::name.view())), 1.0);
    init::zeros(sd.at(std::string(bias::name.view())));
  }
};

/// torch.nn.RMSNorm(Dim): x / sqrt(mean(x^2, last axis) + eps) * weight, weight [Dim] (ones)
/// "<Name>.weight"; eps is the dtype's machine epsilon, PyTorch's default.
template <fixed_string Name, index_t Dim, dtype D = dtype::f32>
struct rms_norm {
  static_assert(Dim > 0, "kiln: nn::rms_norm needs a static, positive size");
  using weight = param<Name + ".weight", D, shape<Dim>>;
  using params = std::tuple<weight>;
  static constexpr double eps =
      D == dtype::f64 ? std::numeric_limits<double>::epsilon()
                      : D == dtype::bf16 ? 0.0078125 : static_cast<double>(std::numeric_limits<float>::epsilon());

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    // (eps a literal: the expression stays pure, traced once wherever it is used)
    return x * rsqrt(mean<-1>(x * x, keepdim) + ex::literal<D, std::bit_cast<std::uint64_t>(eps)>{}) * weight{};
  }
  static void init(state_dict& sd, std::uint64_t) { init::constant(sd.at(std::string(weight::name.view())), 1.0); }
};

/// A learned positional embedding: weight [Positions, Dim] "<Name>.weight", normal(0, 0.02) as
/// GPT-2 initialises its wpe; x [batch, tokens, Dim] (tokens <= Positions) gets the first
/// `tokens` rows added.
template <fixed_string Name, index_t Positions, index_t Dim, dtype D = dtype::f32>
struct positional_embedding {
  static_assert(Positions > 0 && Dim > 0, "kiln: nn::positional_embedding needs static, positive extents");
  using weight = param<Name + ".weight", D, shape<Positions, Dim>>;
  using params = std::tuple<weight>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    using E = decltype(as_expr(x));
    constexpr int r = E::shape.rank;
    static_assert(r >= 2 && E::shape.e[r - 2] != dyn && E::shape.e[r - 2] <= Positions && E::shape.e[r - 1] == Dim,
                  "kiln: nn::positional_embedding needs [..., tokens, Dim] with static tokens <= Positions");
    return x + slice<0, 0, E::shape.e[r - 2]>(weight{});
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    init::normal(sd.at(std::string(weight::name.view())), 0.0, 0.02, seed, stream_of(weight::name.view()));
  }
};

/// Options of the attention modules (a structural type: a template argument).
struct attention_options {
  bool causal = false;      ///< mask key j for query i where j > i (a decoder)
  bool norm_first = false;  ///< pre-norm (GPT-2, PyTorch's norm_first=True) or post-norm
  bool gelu = false;        ///< the feed-forward activation: GELU, or ReLU (PyTorch's default)
  index_t dropout = 0;      ///< percent, on the attention output and in the feed-forward (training mode)
};
inline constexpr attention_options causal_attention{.causal = true};

/// torch.nn.MultiheadAttention(Dim, Heads, batch_first=True) as self-attention: in_proj_weight
/// [3 Dim, Dim] (Xavier-uniform) and in_proj_bias [3 Dim] (zeros), "<Name>.in_proj_weight" and
/// "<Name>.in_proj_bias"; out_proj.weight [Dim, Dim] (uniform +-1/sqrt(Dim)) and out_proj.bias
/// (zeros). x [batch, tokens, Dim] -> the same shape, through the fused attention op.
template <fixed_string Name, index_t Dim, index_t Heads, attention_options Opt = attention_options{},
          dtype D = dtype::f32>
struct multihead_attention {
  static_assert(Dim > 0 && Heads > 0 && Dim % Heads == 0, "kiln: nn::multihead_attention needs Heads to divide Dim");
  static constexpr index_t head_dim = Dim / Heads;
  using in_proj_weight = param<Name + ".in_proj_weight", D, shape<3 * Dim, Dim>>;
  using in_proj_bias = param<Name + ".in_proj_bias", D, shape<3 * Dim>>;
  using out_proj = linear<Name + ".out_proj", Dim, Dim, D>;
  using params = decltype(std::tuple_cat(std::tuple<in_proj_weight, in_proj_bias>{}, typename out_proj::params{}));

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    using E = decltype(as_expr(x));
    static_assert(E::shape.rank == 3 && E::shape.e[1] != dyn && E::shape.e[2] == Dim,
                  "kiln: nn::multihead_attention needs x [batch, tokens, Dim] with static tokens");
    constexpr index_t t = E::shape.e[1];
    // [b, t, 3 Dim], read three times: shared, or tracing would copy x's whole expression
    // (impure: C++ scalars such as a LayerNorm's eps) into each use
    const auto qkv = share(kiln::linear(x, in_proj_weight{}, in_proj_bias{}));
    // [b, t, Dim] -> [b, Heads, t, head_dim]
    const auto heads = [](const auto& y) { return permute<0, 2, 1, 3>(reshape<dyn, t, Heads, head_dim>(y)); };
    const auto o = scaled_dot_product_attention<Opt.causal>(heads(slice<2, 0, Dim>(qkv)), heads(slice<2, Dim, 2 * Dim>(qkv)),
                                                            heads(slice<2, 2 * Dim, 3 * Dim>(qkv)));
    return out_proj{}(reshape<dyn, t, Dim>(permute<0, 2, 1, 3>(o)));
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    init::xavier_uniform(sd.at(std::string(in_proj_weight::name.view())), Dim, 3 * Dim, seed,
                         stream_of(in_proj_weight::name.view()));
    init::zeros(sd.at(std::string(in_proj_bias::name.view())));
    out_proj::init(sd, seed);
    init::zeros(sd.at(std::string(out_proj::bias::name.view())));
  }
};

/// torch.nn.TransformerEncoderLayer(Dim, Heads, FF, batch_first=True) with PyTorch's parameter
/// names: self_attn (multihead_attention), linear1 [FF, Dim], linear2 [Dim, FF], norm1, norm2.
/// Post-norm: x = norm1(x + attn(x)); x = norm2(x + ff(x)). Pre-norm (Opt.norm_first):
/// x = x + attn(norm1(x)); x = x + ff(norm2(x)). ff(x) = linear2(act(linear1(x))). With
/// Opt.causal it is a decoder-only (GPT) block. Dropout (Opt.dropout percent) on the attention's
/// output, after the activation and on the feed-forward's output, in training mode only.
template <fixed_string Name, index_t Dim, index_t Heads, index_t FF, attention_options Opt = attention_options{},
          dtype D = dtype::f32>
struct transformer_encoder_layer {
  using self_attn = multihead_attention<Name + ".self_attn", Dim, Heads, Opt, D>;
  using linear1 = linear<Name + ".linear1", Dim, FF, D>;
  using linear2 = linear<Name + ".linear2", FF, Dim, D>;
  using norm1 = layer_norm<Name + ".norm1", Dim, D>;
  using norm2 = layer_norm<Name + ".norm2", Dim, D>;
  using params = params_of<self_attn, linear1, linear2, norm1, norm2>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return forward<false>(x);
  }
  template <tensor_operand X>
  constexpr auto operator()(const X& x, training_t) const {
    return forward<true>(x);
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    self_attn::init(sd, seed);
    linear1::init(sd, seed);
    linear2::init(sd, seed);
    norm1::init(sd, seed);
    norm2::init(sd, seed);
  }

 private:
  template <bool Train, fixed_string Where, class Y>
  static constexpr auto drop(const Y& y) {
    if constexpr (Train && Opt.dropout > 0) return kiln::dropout<Name + Where, Opt.dropout>(y, seed_input{});
    else return as_expr(y);
  }
  template <bool Train, class Y>
  static constexpr auto ff(const Y& y) {
    const auto h = linear1{}(y);
    if constexpr (Opt.gelu) return drop<Train, ".dropout2">(linear2{}(drop<Train, ".dropout">(kiln::gelu(h))));
    else return drop<Train, ".dropout2">(linear2{}(drop<Train, ".dropout">(kiln::relu(h))));
  }
  // (x and h are each read twice: shared, so that a stack of layers traces linearly, not 4^n)
  template <bool Train, class X>
  static constexpr auto forward(const X& x_) {
    const auto x = share(x_);
    if constexpr (Opt.norm_first) {
      const auto h = share(x + drop<Train, ".dropout1">(self_attn{}(norm1{}(x))));
      return h + ff<Train>(norm2{}(h));
    } else {
      const auto h = share(norm1{}(x + drop<Train, ".dropout1">(self_attn{}(x))));
      return norm2{}(h + ff<Train>(h));
    }
  }
};

}  // namespace kiln::nn
