// kiln/backend/eager.hpp: the reference backend.
//
// Runs any graph one node at a time, materialising every intermediate, in the plainest code
// that is still correct: every other backend is tested against it. Floating-point sums and
// matmuls accumulate in double, integer arithmetic wraps instead of overflowing, and every
// run-time shape is checked (a mismatch throws kiln::shape_error naming the op and shapes).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../core/shape_rules.hpp"
#include "../core/tensor.hpp"
#include "../graph/graph.hpp"
#include "../graph/ops.hpp"
#include "../graph/resolve.hpp"
#include "../ops/bodies.hpp"
#include "../passes/decompose.hpp"
#include "backend.hpp"

namespace kiln::eager {

/// Evaluates every node of graph g in order (run, below, for any graph type). Run-time code
/// that no plan depends on, like the interpreter it calls (KILN_LAZY, docs/build-cost.md).
KILN_LAZY std::vector<any_tensor> run_graph(const graph_span& g, const std::vector<any_tensor>& leaves);

template <class G>
std::vector<any_tensor> run(const G& g, const std::vector<any_tensor>& leaves) {
  return run_graph(graph_span{{g.nodes.data(), g.nodes.size()}, {g.outputs.data(), g.outputs.size()}, g.leaves}, leaves);
}

namespace detail {

/// One node's value from its inputs' (in[0 .. nin)): the interpreter, compiled once
/// (KILN_LAZY: with separate compilation, in the unit of <kiln/src.hpp>; header-only, in the units
/// that call it) rather than in every unit that runs a plan.
KILN_LAZY any_tensor run_node(const node& n, const any_tensor* in);

#if KILN_DEFINE_RUNTIME

template <dtype D>
compute_t<D> load(const std::byte* base, index_t off) {
  return static_cast<compute_t<D>>(reinterpret_cast<const storage_t<D>*>(base)[off]);
}
template <dtype D>
void store(std::byte* base, index_t off, compute_t<D> v) {
  reinterpret_cast<storage_t<D>*>(base)[off] = storage_t<D>(v);
}

/// The C library's math on scalars, as ops/bodies.hpp asks for it: the eager backend computes
/// each op by the formula every backend shares, and checks the vector math against these.
struct cmath {
  template <class T> static T exp(T x) { return std::exp(x); }
  template <class T> static T log(T x) { return std::log(x); }
  template <class T> static T sqrt(T x) { return std::sqrt(x); }
  template <class T> static T tanh(T x) { return std::tanh(x); }
  template <class T> static T sin(T x) { return std::sin(x); }
  template <class T> static T cos(T x) { return std::cos(x); }
  template <class T> static T erf(T x) { return std::erf(x); }
  template <class T> static T abs(T x) { return std::abs(x); }
  template <class T> static T pow(T a, T b) { return std::pow(a, b); }
  template <class T> static T floor(T x) { return std::floor(x); }
  template <class T> static T ceil(T x) { return std::ceil(x); }
  template <class T> static T rint(T x) { return std::nearbyint(x); }
  template <class T> static T trunc(T x) { return std::trunc(x); }
  template <class T> static T atan(T x) { return std::atan(x); }
  template <class T> static T asin(T x) { return std::asin(x); }
  template <class T> static T acos(T x) { return std::acos(x); }
  template <class T> static T atan2(T a, T b) { return std::atan2(a, b); }
  template <class T> static T fmod(T a, T b) { return std::fmod(a, b); }
  template <class T> static bool isnan(T x) { return std::isnan(x); }
  template <class T> static T select(bool c, T a, T b) { return c ? a : b; }
};

using ops::wrapping;

// Run-time op to compile-time body: one case per op with a body (ops/bodies.hpp).
#define KILN_EAGER_UNARY(O) \
  case op::O:               \
    if constexpr (ops::has_unary_body<op::O, T>) return ops::unary<op::O, cmath>(x); \
    break;
template <class T>
T unary(op o, T x) {
  switch (o) {
    KILN_EAGER_UNARY(neg) KILN_EAGER_UNARY(abs) KILN_EAGER_UNARY(relu) KILN_EAGER_UNARY(exp) KILN_EAGER_UNARY(log)
    KILN_EAGER_UNARY(sqrt) KILN_EAGER_UNARY(rsqrt) KILN_EAGER_UNARY(reciprocal) KILN_EAGER_UNARY(tanh)
    KILN_EAGER_UNARY(sin) KILN_EAGER_UNARY(cos) KILN_EAGER_UNARY(erf) KILN_EAGER_UNARY(sigmoid)
    KILN_EAGER_UNARY(silu) KILN_EAGER_UNARY(gelu) KILN_EAGER_UNARY(gelu_tanh) KILN_EAGER_UNARY(floor)
    KILN_EAGER_UNARY(ceil) KILN_EAGER_UNARY(round) KILN_EAGER_UNARY(trunc) KILN_EAGER_UNARY(atan)
    KILN_EAGER_UNARY(asin) KILN_EAGER_UNARY(acos)
    default: break;
  }
  throw std::logic_error("kiln: eager: unary op " + std::string(name(o)) + " has no rule for this dtype");
}
#undef KILN_EAGER_UNARY

#define KILN_EAGER_BINARY(O) \
  case op::O:                \
    if constexpr (ops::has_binary_body<op::O, T>) return ops::binary<op::O, cmath>(a, b); \
    break;
template <class T>
T arith(op o, T a, T b) {
  switch (o) {
    KILN_EAGER_BINARY(add) KILN_EAGER_BINARY(sub) KILN_EAGER_BINARY(mul) KILN_EAGER_BINARY(div)
    KILN_EAGER_BINARY(max) KILN_EAGER_BINARY(min) KILN_EAGER_BINARY(pow) KILN_EAGER_BINARY(fmod)
    KILN_EAGER_BINARY(atan2)
    default: break;
  }
  throw std::logic_error("kiln: eager: binary op " + std::string(name(o)) + " has no rule for this dtype");
}
#undef KILN_EAGER_BINARY

template <class T>
bool compare(op o, T a, T b) {
  switch (o) {
    case op::eq: return ops::compare<op::eq>(a, b);
    case op::ne: return ops::compare<op::ne>(a, b);
    case op::lt: return ops::compare<op::lt>(a, b);
    case op::le: return ops::compare<op::le>(a, b);
    case op::gt: return ops::compare<op::gt>(a, b);
    case op::ge: return ops::compare<op::ge>(a, b);
    default: break;
  }
  throw std::logic_error("kiln: eager: " + std::string(name(o)) + " is not a comparison");
}

/// Strides of `t` as an operand of an op whose result has shape `out` (right-aligned; 0 on
/// broadcast axes).
KILN_LAZY dims broadcast_strides(const any_tensor& t, const dims& out) {
  dims s;
  s.rank = out.rank;
  for (int i = 0; i < out.rank; ++i) {
    const int j = t.rank() - out.rank + i;
    s.e[i] = j < 0 || t.shape().e[j] == 1 ? 0 : t.strides().e[j];
  }
  return s;
}

/// Calls f(k, off0, off1, ...) for each element k (row-major) of `out`, with each operand's
/// element offset.
template <class F, class... T>
void for_each_broadcast(const dims& out, F&& f, const T&... operands) {
  const dims strides[] = {broadcast_strides(operands, out)...};
  index_t k = 0;
  for_each_index(out, [&](const index_t* idx) {
    index_t off[sizeof...(T)]{};
    for (std::size_t t = 0; t < sizeof...(T); ++t)
      for (int i = 0; i < out.rank; ++i) off[t] += idx[i] * strides[t].e[i];
    [&]<std::size_t... I>(std::index_sequence<I...>) { f(k, off[I]...); }(std::index_sequence_for<T...>{});
    ++k;
  });
}

KILN_LAZY any_tensor run_unary(const node& n, const any_tensor& x) {
  any_tensor out(n.dt, x.shape());
  visit(n.dt, [&]<dtype D>() {
    if constexpr (D != dtype::boolean) {
      for_each_broadcast(out.shape(), [&](index_t k, index_t o) {
        store<D>(out.bytes(), k, unary<compute_t<D>>(n.o, load<D>(x.bytes(), o)));
      }, x);
    } else {
      throw std::logic_error("kiln: eager: unary op on bool");
    }
  });
  return out;
}

KILN_LAZY any_tensor run_binary(const node& n, const any_tensor& a, const any_tensor& b, const dims& shape) {
  any_tensor out(n.dt, shape);
  visit(a.dt(), [&]<dtype D>() {
    for_each_broadcast(out.shape(), [&](index_t k, index_t oa, index_t ob) {
      const auto x = load<D>(a.bytes(), oa), y = load<D>(b.bytes(), ob);
      if (is_comparison(n.o)) store<dtype::boolean>(out.bytes(), k, compare(n.o, x, y));
      else store<D>(out.bytes(), k, arith(n.o, x, y));
    }, a, b);
  });
  return out;
}

KILN_LAZY any_tensor run_where(const node& n, const any_tensor& c, const any_tensor& a, const any_tensor& b, const dims& s) {
  any_tensor out(n.dt, s);
  visit(n.dt, [&]<dtype D>() {
    for_each_broadcast(s, [&](index_t k, index_t oc, index_t oa, index_t ob) {
      store<D>(out.bytes(), k, load<dtype::boolean>(c.bytes(), oc) ? load<D>(a.bytes(), oa) : load<D>(b.bytes(), ob));
    }, c, a, b);
  });
  return out;
}

/// Accumulator type of sums: double for floating point, the (wrapping) integer otherwise.
template <dtype D>
using accumulator_t = std::conditional_t<is_floating(D), double, compute_t<D>>;

KILN_LAZY any_tensor run_reduce(const node& n, const any_tensor& x, const dims& out_shape) {
  const dims in = x.shape();
  any_tensor out(n.dt, out_shape);
  // output offset of each input axis: 0 on reduced axes
  dims ostride;
  ostride.rank = in.rank;
  index_t count = 1;
  {
    const dims cs = contiguous_strides(out_shape);
    int j = 0;
    for (int i = 0; i < in.rank; ++i) {
      const bool reduced = n.axes & (1u << i);
      if (reduced) count *= in.e[i];
      ostride.e[i] = reduced ? 0 : cs.e[j];
      if (!reduced || n.keepdim) ++j;
    }
  }
  const index_t m = out_shape.numel();
  visit(n.dt, [&]<dtype D>() {
    using T = compute_t<D>;
    if (n.o == op::var) {
      if constexpr (is_floating(D)) {
        // two passes in double: the mean, then the sum of squared deviations
        std::vector<double> mu(static_cast<std::size_t>(m), 0.0), ss(static_cast<std::size_t>(m), 0.0);
        auto out_offset = [&](const index_t* idx) {
          index_t o = 0;
          for (int i = 0; i < in.rank; ++i) o += idx[i] * ostride.e[i];
          return o;
        };
        for_each_index(in, [&](const index_t* idx) { mu[out_offset(idx)] += load<D>(x.bytes(), x.offset_of(idx)); });
        for (double& v : mu) v /= static_cast<double>(count);
        for_each_index(in, [&](const index_t* idx) {
          const index_t o = out_offset(idx);
          const double dv = load<D>(x.bytes(), x.offset_of(idx)) - mu[o];
          ss[o] += dv * dv;
        });
        for (index_t k = 0; k < m; ++k)
          store<D>(out.bytes(), k, static_cast<T>(ss[k] / (static_cast<double>(count) - n.value)));
      } else {
        throw std::logic_error("kiln: eager: var of an integer tensor reached the backend");
      }
    } else if (n.o == op::sum || n.o == op::mean) {
      if constexpr (D != dtype::boolean) {
        using Acc = accumulator_t<D>;
        std::vector<Acc> acc(static_cast<std::size_t>(m), Acc(0));
        for_each_index(in, [&](const index_t* idx) {
          index_t o = 0;
          for (int i = 0; i < in.rank; ++i) o += idx[i] * ostride.e[i];
          const Acc v = static_cast<Acc>(load<D>(x.bytes(), x.offset_of(idx)));
          if constexpr (std::is_integral_v<Acc>) acc[o] = wrapping(acc[o], v, [](auto p, auto q) { return p + q; });
          else acc[o] += v;
        });
        for (index_t k = 0; k < m; ++k) {
          Acc v = acc[k];
          if (n.o == op::mean) {
            if constexpr (std::is_floating_point_v<Acc>) v = v / static_cast<Acc>(count);  // 0/0 = NaN
          }
          store<D>(out.bytes(), k, static_cast<T>(v));
        }
      } else {
        throw std::logic_error("kiln: eager: sum of bool reached the backend");
      }
    } else {  // amax, amin
      std::vector<T> best(static_cast<std::size_t>(m));
      std::vector<char> seen(static_cast<std::size_t>(m), 0);
      const bool is_max = n.o == op::amax;
      for_each_index(in, [&](const index_t* idx) {
        index_t o = 0;
        for (int i = 0; i < in.rank; ++i) o += idx[i] * ostride.e[i];
        const T v = load<D>(x.bytes(), x.offset_of(idx));
        if (!seen[o]) {
          best[o] = v;
          seen[o] = 1;
          return;
        }
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(best[o])) return;
          if (std::isnan(v)) {
            best[o] = v;
            return;
          }
        }
        if (is_max ? best[o] < v : v < best[o]) best[o] = v;
      });
      for (index_t k = 0; k < m; ++k) store<D>(out.bytes(), k, best[k]);
    }
  });
  return out;
}

