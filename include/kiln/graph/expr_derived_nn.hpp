// kiln/graph/expr_derived_nn.hpp: torch.nn.functional's layers that kiln writes from its other
// ops at capture (as graph/expr_derived.hpp does the pointwise, shape and creation ones):
// conv1d and conv_transpose2d (through conv2d, matmul and fold), batch_norm (eval and training,
// with the running statistics), group_norm, interpolate (nearest, bilinear) and max/min with
// their indices. Gradients, fusion and every backend come from the parts; tests/conformance
// checks them against PyTorch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <tuple>
#include <utility>

#include "expr_derived.hpp"

namespace kiln {

namespace detail {
/// x's values along axis 1 (a vector [C]) shaped to broadcast against a rank-R tensor [N, C, ...].
template <int R, class V>
constexpr auto per_channel(const V& v) {
  using E = expr_t<V>;
  static_assert(E::shape.rank == 1, "kiln: a per-channel operand must be a vector [C]");
  return reshape_dims<unit_but(R, 1, E::shape.e[0])>(v);
}
/// The reduction O over every axis of x but axis 1 (the channels), extents kept.
template <op O, class X, std::size_t... I>
constexpr auto over_all_but_channels(const X& x, std::index_sequence<I...>) {
  return reduce_op<O, true, (I == 0 ? 0 : static_cast<int>(I) + 1)...>(x);
}
template <op O, class X>
constexpr auto over_all_but_channels(const X& x) {
  return over_all_but_channels<O>(x, std::make_index_sequence<static_cast<std::size_t>(expr_t<X>::shape.rank - 1)>{});
}
/// The element count of one item of a batch: the extents after the first, multiplied.
constexpr index_t numel_after_batch(dims s) {
  index_t n = 1;
  for (int i = 1; i < s.rank; ++i) n *= s.e[i];
  return n;
}
/// Whether s is [N, C, ...] with static extents after N.
constexpr bool channels_static(dims s) {
  if (s.poisoned()) return true;
  if (s.rank < 2) return false;
  for (int i = 1; i < s.rank; ++i)
    if (s.e[i] == dyn) return false;
  return true;
}
}  // namespace detail

// ---- convolutions ---------------------------------------------------------------------------------

/// Two extents of a 2-D window, height and width; one value stands for both (PyTorch's int or
/// pair).
struct size2 {
  index_t h = 0, w = 0;
  constexpr size2() = default;
  constexpr size2(index_t both) : h(both), w(both) {}  // implicit: `.kernel = 3`
  constexpr size2(index_t height, index_t width) : h(height), w(width) {}
};

/// torch.nn.functional.unfold's and fold's arguments: kernel_size, stride, padding and
/// dilation, each one extent or {h, w}. As a template argument:
///   unfold<window_options{.kernel = {3, 2}, .stride = {2, 1}}>(x)
struct window_options {
  size2 kernel = 1, stride = 1, padding = 0, dilation = 1;
};
/// A window_options carried in one type for error messages.
template <window_options O> struct window_option_args {};

namespace detail {
constexpr window2d window_of(window_options o) {
  return {o.kernel.h, o.kernel.w, o.stride.h, o.stride.w, o.padding.h, o.padding.w, o.dilation.h, o.dilation.w};
}
}  // namespace detail

/// unfold with PyTorch's arguments per axis: [n, c, h, w] -> [n, c * kh * kw, ho * wo].
template <window_options O, tensor_operand X>
constexpr auto unfold(const X& x) {
  return detail::unfold_node<op::unfold, detail::window_of(O), false, window_option_args<O>>(x);
}
/// fold<H, W, options>(cols): col2im with PyTorch's arguments per axis, unfold's adjoint.
template <index_t H, index_t W, window_options O, tensor_operand X>
constexpr auto fold(const X& cols) {
  return detail::fold_node<detail::window_of(O), H, W, window_option_args<O>>(cols);
}


/// torch.nn.functional.conv1d<Stride, Padding, Dilation>(x, weight, bias) (one group):
/// x [n, c, l], weight [out, c, k], bias [out] -> [n, out, lo]; zero padding. Through conv2d
/// on x padded and viewed as [n, c, 1, l + 2 Padding].
template <index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1, tensor_operand X, tensor_operand Wt,
          tensor_operand B>
constexpr auto conv1d(const X& x, const Wt& weight, const B& bias) {
  using EX = detail::expr_t<X>;
  using EW = detail::expr_t<Wt>;
  static_assert(EX::shape.rank == 3 && EW::shape.rank == 3,
                "kiln::conv1d: x [n, c, l] and weight [out, c, k]");
  const auto padded = pad<Padding, Padding>(x);
  constexpr dims ps = detail::expr_t<decltype(padded)>::shape;
  const auto x4 = detail::reshape_dims<dims{ps.e[0], ps.e[1], 1, ps.e[2]}>(padded);
  const auto w4 = detail::reshape_dims<dims{EW::shape.e[0], EW::shape.e[1], 1, EW::shape.e[2]}>(weight);
  const auto y = conv2d<Stride, 0, Dilation>(x4, w4, bias);
  constexpr dims ys = detail::expr_t<decltype(y)>::shape;
  return detail::reshape_dims<dims{ys.e[0], ys.e[1], ys.e[3]}>(y);
}

/// torch.nn.functional.conv_transpose2d's arguments (one group): stride, padding,
/// output_padding and dilation, each one extent or {h, w}. As a template argument:
///   conv_transpose2d<conv_transpose2d_options{.stride = {2, 1}, .output_padding = {1, 0}}>(x, w, b)
struct conv_transpose2d_options {
  size2 stride = 1, padding = 0, output_padding = 0, dilation = 1;
};

namespace detail {
/// The output extent of a transposed convolution along one axis of extent n, kernel k.
constexpr index_t transposed_extent(index_t n, index_t k, index_t s, index_t p, index_t op, index_t d) {
  return (n - 1) * s - 2 * p + d * (k - 1) + op + 1;
}
template <conv_transpose2d_options O, bool HasBias, class X, class Wt, class B>
constexpr auto conv_transpose2d_with(const X& x, const Wt& weight, const B& bias) {
  using EX = expr_t<X>;
  using EW = expr_t<Wt>;
  constexpr dims xs = EX::shape, ws = EW::shape;
  static_assert(xs.rank == 4 && ws.rank == 4, "kiln::conv_transpose2d: x [n, cin, h, w] and weight [cin, cout, kh, kw]");
  static_assert(xs.e[1] == ws.e[0], "kiln::conv_transpose2d: x's channels must be the weight's first extent");
  static_assert(xs.e[2] != dyn && xs.e[3] != dyn, "kiln::conv_transpose2d: static spatial extents");
  static_assert((O.output_padding.h < O.stride.h || O.output_padding.h < O.dilation.h) &&
                    (O.output_padding.w < O.stride.w || O.output_padding.w < O.dilation.w),
                "kiln::conv_transpose2d: the output padding must be below the stride or the dilation");
  constexpr index_t kh = ws.e[2], kw = ws.e[3], cout = ws.e[1];
  constexpr index_t ho = transposed_extent(xs.e[2], kh, O.stride.h, O.padding.h, O.output_padding.h, O.dilation.h);
  constexpr index_t wo = transposed_extent(xs.e[3], kw, O.stride.w, O.padding.w, O.output_padding.w, O.dilation.w);
  constexpr window_options win{{kh, kw}, O.stride, O.padding, O.dilation};
  const auto cols_of = transpose(reshape_dims<dims{ws.e[0], cout * kh * kw}>(weight));  // [cout kh kw, cin]
  const auto pixels = reshape_dims<dims{xs.e[0], xs.e[1], xs.e[2] * xs.e[3]}>(x);       // [n, cin, h w]
  const auto cols = matmul(cols_of, pixels);                                            // [n, cout kh kw, h w]
  if constexpr (HasBias) return fold<ho, wo, win>(cols) + per_channel<4>(bias);
  else return fold<ho, wo, win>(cols);
}
}  // namespace detail

/// torch.nn.functional.conv_transpose2d<Stride, Padding, OutputPadding, Dilation>(x, weight[,
/// bias]) (one group): x [n, cin, h, w], weight [cin, cout, kh, kw], bias [cout] -> [n, cout,
/// (h - 1) Stride - 2 Padding + Dilation (kh - 1) + OutputPadding + 1, ...]. The gradient of
/// conv2d with respect to its input: each input pixel's weights as columns (matmul), summed
/// into the output by fold (col2im).
template <index_t Stride = 1, index_t Padding = 0, index_t OutputPadding = 0, index_t Dilation = 1, tensor_operand X,
          tensor_operand Wt, tensor_operand B>
constexpr auto conv_transpose2d(const X& x, const Wt& weight, const B& bias) {
  return detail::conv_transpose2d_with<conv_transpose2d_options{Stride, Padding, OutputPadding, Dilation}, true>(
      x, weight, bias);
}
template <index_t Stride = 1, index_t Padding = 0, index_t OutputPadding = 0, index_t Dilation = 1, tensor_operand X,
          tensor_operand Wt>
constexpr auto conv_transpose2d(const X& x, const Wt& weight) {
  return detail::conv_transpose2d_with<conv_transpose2d_options{Stride, Padding, OutputPadding, Dilation}, false>(
      x, weight, 0);
}
/// conv_transpose2d with PyTorch's arguments per axis (conv_transpose2d_options).
template <conv_transpose2d_options O, tensor_operand X, tensor_operand Wt, tensor_operand B>
constexpr auto conv_transpose2d(const X& x, const Wt& weight, const B& bias) {
  return detail::conv_transpose2d_with<O, true>(x, weight, bias);
}
template <conv_transpose2d_options O, tensor_operand X, tensor_operand Wt>
constexpr auto conv_transpose2d(const X& x, const Wt& weight) {
  return detail::conv_transpose2d_with<O, false>(x, weight, 0);
}

// ---- normalisation ---------------------------------------------------------------------------

/// torch.nn.functional.batch_norm in evaluation mode: x [N, C, ...] normalised per channel by
/// the running statistics, (x - running_mean) / sqrt(running_var + eps) * weight + bias.
template <tensor_operand X, tensor_operand M, tensor_operand V, tensor_operand W, tensor_operand B>
constexpr auto batch_norm(const X& x, const M& running_mean, const V& running_var, const W& weight, const B& bias,
                          double eps = 1e-5) {
  static_assert(detail::channels_static(detail::expr_t<X>::shape), "kiln::batch_norm: x must be [N, C, ...], static but for N");
  constexpr int r = detail::expr_t<X>::shape.rank;
  const auto f = detail::as_float(x);
  const auto scale = rsqrt(detail::per_channel<r>(running_var) + eps) * detail::per_channel<r>(weight);
  return (f - detail::per_channel<r>(running_mean)) * scale + detail::per_channel<r>(bias);
}
/// torch.nn.functional.batch_norm in training mode: x normalised by its own statistics per
/// channel (the variance biased), and the running statistics moved toward them by `momentum`
/// (the variance unbiased), which PyTorch updates in place: std::tuple{y, new_running_mean,
/// new_running_var}, for a program to assign (e.g. as outputs of its training step).
template <tensor_operand X, tensor_operand M, tensor_operand V, tensor_operand W, tensor_operand B>
constexpr auto batch_norm_train(const X& x, const M& running_mean, const V& running_var, const W& weight,
                                const B& bias, double momentum = 0.1, double eps = 1e-5) {
  static_assert(detail::channels_static(detail::expr_t<X>::shape), "kiln::batch_norm_train: x must be [N, C, ...], static but for N");
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  constexpr dims c{E::shape.e[1]};
  const auto f = detail::as_float(x);
  const auto m = detail::over_all_but_channels<op::mean>(f);
  const auto d = f - m;
  const auto v = detail::over_all_but_channels<op::mean>(d * d);
  const auto y = d * rsqrt(v + eps) * detail::per_channel<r>(weight) + detail::per_channel<r>(bias);
  // the running statistics carry no gradient (PyTorch's are buffers)
  const auto batch_mean = detach(detail::reshape_dims<c>(m));
  const auto batch_var = detach(detail::reshape_dims<c>(detail::over_all_but_channels<op::var>(f)));
  const auto new_mean = as_expr(running_mean) * (1 - momentum) + batch_mean * momentum;
  const auto new_var = as_expr(running_var) * (1 - momentum) + batch_var * momentum;
  return std::tuple{y, new_mean, new_var};
}

/// torch.nn.functional.group_norm(x, Groups, weight, bias, eps): x [N, C, ...] normalised over
/// each group of C / Groups channels and the other axes (the variance biased), then scaled and
/// shifted per channel.
template <index_t Groups, tensor_operand X, tensor_operand W, tensor_operand B>
constexpr auto group_norm(const X& x, const W& weight, const B& bias, double eps = 1e-5) {
  static_assert(detail::channels_static(detail::expr_t<X>::shape), "kiln::group_norm: x must be [N, C, ...], static but for N");
  using E = detail::expr_t<X>;
  constexpr dims s = E::shape;
  constexpr int r = s.rank;
  static_assert(Groups > 0 && s.e[1] % Groups == 0, "kiln::group_norm: the groups must divide the channels");
  constexpr index_t per_group = detail::numel_after_batch(s) / Groups;
  const auto g = detail::reshape_dims<dims{s.e[0], Groups, per_group}>(detail::as_float(x));
  const auto d = g - mean<2>(g, keepdim);
  const auto y = d * rsqrt(mean<2>(d * d, keepdim) + eps);
  return detail::reshape_dims<s>(y) * detail::per_channel<r>(weight) + detail::per_channel<r>(bias);
}

// ---- resampling ------------------------------------------------------------------------------

/// interpolate's modes (torch.nn.functional.interpolate's `mode`; bilinear with
/// align_corners=False, its default).
enum class interpolation { nearest, bilinear };

namespace detail {
/// in / out in dtype D's arithmetic: PyTorch's scale from input to output positions when the
/// output's size is given (a compile-time constant: the index arithmetic below is pure, traced
/// once).
template <dtype D, index_t In, index_t Out>
inline constexpr auto resize_scale =
    lit<D, bits(D == dtype::f64 ? static_cast<double>(In) / static_cast<double>(Out)
                                : static_cast<double>(static_cast<float>(In) / static_cast<float>(Out)))>;
/// Nearest: source index min(floor(i * (in / out)), in - 1), the scale and product in x's float
/// dtype, as PyTorch computes them (i / 2 when out = 2 in).
template <int Axis, index_t Out, class X>
constexpr auto nearest_along(const X& x) {
  using E = expr_t<X>;
  constexpr index_t in = E::shape.e[Axis];
  static_assert(in != dyn && in > 0 && Out > 0, "kiln::interpolate: static, positive spatial extents");
  constexpr dtype d = E::dt;
  const auto i = cast<d>(arange<Out>());
  const auto src = min(cast<dtype::i64>(floor(i * resize_scale<d, in, Out>)), k<dtype::i64, in - 1>);
  return index_select<Axis>(x, src);
}
/// Bilinear along one axis (align_corners=False): source s = max(scale (i + 1/2) - 1/2, 0),
/// i0 = floor(s), i1 = min(i0 + 1, in - 1), weights 1 - (s - i0) and s - i0.
template <int Axis, index_t Out, class X>
constexpr auto linear_along(const X& x) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  constexpr index_t in = E::shape.e[Axis];
  static_assert(in != dyn && in > 0 && Out > 0, "kiln::interpolate: static, positive spatial extents");
  constexpr dtype d = E::dt;
  const auto half = k<d, 1, 2>;
  const auto i = cast<d>(arange<Out>());
  const auto raw = resize_scale<d, in, Out> * (i + half) - half;
  const auto src = where(lt(raw, k<d, 0>), k<d, 0>, raw);
  const auto i0 = cast<dtype::i64>(floor(src));
  const auto i1 = min(i0 + k<dtype::i64, 1>, k<dtype::i64, in - 1>);
  const auto w1 = src - floor(src);
  const auto w0 = k<d, 1> - w1;
  const auto a = index_select<Axis>(x, i0) * reshape_dims<unit_but(r, Axis, Out)>(w0);
  return a + index_select<Axis>(x, i1) * reshape_dims<unit_but(r, Axis, Out)>(w1);
}
}  // namespace detail

