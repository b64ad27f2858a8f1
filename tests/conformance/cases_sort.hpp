// Conformance cases: scans, sorts and einsum (cumsum, argsort, sort, topk, einsum; check_ops.py
// has their PyTorch counterparts, by case name); cases_sort_f32.cpp and cases_sort_f64.cpp
// instantiate it.
#pragma once

#include <kiln/graph/expr_derived.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void sort_cases_of(store& s, const std::string& sfx) {
  using S = input<"s", D, shape<5, 8>>;
  using I = input<"i", kiln::i64, shape<5, 8>>;
  using M = input<"m", kiln::boolean, shape<9>>;
  using P = input<"p", D, shape<2, 3, 4>>;
  using Q = input<"q", D, shape<2, 4, 5>>;
  using R = input<"r", D, shape<3, 4>>;
  using T = input<"t", D, shape<2, 5>>;
  using U = input<"u", D, shape<3>>;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // ties, -0 beside 0, NaN and infinities (values only: PyTorch's order of equal values is its own)
  const any_tensor edges = uniform(s, D, dims{5, 8}, -3, 3, {1.0, 1.0, 2.0, nan, -inf, inf, 0.0, -0.0, 2.0, -1.0, nan});
  // distinct values: the indices too are PyTorch's
  const any_tensor sv = uniform(s, D, dims{5, 8}, -3, 3);
  const any_tensor iv = uniform(s, kiln::i64, dims{5, 8}, -9, 9);
  const any_tensor mv = uniform(s, kiln::boolean, dims{9}, 0, 1);
  const any_tensor p = uniform(s, D, dims{2, 3, 4}, -2, 2), q = uniform(s, D, dims{2, 4, 5}, -2, 2);
  const any_tensor r = uniform(s, D, dims{3, 4}, -2, 2), t = uniform(s, D, dims{2, 5}, -2, 2);
  const any_tensor u = uniform(s, D, dims{3}, -2, 2);
  const std::vector<std::pair<std::string, any_tensor>> xs{{"s", sv}}, xe{{"s", edges}};

  record<S>(s, std::string("cumsum") + sfx, cumsum<1>(S{}), xs);
  record<S>(s, std::string("cumsum_0") + sfx, cumsum<0>(S{}), xs);
  record<>(s, std::string("cumsum_edges") + sfx, cumsum<1>(S{}), xe);
  record<>(s, std::string("cumsum_int") + sfx, cumsum<0>(I{}), {{"i", iv}});
  record<>(s, std::string("cumsum_bool") + sfx, cumsum<0>(M{}), {{"m", mv}});
  record<>(s, std::string("argsort") + sfx, argsort<1>(S{}), xs);
  record<>(s, std::string("argsort_desc") + sfx, argsort<0, true>(S{}), xs);
  {
    const auto [v, i] = sort<1>(S{});
    record<S>(s, std::string("sort") + sfx, v, xs);
    record<>(s, std::string("sort_indices") + sfx, i, xs);
    record<>(s, std::string("sort_edges") + sfx, v, xe);
  }
  {
    const auto [v, i] = sort<0, true>(S{});
    record<S>(s, std::string("sort_desc") + sfx, v, xs);
    record<>(s, std::string("sort_desc_edges") + sfx, v, xe);
  }
  {
    const auto [v, i] = topk<3, 1>(S{});
    record<S>(s, std::string("topk") + sfx, v, xs);
    record<>(s, std::string("topk_indices") + sfx, i, xs);
    record<>(s, std::string("topk_edges") + sfx, v, xe);
  }
  {
    const auto [v, i] = topk<8, 1>(S{});  // all of them: a descending sort
    record<S>(s, std::string("topk_all") + sfx, v, xs);
  }
  {
    const auto [v, i] = topk<2, 0, false>(S{});
    record<S>(s, std::string("topk_smallest") + sfx, v, xs);
  }
  record<P, Q>(s, std::string("einsum_bmm") + sfx, einsum<"bij,bjk->bik">(P{}, Q{}), {{"p", p}, {"q", q}});
  record<P, Q>(s, std::string("einsum_permuted") + sfx, einsum<"bij,bjk->kbi">(P{}, Q{}), {{"p", p}, {"q", q}});
  record<P, Q>(s, std::string("einsum_implicit") + sfx, einsum<"bij,bjk">(P{}, Q{}), {{"p", p}, {"q", q}});
  record<P, R>(s, std::string("einsum_contract") + sfx, einsum<"bij,ij->b">(P{}, R{}), {{"p", p}, {"r", r}});
  record<R, T>(s, std::string("einsum_outer") + sfx, einsum<"ij,kl->ikjl">(R{}, T{}), {{"r", r}, {"t", t}});
  record<P, T>(s, std::string("einsum_sum_first") + sfx, einsum<"bij,bk->ik">(P{}, T{}), {{"p", p}, {"t", t}});
  record<T>(s, std::string("einsum_batch_outer") + sfx, einsum<"bi,bj->bij">(T{}, T{} * T{}), {{"t", t}});
  record<P>(s, std::string("einsum_sum") + sfx, einsum<"bij->j">(P{}), {{"p", p}});
  record<R>(s, std::string("einsum_transpose") + sfx, einsum<"ij->ji">(R{}), {{"r", r}});
  // three and four operands, contracted a pair at a time (with "..." and an implicit output)
  record<P, Q, R>(s, std::string("einsum_three") + sfx, einsum<"bij,bjk,ij->bk">(P{}, Q{}, R{}),
                  {{"p", p}, {"q", q}, {"r", r}});
  record<P, U>(s, std::string("einsum_four") + sfx, einsum<"b...j,bjk,bk,...">(P{}, Q{}, T{}, U{}),
               {{"p", p}, {"q", q}, {"t", t}, {"u", u}});
}

}  // namespace kc