KILN_LAZY any_tensor run_matmul(const node& n, const any_tensor& a, const any_tensor& b, const dims& s) {
  any_tensor out(n.dt, s);
  const int ra = a.rank(), rb = b.rank(), ro = s.rank;
  const index_t m = s.e[ro - 2], nn = s.e[ro - 1], kk = a.shape().e[ra - 1];
  dims batch = s;
  batch.rank -= 2;
  // batch strides of each operand, right-aligned to the output batch, 0 where broadcast
  auto batch_strides = [&](const any_tensor& t) {
    dims st;
    st.rank = batch.rank;
    for (int i = 0; i < batch.rank; ++i) {
      const int j = t.rank() - 2 - batch.rank + i;
      st.e[i] = j < 0 || t.shape().e[j] == 1 ? 0 : t.strides().e[j];
    }
    return st;
  };
  const dims sa = batch_strides(a), sb = batch_strides(b);
  const index_t am = a.strides().e[ra - 2], ak = a.strides().e[ra - 1];
  const index_t bk = b.strides().e[rb - 2], bn = b.strides().e[rb - 1];
  visit(n.dt, [&]<dtype D>() {
    if constexpr (D != dtype::boolean) {
      using Acc = accumulator_t<D>;
      index_t ob = 0;
      for_each_index(batch, [&](const index_t* idx) {
        index_t oa = 0, obb = 0;
        for (int i = 0; i < batch.rank; ++i) {
          oa += idx[i] * sa.e[i];
          obb += idx[i] * sb.e[i];
        }
        for (index_t i = 0; i < m; ++i)
          for (index_t j = 0; j < nn; ++j) {
            Acc acc = 0;
            for (index_t p = 0; p < kk; ++p) {
              const Acc x = load<D>(a.bytes(), oa + i * am + p * ak);
              const Acc y = load<D>(b.bytes(), obb + p * bk + j * bn);
              if constexpr (std::is_integral_v<Acc>)
                acc = wrapping(acc, wrapping(x, y, [](auto u, auto v) { return u * v; }),
                               [](auto u, auto v) { return u + v; });
              else acc += x * y;
            }
            store<D>(out.bytes(), ob + i * nn + j, static_cast<compute_t<D>>(acc));
          }
        ob += m * nn;
      });
    } else {
      throw std::logic_error("kiln: eager: matmul of bool reached the backend");
    }
  });
  return out;
}