/// torch.nn.functional.interpolate(x, size=(H, W), mode) for x [N, C, h, w] (floats): nearest
/// (the default) or bilinear (align_corners=False).
template <index_t H, index_t W, interpolation Mode = interpolation::nearest, tensor_operand X>
constexpr auto interpolate(const X& x) {
  using E = detail::expr_t<X>;
  static_assert(E::shape.rank == 4, "kiln::interpolate: x [N, C, h, w]");
  static_assert(is_floating(E::dt), "kiln::interpolate: a floating point input");
  if constexpr (Mode == interpolation::nearest) return detail::nearest_along<3, W>(detail::nearest_along<2, H>(x));
  else return detail::linear_along<3, W>(detail::linear_along<2, H>(x));
}

// ---- pooling with options ----------------------------------------------------------------------

/// torch.nn.functional.max_pool2d's and avg_pool2d's arguments: kernel, stride (0: the kernel's),
/// padding (at most half the kernel), dilation (max only), ceil_mode (windows that start inside
/// the input or its leading padding may hang over the end), count_include_pad and
/// divisor_override (avg only; 0: none). As a template argument:
///   max_pool2d<pool2d_options{.kernel = {3, 2}, .stride = 2, .ceil_mode = true}>(x)
struct pool2d_options {
  size2 kernel = 1, stride = 0, padding = 0, dilation = 1;
  bool ceil_mode = false, count_include_pad = true;
  index_t divisor_override = 0;
};

