// Conformance cases: the options of PyTorch's pooling (non-square windows, strides, dilation,
// ceil_mode, count_include_pad, divisor_override), gather / scatter_add along any axis
// (torch.gather's dim), einsum's "...", diagonals and broadcasting, and integer fmod,
// remainder and floor_divide; check_ops.py has the
// PyTorch counterparts, by case name;
// cases_options_f32.cpp and cases_options_f64.cpp instantiate it.
#pragma once

#include <kiln/graph/expr_derived_nn.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void option_cases_of(store& s, const std::string& sfx) {
  using X = input<"x", D, shape<2, 3, 7, 6>>;
  using A = input<"a", D, shape<3, 5, 4>>;
  using IA = input<"i", kiln::i64, shape<3, 2, 4>>;
  using IL = input<"i", kiln::i64, shape<2, 4, 3>>;
  using B = input<"b", D, shape<4, 5>>;
  using IB = input<"i", kiln::i64, shape<6, 3>>;
  using SB = input<"src", D, shape<6, 5>>;
  using C = input<"c", D, shape<3, 4, 5>>;
  using IC = input<"i", kiln::i64, shape<2, 4, 7>>;
  using SC = input<"src", D, shape<3, 4, 7>>;
  const any_tensor x = uniform(s, D, dims{2, 3, 7, 6}, -2, 2), a = uniform(s, D, dims{3, 5, 4}, -2, 2);
  const any_tensor ia = uniform(s, kiln::i64, dims{3, 2, 4}, 0, 5), il = uniform(s, kiln::i64, dims{2, 4, 3}, 0, 4);
  const any_tensor b = uniform(s, D, dims{4, 5}, -2, 2), sb = uniform(s, D, dims{6, 5}, -2, 2);
  // repeated indices add up
  const any_tensor ib = uniform(s, kiln::i64, dims{6, 3}, 0, 4, {2, 0, 2, 2, 3, 0});
  const any_tensor c = uniform(s, D, dims{3, 4, 5}, -2, 2), sc = uniform(s, D, dims{3, 4, 7}, -2, 2);
  const any_tensor ic = uniform(s, kiln::i64, dims{2, 4, 7}, 0, 5);
  const std::vector<std::pair<std::string, any_tensor>> xs{{"x", x}};
  using EX = input<"x", D, shape<2, 3, 4, 4>>;
  using EA = input<"a", D, shape<2, 1, 3, 4>>;
  using EB = input<"b", D, shape<5, 4, 6>>;
  using EC = input<"c", D, shape<3, 1>>;
  using ED = input<"d", D, shape<1, 4>>;
  using EM = input<"m", D, shape<3, 2, 3>>;
  using ES = input<"s", D, shape<3, 3>>;
  const any_tensor ex = uniform(s, D, dims{2, 3, 4, 4}, -2, 2), ea = uniform(s, D, dims{2, 1, 3, 4}, -2, 2);
  const any_tensor eb = uniform(s, D, dims{5, 4, 6}, -2, 2), ec = uniform(s, D, dims{3, 1}, -2, 2);
  const any_tensor ed = uniform(s, D, dims{1, 4}, -2, 2), em = uniform(s, D, dims{3, 2, 3}, -2, 2);
  const any_tensor es = uniform(s, D, dims{3, 3}, -2, 2);

  record<X>(s, std::string("max_pool2d_rect") + sfx,
            max_pool2d<pool2d_options{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}}>(X{}), xs);
  record<X>(s, std::string("max_pool2d_dilation") + sfx,
            max_pool2d<pool2d_options{.kernel = 2, .stride = 1, .dilation = {2, 1}}>(X{}), xs);
  record<X>(s, std::string("max_pool2d_ceil") + sfx,
            max_pool2d<pool2d_options{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}>(X{}), xs);
  record<X>(s, std::string("avg_pool2d_ceil") + sfx,
            avg_pool2d<pool2d_options{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}>(X{}), xs);
  record<X>(s, std::string("avg_pool2d_exclude_pad") + sfx,
            avg_pool2d<pool2d_options{.kernel = {3, 2}, .stride = 2, .padding = 1, .count_include_pad = false}>(X{}),
            xs);
  record<X>(s, std::string("avg_pool2d_ceil_exclude_pad") + sfx,
            avg_pool2d<pool2d_options{.kernel = 2, .stride = 2, .ceil_mode = true, .count_include_pad = false}>(X{}),
            xs);
  record<X>(s, std::string("avg_pool2d_divisor") + sfx,
            avg_pool2d<pool2d_options{.kernel = 2, .padding = 1, .divisor_override = 3}>(X{}), xs);
  record<A>(s, std::string("gather_axis1") + sfx, gather<1>(A{}, IA{}), {{"a", a}, {"i", ia}});
  record<A>(s, std::string("gather_axis_last") + sfx, gather<-1>(A{}, IL{}), {{"a", a}, {"i", il}});
  record<B, SB>(s, std::string("scatter_add_axis0") + sfx, scatter_add<0>(B{}, IB{}, SB{}),
                {{"b", b}, {"i", ib}, {"src", sb}});
  record<C, SC>(s, std::string("scatter_add_axis_last") + sfx, scatter_add<2>(C{}, IC{}, SC{}),
                {{"c", c}, {"i", ic}, {"src", sc}});
  // integers: every sign pairing, zero dividends, a divisor of -1 (no zero divisor: it throws)
  using IA64 = input<"p", kiln::i64, shape<24>>;
  using IB64 = input<"q", kiln::i64, shape<24>>;
  using IA32 = input<"p", kiln::i32, shape<24>>;
  const any_tensor ip = uniform(s, kiln::i64, dims{24}, -50, 50, {7, -7, 7, -7, 0, 0, 5, -5, 9});
  const any_tensor iq = uniform(s, kiln::i64, dims{24}, 1, 9, {3, 3, -3, -3, 4, -4, -1, -1, 9});
  const any_tensor ip32 = uniform(s, kiln::i32, dims{24}, -50, 50, {7, -7, 0, 13});
  record<>(s, std::string("fmod_int") + sfx, fmod(IA64{}, IB64{}), {{"p", ip}, {"q", iq}});
  record<>(s, std::string("remainder_int") + sfx, remainder(IA64{}, IB64{}), {{"p", ip}, {"q", iq}});
  record<>(s, std::string("remainder_int32_scalar") + sfx, remainder(IA32{}, -4), {{"p", ip32}});
  record<>(s, std::string("floor_divide_int") + sfx, floor_divide(IA64{}, IB64{}), {{"p", ip}, {"q", iq}});
  record<>(s, std::string("floor_divide_int32_scalar") + sfx, floor_divide(IA32{}, -4), {{"p", ip32}});
  record<EX>(s, std::string("einsum_ellipsis_diagonal") + sfx, einsum<"...ii->...i">(EX{}), {{"x", ex}});
  record<EX>(s, std::string("einsum_ellipsis_summed") + sfx, einsum<"...ij->ij">(EX{}), {{"x", ex}});
  record<EA, EB>(s, std::string("einsum_ellipsis_bmm") + sfx, einsum<"...ij,...jk">(EA{}, EB{}), {{"a", ea}, {"b", eb}});
  record<ES>(s, std::string("einsum_trace") + sfx, einsum<"ii">(ES{}), {{"s", es}});
  record<EM>(s, std::string("einsum_diagonal_apart") + sfx, einsum<"iji->j">(EM{}), {{"m", em}});
  record<EC, ED>(s, std::string("einsum_broadcast") + sfx, einsum<"ij,ij->i">(EC{}, ED{}), {{"c", ec}, {"d", ed}});
}

}  // namespace kc