KILN_LAZY any_tensor run_broadcast(const node& n, const any_tensor& x, const dims& to) {
  any_tensor out(n.dt, to);
  visit(n.dt, [&]<dtype D>() {
    for_each_broadcast(to, [&](index_t k, index_t o) {
      reinterpret_cast<storage_t<D>*>(out.bytes())[k] = reinterpret_cast<const storage_t<D>*>(x.bytes())[o];
    }, x);
  });
  return out;
}

KILN_LAZY any_tensor run_concat(const node& n, const any_tensor& a, const any_tensor& b, const dims& shape) {
  any_tensor out(n.dt, shape);
  const index_t na = a.shape().e[n.axis];
  out.slice(n.axis, 0, na).copy_from(a);
  out.slice(n.axis, na, to_end).copy_from(b);
  return out;
}

KILN_LAZY any_tensor run_softmax(const node& n, const any_tensor& x) {
  const any_tensor out(n.dt, x.shape());
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      dims outer = x.shape();
      outer.e[n.axis] = 1;
      const index_t len = x.shape().e[n.axis], xs = x.strides().e[n.axis], os = out.strides().e[n.axis];
      for_each_index(outer, [&](const index_t* idx) {
        const index_t xb = x.offset_of(idx), ob = out.offset_of(idx);
        double mx = -std::numeric_limits<double>::infinity();
        for (index_t i = 0; i < len; ++i) mx = std::max(mx, static_cast<double>(load<D>(x.bytes(), xb + i * xs)));
        double total = 0;
        for (index_t i = 0; i < len; ++i) total += std::exp(load<D>(x.bytes(), xb + i * xs) - mx);
        for (index_t i = 0; i < len; ++i) {
          const double z = load<D>(x.bytes(), xb + i * xs) - mx;
          const double v = n.o == op::softmax ? std::exp(z) / total : z - std::log(total);
          store<D>(out.bytes(), ob + i * os, static_cast<compute_t<D>>(v));
        }
      });
    } else {
      throw std::logic_error("kiln: eager: softmax of integers reached the backend");
    }
  });
  return out;
}

KILN_LAZY any_tensor run_layer_norm(const node& n, const any_tensor& x, const any_tensor& g, const any_tensor& b,
                                    const any_tensor& eps) {
  const any_tensor out(n.dt, x.shape());
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      const int k = g.rank(), lead = x.rank() - k;
      dims outer = x.shape(), inner = g.shape();
      outer.rank = lead;
      const double e = load<D>(eps.bytes(), 0);
      const index_t cnt = inner.numel();
      std::vector<index_t> xi(static_cast<std::size_t>(x.rank()));
      for_each_index(outer, [&](const index_t* oi) {
        auto full = [&](const index_t* ii) {
          for (int d = 0; d < lead; ++d) xi[d] = oi[d];
          for (int d = 0; d < k; ++d) xi[lead + d] = ii[d];
          return xi.data();
        };
        double mu = 0, var = 0;
        for_each_index(inner, [&](const index_t* ii) { mu += load<D>(x.bytes(), x.offset_of(full(ii))); });
        mu /= static_cast<double>(cnt);
        for_each_index(inner, [&](const index_t* ii) {
          const double dv = load<D>(x.bytes(), x.offset_of(full(ii))) - mu;
          var += dv * dv;
        });
        var /= static_cast<double>(cnt);
        const double inv = 1.0 / std::sqrt(var + e);
        for_each_index(inner, [&](const index_t* ii) {
          const index_t* f = full(ii);
          const double v = (load<D>(x.bytes(), x.offset_of(f)) - mu) * inv * load<D>(g.bytes(), g.offset_of(ii)) +
                           load<D>(b.bytes(), b.offset_of(ii));
          store<D>(out.bytes(), out.offset_of(f), static_cast<compute_t<D>>(v));
        });
      });
    } else {
      throw std::logic_error("kiln: eager: layer_norm of integers reached the backend");
    }
  });
  return out;
}