/// A pool2d_options carried in one type for error messages.
template <pool2d_options O> struct pool_args {};

namespace detail {
constexpr pool2d_options with_stride(pool2d_options o) {
  if (o.stride.h == 0) o.stride.h = o.kernel.h;
  if (o.stride.w == 0) o.stride.w = o.kernel.w;
  return o;
}
/// PyTorch's output extent (pooling_output_shape): with ceil_mode the last window may hang over
/// the padded end but starts inside the input or its leading padding. 0: no window fits.
constexpr index_t pooled_extent(index_t n, index_t k, index_t s, index_t p, index_t d, bool ceil) {
  const index_t room = n + 2 * p - (d * (k - 1) + 1);
  if (room < 0) return 0;
  index_t out = (room + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (out - 1) * s >= n + p) --out;
  return out;
}
/// How far the last window reaches past the padded end (ceil_mode only).
constexpr index_t overhang(index_t n, index_t k, index_t s, index_t p, index_t d, bool ceil) {
  const index_t reach = (pooled_extent(n, k, s, p, d, ceil) - 1) * s + d * (k - 1) + 1;
  return reach > n + 2 * p ? reach - n - 2 * p : 0;
}
constexpr bool pool_options_fit(const dims& x, pool2d_options o, bool is_max) {
  if (x.poisoned()) return true;
  if (x.rank != 4 || x.e[1] == dyn || x.e[2] == dyn || x.e[3] == dyn) return false;
  const bool ranges = o.kernel.h >= 1 && o.kernel.w >= 1 && o.stride.h >= 1 && o.stride.w >= 1 &&
                      o.padding.h >= 0 && o.padding.w >= 0 && 2 * o.padding.h <= o.kernel.h &&
                      2 * o.padding.w <= o.kernel.w && o.dilation.h >= 1 && o.dilation.w >= 1 &&
                      o.divisor_override >= 0 && window2d{o.kernel.h, o.kernel.w, o.stride.h, o.stride.w, o.padding.h, o.padding.w, o.dilation.h, o.dilation.w}.valid();
  const bool kind = is_max ? o.count_include_pad && o.divisor_override == 0 : o.dilation.h == 1 && o.dilation.w == 1;
  return ranges && kind && pooled_extent(x.e[2], o.kernel.h, o.stride.h, o.padding.h, o.dilation.h, o.ceil_mode) >= 1 &&
         pooled_extent(x.e[3], o.kernel.w, o.stride.w, o.padding.w, o.dilation.w, o.ceil_mode) >= 1;
}
/// The number of elements avg_pool2d divides window i's sum by along one axis (extent n), as
/// PyTorch counts them: the window clipped to the padded axis, or to the input without
/// count_include_pad; i64 [Out].
template <index_t N, index_t K, index_t S, index_t P, bool IncludePad, index_t Out>
constexpr auto window_counts() {
  const auto start = arange<Out>() * k<dtype::i64, S> - k<dtype::i64, P>;
  if constexpr (IncludePad) return min(start + k<dtype::i64, K>, k<dtype::i64, N + P>) - start;
  else return min(start + k<dtype::i64, K>, k<dtype::i64, N>) - max(start, k<dtype::i64, 0>);
}
/// Whether every window along an axis counts K elements (so the divisor is the kernel's size).
constexpr bool full_windows(index_t n, index_t k, index_t s, index_t p, bool include_pad, bool ceil) {
  const index_t out = pooled_extent(n, k, s, p, 1, ceil);
  for (index_t i = 0; i < out; ++i) {
    const index_t start = i * s - p;
    const index_t end = include_pad ? std::min(start + k, n + p) : std::min(start + k, n);
    if (end - (include_pad ? start : std::max(start, index_t{0})) != k) return false;
  }
  return true;
}
template <pool2d_options O, bool IsMax, class X>
constexpr auto pool_with(const X& x) {
  using E = expr_t<X>;
  constexpr op o = IsMax ? op::max_pool2d : op::avg_pool2d;
  constexpr bool ok = pool_options_fit(E::shape, O, IsMax);
  (void)error::pool_options_do_not_fit<o, as_shape<E::shape>, pool_args<O>, ok>::value;
  if constexpr (!ok || E::shape.poisoned()) {
    return ex::invalid<float_result(E::dt)>{};
  } else {
    constexpr dims xs = E::shape;
    constexpr window2d win{O.kernel.h, O.kernel.w, O.stride.h, O.stride.w, O.padding.h, O.padding.w,
                           O.dilation.h, O.dilation.w};
    constexpr index_t eh = overhang(xs.e[2], win.kh, win.sh, win.ph, win.dh, O.ceil_mode);
    constexpr index_t ew = overhang(xs.e[3], win.kw, win.sw, win.pw, win.dw, O.ceil_mode);
    constexpr dtype d = float_result(E::dt);
    // the overhang of ceil_mode as more padding at the far ends: -inf for the maximum, 0 for a sum
    const auto filler = [] {
      if constexpr (IsMax) return lit<d, bits(-std::numeric_limits<double>::infinity())>;
      else return k<d, 0>;
    }();
    const auto padded = pad_axis<2, 0, eh>(pad_axis<3, 0, ew>(to_dtype<d>(as_expr(x)), filler), filler);
    const auto pooled = pool_node<o, win>(padded);
    if constexpr (IsMax) {
      return pooled;
    } else if constexpr (O.divisor_override > 0) {
      return pooled * k<d, win.kh * win.kw, O.divisor_override>;
    } else if constexpr (full_windows(xs.e[2], win.kh, win.sh, win.ph, O.count_include_pad, O.ceil_mode) &&
                         full_windows(xs.e[3], win.kw, win.sw, win.pw, O.count_include_pad, O.ceil_mode)) {
      return pooled;  // every window divides by the kernel's size, as the node does
    } else {
      constexpr index_t ho = pooled_extent(xs.e[2], win.kh, win.sh, win.ph, 1, O.ceil_mode);
      constexpr index_t wo = pooled_extent(xs.e[3], win.kw, win.sw, win.pw, 1, O.ceil_mode);
      const auto ch = window_counts<xs.e[2], win.kh, win.sh, win.ph, O.count_include_pad, ho>();
      const auto cw = window_counts<xs.e[3], win.kw, win.sw, win.pw, O.count_include_pad, wo>();
      const auto counts = cast<d>(reshape<ho, 1>(ch) * cw);
      return pooled * k<d, win.kh * win.kw> / counts;
    }
  }
}
}  // namespace detail

/// torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) with its
/// options (non-square windows among them); padding and any ceil_mode overhang count as -inf.
template <pool2d_options O, tensor_operand X>
constexpr auto max_pool2d(const X& x) {
  return detail::pool_with<detail::with_stride(O), true>(x);
}
/// torch.nn.functional.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
/// divisor_override) with its options.
template <pool2d_options O, tensor_operand X>
constexpr auto avg_pool2d(const X& x) {
  return detail::pool_with<detail::with_stride(O), false>(x);
}

// ---- reductions with indices -------------------------------------------------------------------

/// torch.max(x, dim) / torch.min(x, dim): std::tuple{values, indices} along Axis (the first
/// index of the extreme; NaN counts as the extreme, as in PyTorch).
template <int Axis, tensor_operand X>
constexpr auto max_with_indices(const X& x) {
  return std::tuple{amax<Axis>(x), argmax<Axis>(x)};
}
template <int Axis, tensor_operand X>
constexpr auto min_with_indices(const X& x) {
  return std::tuple{amin<Axis>(x), argmin<Axis>(x)};
}

}  // namespace kiln
