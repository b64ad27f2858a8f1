// Conformance cases: the layers of graph/expr_derived_nn.hpp (conv1d, conv_transpose2d,
// batch_norm, group_norm, interpolate, max/min with indices; check_ops.py has their PyTorch
// counterparts, by case name); cases_layers_f32.cpp and cases_layers_f64.cpp instantiate it.
#pragma once

#include <kiln/graph/expr_derived_nn.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void layer_cases_of(store& s, const std::string& sfx) {
  using X1 = input<"x", D, shape<2, 3, 11>>;
  using W1 = input<"k", D, shape<4, 3, 3>>;
  using B4 = input<"c", D, shape<4>>;
  using XT = input<"x", D, shape<2, 3, 4, 5>>;
  using WT = input<"k", D, shape<3, 4, 3, 3>>;
  using XB = input<"x", D, shape<4, 3, 5, 2>>;
  using M3 = input<"m", D, shape<3>>;
  using V3 = input<"v", D, shape<3>>;
  using G3 = input<"w", D, shape<3>>;
  using B3 = input<"c", D, shape<3>>;
  using XG = input<"x", D, shape<2, 6, 3, 2>>;
  using G6 = input<"w", D, shape<6>>;
  using B6 = input<"c", D, shape<6>>;
  using XI = input<"x", D, shape<2, 2, 5, 6>>;
  using A = input<"a", D, shape<4, 9>>;
  using XC = input<"x", D, shape<2, 6, 5, 5>>;
  using WG = input<"k", D, shape<9, 2, 3, 3>>;
  using B9 = input<"c", D, shape<9>>;
  using WD = input<"k", D, shape<6, 1, 3, 3>>;
  using XU = input<"x", D, shape<2, 3, 5, 6>>;
  using CU = input<"cols", D, shape<2, 27, 9>>;
  using CR = input<"cols", D, shape<2, 18, 12>>;
  using WR = input<"k", D, shape<3, 4, 2, 3>>;
  using IS = input<"i", kiln::i64, shape<6>>;
  using SS = input<"src", D, shape<6, 3>>;
  using LS = input<"like", D, shape<4, 3>>;
  const any_tensor x1 = uniform(s, D, dims{2, 3, 11}, -2, 2), w1 = uniform(s, D, dims{4, 3, 3}, -1, 1);
  const any_tensor b4 = uniform(s, D, dims{4}, -1, 1);
  const any_tensor xt = uniform(s, D, dims{2, 3, 4, 5}, -2, 2), wt = uniform(s, D, dims{3, 4, 3, 3}, -1, 1);
  const any_tensor xb = uniform(s, D, dims{4, 3, 5, 2}, -2, 3), m3 = uniform(s, D, dims{3}, -1, 1);
  const any_tensor v3 = uniform(s, D, dims{3}, 0.5, 2), g3 = uniform(s, D, dims{3}, 0.5, 1.5);
  const any_tensor b3 = uniform(s, D, dims{3}, -1, 1);
  const any_tensor xg = uniform(s, D, dims{2, 6, 3, 2}, -2, 2), g6 = uniform(s, D, dims{6}, 0.5, 1.5);
  const any_tensor b6 = uniform(s, D, dims{6}, -1, 1);
  const any_tensor xi = uniform(s, D, dims{2, 2, 5, 6}, -2, 2);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // ties and NaN for the indices (the first extreme; NaN counts as one); no ties for the gradients,
  // which kiln shares among tied extremes and PyTorch gives to the index
  const any_tensor a = uniform(s, D, dims{4, 9}, -3, 3, {1.0, 1.0, -2.0, 2.0, 0.0, nan, 3.0, 3.0});
  const any_tensor ac = uniform(s, D, dims{4, 9}, -3, 3);
  const any_tensor xc = uniform(s, D, dims{2, 6, 5, 5}, -2, 2), wg = uniform(s, D, dims{9, 2, 3, 3}, -1, 1);
  const any_tensor b9 = uniform(s, D, dims{9}, -1, 1), wd = uniform(s, D, dims{6, 1, 3, 3}, -1, 1);
  const any_tensor xu = uniform(s, D, dims{2, 3, 5, 6}, -2, 2), cu = uniform(s, D, dims{2, 27, 9}, -2, 2);
  const any_tensor cr = uniform(s, D, dims{2, 18, 12}, -2, 2), wr = uniform(s, D, dims{3, 4, 2, 3}, -1, 1);
  const any_tensor is = uniform(s, kiln::i64, dims{6}, 0, 4, {3, 0, 3, 1}), ss = uniform(s, D, dims{6, 3}, -2, 2);
  const any_tensor ls = uniform(s, D, dims{4, 3}, -1, 1);

  record<X1, W1, B4>(s, std::string("conv1d") + sfx, conv1d<1, 1>(X1{}, W1{}, B4{}), {{"x", x1}, {"k", w1}, {"c", b4}});
  record<X1, W1>(s, std::string("conv1d_stride") + sfx, conv1d<2, 0, 2>(X1{}, W1{}, B4{}), {{"x", x1}, {"k", w1}, {"c", b4}});
  record<XT, WT, B4>(s, std::string("conv_transpose2d") + sfx, conv_transpose2d(XT{}, WT{}, B4{}),
                     {{"x", xt}, {"k", wt}, {"c", b4}});
  record<XT, WT>(s, std::string("conv_transpose2d_stride") + sfx, conv_transpose2d<2, 1, 1>(XT{}, WT{}, B4{}),
                 {{"x", xt}, {"k", wt}, {"c", b4}});
  // groups: unfold and a matmul batched over the groups; one group per channel (depthwise)
  record<XC, WG, B9>(s, std::string("conv2d_groups") + sfx, conv2d<1, 1, 1, 3>(XC{}, WG{}, B9{}),
                     {{"x", xc}, {"k", wg}, {"c", b9}});
  record<XC, WD>(s, std::string("conv2d_depthwise") + sfx, conv2d<2, 1, 1, 6>(XC{}, WD{}), {{"x", xc}, {"k", wd}});
  record<XU>(s, std::string("unfold") + sfx, unfold<3, 2, 1>(XU{}), {{"x", xu}});
  record<XU>(s, std::string("unfold_dilated") + sfx, unfold<2, 1, 0, 2>(XU{}), {{"x", xu}});
  record<CU>(s, std::string("fold") + sfx, fold<5, 6, 3, 2, 1>(CU{}), {{"cols", cu}});
  // windows that are not square: PyTorch's pairs of kernel, stride, padding, dilation
  constexpr window_options rect{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}};
  record<XU>(s, std::string("unfold_rect") + sfx, unfold<rect>(XU{}), {{"x", xu}});
  record<CR>(s, std::string("fold_rect") + sfx, fold<5, 6, rect>(CR{}), {{"cols", cr}});
  record<XT, WR>(s, std::string("conv_transpose2d_rect") + sfx,
                 conv_transpose2d<conv_transpose2d_options{
                     .stride = {2, 1}, .padding = {0, 1}, .output_padding = {1, 0}, .dilation = {1, 2}}>(XT{}, WR{}, B4{}),
                 {{"x", xt}, {"k", wr}, {"c", b4}});
  record<XT>(s, std::string("conv_transpose2d_nobias") + sfx, conv_transpose2d<2>(XT{}, WR{}), {{"x", xt}, {"k", wr}});
  record<SS>(s, std::string("scatter_add") + sfx, scatter_add(IS{}, SS{}, LS{}), {{"i", is}, {"src", ss}, {"like", ls}});
  record<XB, G3, B3>(s, std::string("batch_norm") + sfx, batch_norm(XB{}, M3{}, V3{}, G3{}, B3{}),
                     {{"x", xb}, {"m", m3}, {"v", v3}, {"w", g3}, {"c", b3}});
  {
    const auto [y, mean, var] = batch_norm_train(XB{}, M3{}, V3{}, G3{}, B3{}, 0.2);
    record<XB, G3, B3>(s, std::string("batch_norm_train") + sfx, y, {{"x", xb}, {"w", g3}, {"c", b3}});
    record<>(s, std::string("batch_norm_running_mean") + sfx, mean, {{"x", xb}, {"m", m3}});
    record<>(s, std::string("batch_norm_running_var") + sfx, var, {{"x", xb}, {"v", v3}});
  }
  record<XG, G6, B6>(s, std::string("group_norm") + sfx, group_norm<3>(XG{}, G6{}, B6{}), {{"x", xg}, {"w", g6}, {"c", b6}});
  // one group: normalised over all but the batch; a group per channel: instance norm
  record<XG, G6, B6>(s, std::string("group_norm_one") + sfx, group_norm<1>(XG{}, G6{}, B6{}), {{"x", xg}, {"w", g6}, {"c", b6}});
  record<XG>(s, std::string("group_norm_per_channel") + sfx, group_norm<6>(XG{}, G6{}, B6{}), {{"x", xg}, {"w", g6}, {"c", b6}});
  record<XI>(s, std::string("interpolate_nearest") + sfx, interpolate<7, 12>(XI{}), {{"x", xi}});
  record<XI>(s, std::string("interpolate_nearest_down") + sfx, interpolate<3, 4>(XI{}), {{"x", xi}});
  record<XI>(s, std::string("interpolate_bilinear") + sfx, interpolate<8, 9, interpolation::bilinear>(XI{}), {{"x", xi}});
  record<XI>(s, std::string("interpolate_bilinear_down") + sfx, interpolate<3, 4, interpolation::bilinear>(XI{}),
             {{"x", xi}});
  {
    const auto [v, i] = max_with_indices<1>(A{});
    record<A>(s, std::string("max_dim") + sfx, v, {{"a", ac}});
    record<>(s, std::string("max_dim_edges") + sfx, v, {{"a", a}});
    record<>(s, std::string("max_dim_indices") + sfx, i, {{"a", a}});
  }
  {
    const auto [v, i] = min_with_indices<0>(A{});
    record<A>(s, std::string("min_dim") + sfx, v, {{"a", ac}});
    record<>(s, std::string("min_dim_indices") + sfx, i, {{"a", a}});
  }
}

}  // namespace kc