KILN_LAZY any_tensor run_mse(const node& n, const any_tensor& a, const any_tensor& b) {
  const dims s = broadcast(a.shape(), b.shape()).shape;  // (the elements compared; checked by infer)
  const any_tensor out(n.dt, dims{});
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      double acc = 0;
      for_each_broadcast(s, [&](index_t, index_t oa, index_t ob) {
        const double dv = static_cast<double>(load<D>(a.bytes(), oa)) - load<D>(b.bytes(), ob);
        acc += dv * dv;
      }, a, b);
      store<D>(out.bytes(), 0, static_cast<compute_t<D>>(acc / static_cast<double>(s.numel())));
    }
  });
  return out;
}

KILN_LAZY any_tensor run_cross_entropy(const node& n, const any_tensor& z, const any_tensor& y) {
  const any_tensor out(n.dt, dims{});
  const index_t rows = z.shape().e[0], classes = z.shape().e[1];
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      double total = 0;
      for (index_t i = 0; i < rows; ++i) {
        const index_t label = y.dt() == dtype::i32 ? load<dtype::i32>(y.bytes(), i * y.strides().e[0])
                                                   : load<dtype::i64>(y.bytes(), i * y.strides().e[0]);
        if (label < 0 || label >= classes)
          throw std::invalid_argument("kiln: cross_entropy: label " + std::to_string(label) + " of row " +
                                      std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
        auto at = [&](index_t j) { return static_cast<double>(load<D>(z.bytes(), i * z.strides().e[0] + j * z.strides().e[1])); };
        double mx = -std::numeric_limits<double>::infinity();
        for (index_t j = 0; j < classes; ++j) mx = std::max(mx, at(j));
        double s = 0;
        for (index_t j = 0; j < classes; ++j) s += std::exp(at(j) - mx);
        total += mx + std::log(s) - at(label);
      }
      store<D>(out.bytes(), 0, static_cast<compute_t<D>>(total / static_cast<double>(rows)));
    }
  });
  return out;
}

// ---- windows, indexing, random numbers ---------------------------------------------------------

/// An integer tensor's element as an index.
KILN_LAZY index_t load_index(const any_tensor& t, index_t off) {
  return t.dt() == dtype::i32 ? load<dtype::i32>(t.bytes(), off) : static_cast<index_t>(load<dtype::i64>(t.bytes(), off));
}

/// The shape of one row of a table (its axes after the first).
KILN_LAZY dims row_shape(const dims& table) {
  dims r;
  for (int i = 1; i < table.rank; ++i) r.e[r.rank++] = table.e[i];
  return r;
}

/// Checks every index against [0, rows) before anything is computed.
KILN_LAZY void check_indices(const char* who, const any_tensor& idx, index_t rows) {
  index_t k = 0;
  for_each_index(idx.shape(), [&](const index_t* ii) {
    const index_t v = load_index(idx, idx.offset_of(ii));
    if (v < 0 || v >= rows)
      throw std::out_of_range(std::string("kiln: ") + who + ": index " + std::to_string(v) + " at position " +
                              std::to_string(k) + " is outside [0, " + std::to_string(rows) + ")");
    ++k;
  });
}

KILN_LAZY any_tensor run_gather(const node& n, const any_tensor& table, const any_tensor& idx, const dims& shape) {
  check_indices("gather", idx, table.shape().e[0]);
  any_tensor out(n.dt, shape);
  const dims row = row_shape(table.shape());
  visit(n.dt, [&]<dtype D>() {
    index_t k = 0;
    for_each_index(idx.shape(), [&](const index_t* ii) {
      const index_t v = load_index(idx, idx.offset_of(ii));
      for_each_index(row, [&](const index_t* e) {
        index_t off = v * table.strides().e[0];
        for (int a = 0; a < row.rank; ++a) off += e[a] * table.strides().e[a + 1];
        reinterpret_cast<storage_t<D>*>(out.bytes())[k++] = reinterpret_cast<const storage_t<D>*>(table.bytes())[off];
      });
    });
  });
  return out;
}

KILN_LAZY any_tensor run_scatter_add(const node& n, const any_tensor& idx, const any_tensor& src, const dims& like) {
  check_indices("scatter_add", idx, like.e[0]);
  any_tensor out(n.dt, like);
  const dims row = row_shape(like);
  const index_t width = row.numel();
  visit(n.dt, [&]<dtype D>() {
    if constexpr (D != dtype::boolean) {
      std::vector<accumulator_t<D>> acc(static_cast<std::size_t>(like.numel()), 0);
      index_t k = 0;  // row of src, row-major over the index's shape
      for_each_index(idx.shape(), [&](const index_t* ii) {
        const index_t v = load_index(idx, idx.offset_of(ii));
        index_t e = 0;
        for_each_index(row, [&](const index_t* ri) {
          index_t off = 0;
          for (int a = 0; a < idx.rank(); ++a) off += ii[a] * src.strides().e[a];
          for (int a = 0; a < row.rank; ++a) off += ri[a] * src.strides().e[idx.rank() + a];
          auto& slot = acc[static_cast<std::size_t>(v * width + e++)];
          const auto x = static_cast<accumulator_t<D>>(load<D>(src.bytes(), off));
          if constexpr (std::is_integral_v<accumulator_t<D>>) slot = wrapping(slot, x, [](auto p, auto q) { return p + q; });
          else slot += x;
        });
        ++k;
      });
      for (index_t i = 0; i < like.numel(); ++i) store<D>(out.bytes(), i, static_cast<compute_t<D>>(acc[static_cast<std::size_t>(i)]));
    } else {
      throw std::logic_error("kiln: eager: scatter_add of bool");
    }
  });
  return out;
}

/// Calls f(row, col, input offset or -1 for padding) for each element of unfold's [c k, l]
/// matrix of one image (x viewed as [c, h, w] through its strides, from offset `base`).
template <class F>
void for_each_window_element(const dims& x, const dims& xs, index_t base, const window2d& w, F&& f) {
  const index_t c = x.e[1], h = x.e[2], wd = x.e[3];
  const index_t ho = window_positions(h, w.kh, w.sh, w.ph, w.dh), wo = window_positions(wd, w.kw, w.sw, w.pw, w.dw);
  for (index_t ch = 0; ch < c; ++ch)
    for (index_t ky = 0; ky < w.kh; ++ky)
      for (index_t kx = 0; kx < w.kw; ++kx) {
        const index_t row = (ch * w.kh + ky) * w.kw + kx;
        for (index_t oy = 0; oy < ho; ++oy)
          for (index_t ox = 0; ox < wo; ++ox) {
            const index_t iy = oy * w.sh - w.ph + ky * w.dh, ix = ox * w.sw - w.pw + kx * w.dw;
            const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wd;
            f(row, oy * wo + ox, inside ? base + ch * xs.e[1] + iy * xs.e[2] + ix * xs.e[3] : index_t{-1});
          }
      }
}

KILN_LAZY any_tensor run_unfold(const node& n, const any_tensor& x, const dims& shape) {
  const window2d w = window_of(n);
  any_tensor out(n.dt, shape);
  const index_t rows = shape.e[1], cols = shape.e[2];
  visit(n.dt, [&]<dtype D>() {
    const auto pad = static_cast<compute_t<D>>(n.value);
    for (index_t b = 0; b < x.shape().e[0]; ++b)
      for_each_window_element(x.shape(), x.strides(), b * x.strides().e[0], w, [&](index_t row, index_t col, index_t off) {
        store<D>(out.bytes(), (b * rows + row) * cols + col, off >= 0 ? load<D>(x.bytes(), off) : pad);
      });
  });
  return out;
}

KILN_LAZY any_tensor run_fold(const node& n, const any_tensor& cols, const dims& shape) {
  const window2d w = window_of(n);
  any_tensor out(n.dt, shape);
  const index_t rows = cols.shape().e[1], ncol = cols.shape().e[2];
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      std::vector<double> acc(static_cast<std::size_t>(shape.numel()), 0.0);
      const dims os = contiguous_strides(shape);
      for (index_t b = 0; b < shape.e[0]; ++b)
        for_each_window_element(shape, os, b * os.e[0], w, [&](index_t row, index_t col, index_t off) {
          if (off >= 0)
            acc[static_cast<std::size_t>(off)] +=
                load<D>(cols.bytes(), b * cols.strides().e[0] + row * cols.strides().e[1] + col * cols.strides().e[2]);
        });
      for (index_t i = 0; i < shape.numel(); ++i) store<D>(out.bytes(), i, static_cast<compute_t<D>>(acc[static_cast<std::size_t>(i)]));
      (void)rows;
      (void)ncol;
    } else {
      throw std::logic_error("kiln: eager: fold of integers");
    }
  });
  return out;
}

/// t's values broadcast to shape `to`, row-major, in double (bool as 0 or 1).
KILN_LAZY std::vector<double> dense_f64(const any_tensor& t, const dims& to) {
  std::vector<double> out(static_cast<std::size_t>(to.numel()));
  visit(t.dt(), [&]<dtype D>() {
    for_each_broadcast(to, [&](index_t k, index_t off) { out[static_cast<std::size_t>(k)] = static_cast<double>(load<D>(t.bytes(), off)); }, t);
  });
  return out;
}

/// Fused attention's reference (ops.hpp): plain loops in double, each score row max-subtracted
/// and normalised as a whole (no tiling), so it checks the CPU backend's online softmax.
/// scores(b, h, i, s) gives query row i's masked scores, scale q k^T [+ mask], -inf where masked.
struct attention_reference {
  attention_geometry g;
  bool causal, bool_mask;
  double scale;
  std::vector<double> q, k, v, m;
  attention_reference(const node& n, const any_tensor& qt, const dims& ks, const dims& vs, const any_tensor& mask)
      : g(qt.shape(), ks, vs), causal(attention_causal(n)), bool_mask(mask.dt() == dtype::boolean),
        scale(attention_scale(n)) {
    q = dense_f64(qt, qt.shape());
    m = dense_f64(mask, attention_geometry::scores(qt.shape(), ks));
  }
  /// The scores of query row i of head h in batch b, into s (size tk).
  void scores(index_t b, index_t h, index_t i, std::vector<double>& s) const {
    const index_t kh = h / (g.h / g.hk);
    const double* qi = &q[static_cast<std::size_t>(((b * g.h + h) * g.tq + i) * g.d)];
    const double* mi = &m[static_cast<std::size_t>(((b * g.h + h) * g.tq + i) * g.tk)];
    for (index_t j = 0; j < g.tk; ++j) {
      const double* kj = &k[static_cast<std::size_t>(((b * g.hk + kh) * g.tk + j) * g.d)];
      double dot = 0;
      for (index_t c = 0; c < g.d; ++c) dot += qi[c] * kj[c];
      dot *= scale;
      const bool keep = (!bool_mask || mi[j] != 0) && (!causal || j <= i);
      s[static_cast<std::size_t>(j)] = !keep ? -std::numeric_limits<double>::infinity() : bool_mask ? dot : dot + mi[j];
    }
  }
};

KILN_LAZY any_tensor run_attention(const node& n, const any_tensor& q, const any_tensor& k, const any_tensor& v,
                                   const any_tensor& mask, const dims& shape) {
  attention_reference a(n, q, k.shape(), v.shape(), mask);
  const attention_geometry& g = a.g;
  a.k = dense_f64(k, k.shape());
  a.v = dense_f64(v, v.shape());
  any_tensor out(n.dt, shape);
  std::vector<double> s(static_cast<std::size_t>(g.tk));
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      for (index_t b = 0; b < g.lead; ++b)
        for (index_t h = 0; h < g.h; ++h)
          for (index_t i = 0; i < g.tq; ++i) {
            a.scores(b, h, i, s);
            double mx = -std::numeric_limits<double>::infinity(), z = 0;
            for (double x : s) mx = std::max(mx, x);
            for (double& x : s) z += (x = std::exp(x - mx));  // NaN for a row with every key masked
            const index_t row = ((b * g.h + h) * g.tq + i) * (g.dv + 1), kh = h / (g.h / g.hk);
            for (index_t c = 0; c < g.dv; ++c) {
              double acc = 0;
              for (index_t j = 0; j < g.tk; ++j) acc += s[static_cast<std::size_t>(j)] * a.v[static_cast<std::size_t>(((b * g.hk + kh) * g.tk + j) * g.dv + c)];
              store<D>(out.bytes(), row + c, static_cast<compute_t<D>>(acc / z));
            }
            store<D>(out.bytes(), row + g.dv, static_cast<compute_t<D>>(mx + std::log(z)));
          }
    }
  });
  return out;
}

/// Rows of dq, then of dk ++ dv (ops.hpp), by the chain rule through the softmax in double:
/// dS = P (dP - D), dP = dO v^T, D = rowsum(dO o) - g_lse.
KILN_LAZY any_tensor run_attention_grad(const node& n, const any_tensor& q, const any_tensor& k, const any_tensor& v,
                                        const any_tensor& mask, const any_tensor& y, const any_tensor& go, const dims& shape) {
  attention_reference a(n, q, k.shape(), v.shape(), mask);
  const attention_geometry& g = a.g;
  const index_t d = g.d, w = d + g.dv, yw = g.dv + 1, gw = go.shape().e[go.rank() - 1];
  a.k = dense_f64(k, k.shape());
  a.v = dense_f64(v, v.shape());
  const std::vector<double> yd = dense_f64(y, y.shape()), gd = dense_f64(go, go.shape());
  const index_t rows = g.h * g.tq + g.hk * g.tk;
  std::vector<double> res(static_cast<std::size_t>(g.lead * rows * w), 0.0), s(static_cast<std::size_t>(g.tk));
  for (index_t b = 0; b < g.lead; ++b)
    for (index_t h = 0; h < g.h; ++h)
      for (index_t i = 0; i < g.tq; ++i) {
        a.scores(b, h, i, s);
        const index_t qrow = (b * g.h + h) * g.tq + i;
        const double* oi = &yd[static_cast<std::size_t>(qrow * yw)];
        const double* doi = &gd[static_cast<std::size_t>(qrow * gw)];
        const double lse = oi[g.dv], glse = gw > g.dv ? doi[g.dv] : 0.0;
        double dd = -glse;
        for (index_t c = 0; c < g.dv; ++c) dd += doi[c] * oi[c];
        const index_t kh = h / (g.h / g.hk);
        double* dq = &res[static_cast<std::size_t>((b * rows + h * g.tq + i) * w)];
        for (index_t j = 0; j < g.tk; ++j) {
          const double p = std::exp(s[static_cast<std::size_t>(j)] - lse);
          const index_t kvrow = (b * g.hk + kh) * g.tk + j;
          const double* kj = &a.k[static_cast<std::size_t>(kvrow * d)];
          const double* vj = &a.v[static_cast<std::size_t>(kvrow * g.dv)];
          double dp = 0;
          for (index_t c = 0; c < g.dv; ++c) dp += doi[c] * vj[c];
          // dS = P (dP - D), the scaled score's adjoint; q's and k's carry the scale
          const double sds = a.scale * p * (dp - dd);
          double* dkv = &res[static_cast<std::size_t>((b * rows + g.h * g.tq + kh * g.tk + j) * w)];
          const double* qi = &a.q[static_cast<std::size_t>(((b * g.h + h) * g.tq + i) * d)];
          for (index_t c = 0; c < d; ++c) {
            dq[c] += sds * kj[c];
            dkv[c] += sds * qi[c];
          }
          for (index_t c = 0; c < g.dv; ++c) dkv[d + c] += p * doi[c];
        }
      }
  any_tensor out(n.dt, shape);
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D))
      for (std::size_t i = 0; i < res.size(); ++i) store<D>(out.bytes(), static_cast<index_t>(i), static_cast<compute_t<D>>(res[i]));
  });
  return out;
}

/// cumsum and cumprod (n.o) along n.axis.
KILN_LAZY any_tensor run_scan(const node& n, const any_tensor& x) {
  const bool product = n.o == op::cumprod;
  any_tensor out(n.dt, x.shape());
  const index_t len = x.shape().e[n.axis];
  const index_t stride = out.numel() == 0 ? 0 : contiguous_strides(x.shape()).e[n.axis];
  visit(n.dt, [&]<dtype D>() {
    if constexpr (D == dtype::boolean || D == dtype::i32) {
      throw std::logic_error("kiln: eager: a scan of bool or i32 (capture casts to i64)");
    } else {
      using acc_t = std::conditional_t<is_floating(D), long double, std::uint64_t>;  // (unsigned: i64 wraps)
      index_t k = 0;
      for_each_index(x.shape(), [&](const index_t* ii) {
        const index_t at = k++;
        if (ii[n.axis] != 0) return;  // one line per first element along the axis
        std::array<index_t, max_rank> idx{};
        std::copy(ii, ii + x.rank(), idx.begin());
        acc_t acc = product ? 1 : 0;
        for (index_t s = 0; s < len; ++s) {
          const index_t j = n.value != 0 ? len - 1 - s : s;
          idx[static_cast<std::size_t>(n.axis)] = j;
          const auto v = static_cast<acc_t>(load<D>(x.bytes(), x.offset_of(idx.data())));
          acc = product ? acc_t(acc * v) : acc_t(acc + v);
          store<D>(out.bytes(), at + j * stride, static_cast<compute_t<D>>(acc));
        }
      });
    }
  });
  return out;
}

KILN_LAZY any_tensor run_argsort(const node& n, const any_tensor& x) {
  any_tensor out(dtype::i64, x.shape());
  const index_t len = x.shape().e[n.axis];
  const index_t stride = out.numel() == 0 ? 0 : contiguous_strides(x.shape()).e[n.axis];
  std::int64_t* o = out.data<std::int64_t>();
  visit(x.dt(), [&]<dtype D>() {
    index_t k = 0;
    for_each_index(x.shape(), [&](const index_t* ii) {
      const index_t at = k++;
      if (ii[n.axis] != 0) return;
      std::array<index_t, max_rank> idx{};
      std::copy(ii, ii + x.rank(), idx.begin());
      std::vector<std::pair<compute_t<D>, std::int64_t>> line;
      for (index_t j = 0; j < len; ++j) {
        idx[static_cast<std::size_t>(n.axis)] = j;
        line.emplace_back(load<D>(x.bytes(), x.offset_of(idx.data())), j);
      }
      // insertion sort: stable, and independent of the CPU backend's std::stable_sort
      for (std::size_t i = 1; i < line.size(); ++i)
        for (std::size_t j = i; j > 0 && ops::sorts_before<D>(line[j].first, line[j - 1].first, n.value != 0); --j)
          std::swap(line[j], line[j - 1]);
      for (index_t j = 0; j < len; ++j) o[at + j * stride] = line[static_cast<std::size_t>(j)].second;
    });
  });
  return out;
}

KILN_LAZY any_tensor run_rand(const node& n, const dims& like, const any_tensor& seed) {
  any_tensor out(dtype::f32, like);
  const philox r(static_cast<std::uint64_t>(load<dtype::i64>(seed.bytes(), 0)), n.axes);
  float* p = out.data<float>();
  for (index_t i = 0; i < out.numel(); ++i) p[i] = r.uniform24(static_cast<std::uint64_t>(i));
  return out;
}

/// conv2d, max_pool2d and avg_pool2d computed directly (window by window, in double): the
/// references their decompositions are tested against.
KILN_LAZY any_tensor run_windowed(const node& n, const any_tensor* in, const dims& o) {
  const window2d w = window_of(n);
  const any_tensor& x = in[0];
  const bool conv = n.o == op::conv2d;
  any_tensor out(n.dt, o);
  visit(n.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      const index_t cin = x.shape().e[1], h = x.shape().e[2], wd = x.shape().e[3];
      const auto xs = x.strides();
      for_each_index(o, [&](const index_t* q) {  // q = (batch, channel, oy, ox)
        double acc = conv ? 0.0 : n.o == op::max_pool2d ? -std::numeric_limits<double>::infinity() : 0.0;
        const index_t c0 = conv ? 0 : q[1], c1 = conv ? cin : q[1] + 1;
        for (index_t c = c0; c < c1; ++c)
          for (index_t ky = 0; ky < w.kh; ++ky)
            for (index_t kx = 0; kx < w.kw; ++kx) {
              const index_t iy = q[2] * w.sh - w.ph + ky * w.dh, ix = q[3] * w.sw - w.pw + kx * w.dw;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;  // padding: 0, or -inf for max
              const double v = load<D>(x.bytes(), q[0] * xs.e[0] + c * xs.e[1] + iy * xs.e[2] + ix * xs.e[3]);
              if (conv) {
                const any_tensor& k = in[1];
                acc += v * static_cast<double>(load<D>(k.bytes(), q[1] * k.strides().e[0] + c * k.strides().e[1] +
                                                                     ky * k.strides().e[2] + kx * k.strides().e[3]));
              } else if (n.o == op::max_pool2d) {
                acc = std::isnan(acc) || std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, v);
              } else {
                acc += v;
              }
            }
        if (conv && in[2].rank() == 1) acc += load<D>(in[2].bytes(), q[1] * in[2].strides().e[0]);
        if (n.o == op::avg_pool2d) acc /= static_cast<double>(w.size());
        store<D>(out.bytes(), out.offset_of(q), static_cast<compute_t<D>>(acc));
      });
    } else {
      throw std::logic_error("kiln: eager: " + std::string(name(n.o)) + " of integers reached the backend");
    }
  });
  return out;
}

/// The composite ops this backend computes directly (in double where it sums), the references
/// their decompositions are tested against.
constexpr bool has_direct_rule(op o) {
  switch (o) {
    case op::relu: case op::sigmoid: case op::silu: case op::gelu: case op::gelu_tanh: case op::mean: case op::var:
    case op::softmax: case op::log_softmax: case op::layer_norm: case op::linear: case op::mse_loss:
    case op::cross_entropy: case op::conv2d: case op::max_pool2d: case op::avg_pool2d: return true;
    default: return false;
  }
}

/// Any other composite op runs its decomposition (passes/decompose.hpp) on these inputs, node by
/// node: a new composite op needs no code here.
KILN_LAZY any_tensor run_decomposed(const node& n, const any_tensor* in) {
  graph g;
  g.leaves = n.nin();
  node x = n;
  for (int j = 0; j < n.nin(); ++j) {
    node leaf = passes::builder::make(op::input, in[j].dt(), in[j].shape());
    leaf.slot = j;
    leaf.set_name("operand");
    x.in[j] = g.add(leaf);
  }
  g.outputs.push_back(g.add(x));
  return eager::run(passes::decompose(g), std::vector<any_tensor>(in, in + n.nin()))[0];
}

KILN_LAZY_DEF any_tensor run_node(const node& n, const any_tensor* in) {
  // the catalogue's rule (graph.hpp's infer) checks the operands' shapes and gives the result's:
  // this backend has no shape rule of its own
  const dims out = resolve_shape(n, [&](int j) { return operand{op::input, in[j].dt(), in[j].shape()}; });
  if (!is_primitive(n.o) && !has_direct_rule(n.o)) return run_decomposed(n, in);
  switch (kind_of(n.o)) {
    case op_kind::unary: return run_unary(n, in[0]);
    case op_kind::binary: return run_binary(n, in[0], in[1], out);
    case op_kind::ternary: return run_where(n, in[0], in[1], in[2], out);
    case op_kind::reduce: return run_reduce(n, in[0], out);
    case op_kind::matmul: return run_matmul(n, in[0], in[1], out);
    case op_kind::cast: {
      any_tensor out(n.dt, in[0].shape());
      out.copy_from(in[0]);
      return out;
    }
    case op_kind::shape:
      switch (n.o) {
        case op::reshape: return in[0].contiguous().reshape(out);
        case op::permute: {
          int p[max_rank];
          for (int i = 0; i < n.shape.rank; ++i) p[i] = n.perm[i];  // axis_perm unpacks
          return in[0].permute(p, n.shape.rank);
        }
        case op::broadcast: return run_broadcast(n, in[0], out);
        case op::slice: return in[0].slice(n.axis, n.begin, n.end, n.step);
        case op::concat: return run_concat(n, in[0], in[1], out);
        case op::iota: {
          any_tensor r(n.dt, out);
          visit(n.dt, [&]<dtype D>() {
            for (index_t i = 0; i < r.numel(); ++i) store<D>(r.bytes(), i, static_cast<compute_t<D>>(i));
          });
          return r;
        }
        case op::numel: {
          index_t count = 1;
          for (int i = 0; i < in[0].rank(); ++i)
            if (n.axes & (1u << i)) count *= in[0].shape().e[i];
          any_tensor r(n.dt, dims{});
          visit(n.dt, [&]<dtype D>() { store<D>(r.bytes(), 0, static_cast<compute_t<D>>(count)); });
          return r;
        }
        default: break;
      }
      break;
    case op_kind::constant: {
      any_tensor r(n.dt, dims{});
      visit(n.dt, [&]<dtype D>() { store<D>(r.bytes(), 0, static_cast<compute_t<D>>(n.value)); });
      return r;
    }
    case op_kind::composite:
      switch (n.o) {
        case op::softmax:
        case op::log_softmax: return run_softmax(n, in[0]);
        case op::layer_norm: return run_layer_norm(n, in[0], in[1], in[2], in[3]);
        case op::linear: {
          node mm = n;
          mm.o = op::matmul;
          node add = n;
          add.o = op::add;
          // (a vector input: one row)
          const any_tensor x = in[0].rank() == 1 ? in[0].reshape(dims{1, in[0].shape().e[0]}) : in[0];
          const any_tensor product[2] = {x, in[1].transpose(0, 1)};
          const any_tensor sum[2] = {run_node(mm, product), in[2]};
          const any_tensor y = run_node(add, sum);
          return in[0].rank() == 1 ? y.reshape(dims{y.shape().e[1]}) : y;
        }
        case op::mse_loss: return run_mse(n, in[0], in[1]);
        case op::cross_entropy: return run_cross_entropy(n, in[0], in[1]);
        case op::conv2d:
        case op::max_pool2d:
        case op::avg_pool2d: return run_windowed(n, in, out);
        default: break;
      }
      break;
    case op_kind::movement:
      switch (n.o) {
        case op::gather: return run_gather(n, in[0], in[1], out);
        case op::scatter_add: return run_scatter_add(n, in[0], in[1], in[2].shape());
        case op::unfold: return run_unfold(n, in[0], out);
        case op::fold: return run_fold(n, in[0], out);
        case op::cumsum:
        case op::cumprod: return run_scan(n, in[0]);
        case op::argsort: return run_argsort(n, in[0]);
        case op::attention: return run_attention(n, in[0], in[1], in[2], in[3], out);
        case op::attention_grad: return run_attention_grad(n, in[0], in[1], in[2], in[3], in[4], in[5], out);
        default: break;
      }
      break;
    case op_kind::random: return run_rand(n, out, in[1]);
    case op_kind::leaf:
    case op_kind::autodiff:  // expanded by passes::differentiate before a backend runs
    case op_kind::tuple: break;
  }
  throw std::logic_error("kiln: eager: no rule for op " + std::string(name(n.o)));
}
#endif  // KILN_DEFINE_RUNTIME

/// v, or a copy of it if it shares storage with a leaf: results never alias the caller's inputs.
inline any_tensor unaliased(const any_tensor& v, const std::vector<any_tensor>& leaves) {
  for (const any_tensor& l : leaves)
    if (v.shares_storage(l)) return v.clone();
  return v;
}

}  // namespace detail

/// Evaluates every node of `g` in order; leaves take their values from `leaves` (by slot).
/// Returns the graph's outputs, never aliasing a leaf's storage.
#if KILN_DEFINE_RUNTIME
KILN_LAZY_DEF std::vector<any_tensor> run_graph(const graph_span& g, const std::vector<any_tensor>& leaves) {
  if (static_cast<int>(leaves.size()) != g.leaves)
    throw std::invalid_argument("kiln: eager: the graph has " + std::to_string(g.leaves) + " leaves, got " +
                                std::to_string(leaves.size()) + " values");
  std::vector<any_tensor> vals(g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const node& n = g.nodes[i];
    if (kind_of(n.o) == op_kind::leaf) {
      const any_tensor& v = leaves[static_cast<std::size_t>(n.slot)];
      if (!v.defined())
        throw std::invalid_argument("kiln: eager: no value for " + placeholder_what(n.o, n.label()));
      if (v.dt() != n.dt) throw dtype_error(placeholder_what(n.o, n.label()), n.dt, v.dt());
      vals[i] = v;
      continue;
    }
    any_tensor in[max_inputs];
    for (int j = 0; j < n.nin(); ++j) in[j] = vals[static_cast<std::size_t>(n.in[j])];
    vals[i] = detail::run_node(n, in);
  }
  std::vector<any_tensor> outs;
  for (int o : g.outputs) outs.push_back(detail::unaliased(vals[static_cast<std::size_t>(o)], leaves));
  return outs;
}
#endif  // KILN_DEFINE_RUNTIME

/// Runs a fused, planned schedule kernel by kernel, in kernel order, keeping only what the
/// plan keeps: a value not written by its kernel is dropped when the kernel ends, and a value
/// in a scratch buffer is dropped when another value takes the buffer. A kernel that reads a
/// dropped value means the schedule is wrong; this throws std::logic_error saying so. Used to
/// test the fusion and memory-planning passes.
template <class S>
std::vector<any_tensor> run_schedule(const S& s, const std::vector<any_tensor>& leaves) {
  const auto& g = s.g;
  const std::size_t n = g.nodes.size();
  if (static_cast<int>(leaves.size()) != g.leaves) throw std::invalid_argument("kiln: eager: wrong leaf count");
  std::vector<any_tensor> vals(n);
  std::vector<dims> shapes(n);  // of every computed value, kept when the value is dropped
  std::vector<char> shaped(n, 0);
  std::vector<int> occupant(s.buffers.size(), -1);
  // The shape of node i, from the graph run node by node up to i: for an operand whose values
  // are not read (iota's), whose kernel may come later than its reader's.
  std::vector<any_tensor> plain(n);
  std::size_t plain_done = 0;
  auto plain_shape = [&](int i) {
    for (; plain_done <= static_cast<std::size_t>(i); ++plain_done) {
      const node& x = g.nodes[plain_done];
      any_tensor in[max_inputs];
      for (int j = 0; j < x.nin(); ++j) in[j] = plain[static_cast<std::size_t>(x.in[j])];
      plain[plain_done] = kind_of(x.o) == op_kind::leaf ? leaves[static_cast<std::size_t>(x.slot)] : detail::run_node(x, in);
    }
    return plain[static_cast<std::size_t>(i)].shape();
  };
  // leaves, constants and views have no kernel: evaluate them on demand. An operand whose
  // values are not read (iota's, rand's) may be gone, or not computed yet: zeros of its shape
  // stand in for it.
  auto value = [&](auto& self, int i, bool values) -> any_tensor {
    const node& x = g.nodes[static_cast<std::size_t>(i)];
    if (kind_of(x.o) == op_kind::leaf) return leaves[static_cast<std::size_t>(x.slot)];
    if (s.kernel_of[static_cast<std::size_t>(i)] < 0) {
      any_tensor in[max_inputs];
      for (int j = 0; j < x.nin(); ++j) in[j] = self(self, x.in[j], values && reads_input_values(x.o, j));
      return detail::run_node(x, in);
    }
    const any_tensor& v = vals[static_cast<std::size_t>(i)];
    const int b = s.buffer_of[static_cast<std::size_t>(i)];
    if (!v.defined() || (b >= 0 && occupant[static_cast<std::size_t>(b)] != i)) {
      if (!values) return any_tensor(x.dt, shaped[static_cast<std::size_t>(i)] ? shapes[static_cast<std::size_t>(i)] : plain_shape(i));
      throw std::logic_error("kiln: schedule reads node " + std::to_string(i) + " (" + std::string(name(x.o)) +
                             ") after its value was dropped");
    }
    return v;
  };
  for (int k = 0; k < static_cast<int>(s.kernels.size()); ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      if (s.kernel_of[i] != k) continue;
      const node& x = g.nodes[i];
      any_tensor in[max_inputs];
      for (int j = 0; j < x.nin(); ++j) in[j] = value(value, x.in[j], reads_input_values(x.o, j));
      vals[i] = detail::run_node(x, in);
      shapes[i] = vals[i].shape();
      shaped[i] = 1;
      if (s.buffer_of[i] >= 0) occupant[static_cast<std::size_t>(s.buffer_of[i])] = static_cast<int>(i);
    }
    for (std::size_t i = 0; i < n; ++i)
      if (s.kernel_of[i] == k && !s.written[i]) vals[i] = any_tensor{};  // stays in registers: gone
  }
  std::vector<any_tensor> outs;
  for (int o : g.outputs) outs.push_back(detail::unaliased(value(value, o, true), leaves));
  return outs;
}

/// The eager backend (backend/backend.hpp): `kiln::eval(e, feeds, kiln::eager::backend)` runs
/// P's reference graph (as captured, or decomposed and differentiated when it has derivatives)
/// node by node, unfused: the reference every other backend is tested against.
struct backend_t {
  template <class P>
  static std::vector<any_tensor> run(const std::vector<any_tensor>& leaves, std::span<const any_tensor> into) {
    P::log_reference();
    return deliver(eager::run(P::reference(), leaves), into);
  }
};
inline constexpr backend_t backend{};

}  // namespace kiln::eager
