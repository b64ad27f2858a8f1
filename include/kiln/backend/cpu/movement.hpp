// kiln/backend/cpu/movement.hpp: the CPU routines of the ops that run as kernels of their own
// (gather, scatter_add, unfold, fold, cumsum, argsort, rand). Each is plain code over strided views, threaded
// over independent parts of its output; the arithmetic matches the eager reference: the same
// indices are rejected before anything is written, and rand draws the same numbers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/random.hpp"
#include "../../core/shape_rules.hpp"
#include "../../graph/graph.hpp"
#include "../../ops/bodies.hpp"
#include "parallel.hpp"
#include "runtime.hpp"

namespace kiln::cpu::detail {

/// The index values of an integer view, row-major, each checked against [0, rows).
KILN_LAZY std::vector<index_t> checked_indices(const char* who, const view& idx, index_t rows);

/// Row k of a view whose leading `lead` axes are the index's (shape [...index, ...row]), and
/// row v of a table: views of one row.
inline view row_of(const view& t, int lead, const dims& lead_shape, index_t k) {
  view r = t;
  r.shape.rank = t.shape.rank - lead;
  for (int a = 0; a < r.shape.rank; ++a) {
    r.shape.e[a] = t.shape.e[lead + a];
    r.strides.e[a] = t.strides.e[lead + a];
  }
  index_t off = 0;
  for (int a = lead - 1; a >= 0; --a) {
    off += (k % lead_shape.e[a]) * t.strides.e[a];
    k /= lead_shape.e[a];
  }
  r.p = t.p + off * static_cast<index_t>(size_of(t.dt));
  return r;
}

/// Row k of out = row idx[k] of the table (every index checked before anything is written).
KILN_LAZY void run_gather(const view& table, const view& idx, const view& out);

/// Zeros shaped like out, with src's rows added at the indexed rows; floating-point sums in
/// double, as the eager reference; threads over the columns of a row, so each output element
/// is summed by one thread in index order (the same result for any thread count). The
/// accumulator comes from the storage cache (block), so a large one, an embedding table's
/// gradient, reuses mapped memory from call to call instead of faulting in fresh pages.
KILN_LAZY void run_scatter_add(const view& idx, const view& src, const view& out);

/// The output positions [lo, hi) of a window row whose input position ix = ox s - p + k d lies
/// in [0, n): the rest of the row reads padding.
struct span {
  index_t lo, hi;
};
inline span inside(index_t positions, index_t n, index_t s, index_t off) {
  // ox s + off in [0, n)  <=>  ox in [ceil(-off / s), floor((n - 1 - off) / s)]
  const auto ceil_div = [](index_t a, index_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const auto floor_div = [](index_t a, index_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  index_t lo = ceil_div(-off, s), hi = floor_div(n - 1 - off, s) + 1;
  lo = lo < 0 ? 0 : lo > positions ? positions : lo;
  hi = hi < lo ? lo : hi > positions ? positions : hi;
  return {lo, hi};
}

/// im2col: for each image and channel (threads over them), each kernel offset (ky, kx) gives a
/// row of the output whose segment for window row oy is the input row iy, shifted and strided,
/// with padding around it: a copy when strides are 1, a strided loop otherwise.
KILN_LAZY void run_unfold(const view& x, const view& out, const window2d& w, double pad);

/// col2im: the same walk, adding each window row's segment into the input row it came from
/// (a plane accumulator per image and channel, so threads never share an output element).
KILN_LAZY void run_fold(const view& cols, const view& out, const window2d& w);

/// Running sums along an axis (from its end if reverse), accumulated in double for floats (as
/// PyTorch's CPU cumsum) and in i64 wrapping for integers; threads over the other axes.
KILN_LAZY void run_scan(const view& x, const view& out, int axis, bool reverse, bool product);

/// The indices (i64) that sort each line along an axis, stably (NaN above every number);
/// threads over the lines.
KILN_LAZY void run_argsort(const view& x, const view& out, int axis, bool descending);

/// Uniform [0, 1) floats, element i (row-major) = philox(seed, stream).uniform24(i).
KILN_LAZY void run_rand(const view& seed, const view& out, std::uint32_t stream);

#if KILN_DEFINE_RUNTIME
KILN_LAZY_DEF std::vector<index_t> checked_indices(const char* who, const view& idx, index_t rows) {
  std::vector<index_t> out;
  out.reserve(static_cast<std::size_t>(idx.shape.numel()));
  for_each_index(idx.shape, [&](const index_t* ii) {
    index_t off = 0;
    for (int a = 0; a < idx.shape.rank; ++a) off += ii[a] * idx.strides.e[a];
    const index_t v = idx.dt == dtype::i32 ? reinterpret_cast<const std::int32_t*>(idx.p)[off]
                                           : static_cast<index_t>(reinterpret_cast<const std::int64_t*>(idx.p)[off]);
    if (v < 0 || v >= rows)
      throw std::out_of_range(std::string("kiln: ") + who + ": index " + std::to_string(v) + " at position " +
                              std::to_string(out.size()) + " is outside [0, " + std::to_string(rows) + ")");
    out.push_back(v);
  });
  return out;
}

KILN_LAZY_DEF void run_gather(const view& table, const view& idx, const view& out) {
  const std::vector<index_t> rows = checked_indices("gather", idx, table.shape.e[0]);
  const dims table_rows{table.shape.e[0]};
  parallel_for(static_cast<index_t>(rows.size()), 64, [&](index_t b, index_t e) {
    for (index_t k = b; k < e; ++k)
      copy_elements(row_of(out, idx.shape.rank, idx.shape, k), row_of(table, 1, table_rows, rows[static_cast<std::size_t>(k)]));
  });
}

KILN_LAZY_DEF void run_scatter_add(const view& idx, const view& src, const view& out) {
  const std::vector<index_t> rows = checked_indices("scatter_add", idx, out.shape.e[0]);
  const index_t width = out.shape.numel() / (out.shape.e[0] > 0 ? out.shape.e[0] : 1);
  visit(out.dt, [&]<dtype D>() {
    if constexpr (D != dtype::boolean) {
      using acc_t = std::conditional_t<is_floating(D), double, compute_t<D>>;
      const auto numel = static_cast<std::size_t>(out.shape.numel());
      block mem(numel * sizeof(acc_t));
      acc_t* const acc = reinterpret_cast<acc_t*>(mem.data());
      std::fill(acc, acc + numel, acc_t(0));
      const int lead = idx.shape.rank;
      auto add = [](acc_t& a, storage_t<D> v) {
        const auto x = static_cast<acc_t>(static_cast<compute_t<D>>(v));
        if constexpr (std::is_integral_v<acc_t>)
          a = static_cast<acc_t>(static_cast<std::make_unsigned_t<acc_t>>(a) + static_cast<std::make_unsigned_t<acc_t>>(x));
        else a += x;
      };
      parallel_for(width, 256, [&](index_t c0, index_t c1) {
        for (std::size_t k = 0; k < rows.size(); ++k) {
          const view s = row_of(src, lead, idx.shape, static_cast<index_t>(k));
          const auto* sp = reinterpret_cast<const storage_t<D>*>(s.p);
          acc_t* a = acc + rows[k] * width;
          if (s.shape.rank == 1) {  // rows of one axis (an embedding's): columns c0 .. c1 directly
            const index_t st = s.strides.e[0];
            for (index_t c = c0; c < c1; ++c) add(a[c], sp[c * st]);
            continue;
          }
          index_t c = 0;
          for_each_index(s.shape, [&](const index_t* ri) {
            if (c >= c0 && c < c1) {
              index_t off = 0;
              for (int d = 0; d < s.shape.rank; ++d) off += ri[d] * s.strides.e[d];
              add(a[c], sp[off]);
            }
            ++c;
          });
        }
      });
      index_t i = 0;
      for_each_index(out.shape, [&](const index_t* oi) {
        index_t off = 0;
        for (int d = 0; d < out.shape.rank; ++d) off += oi[d] * out.strides.e[d];
        reinterpret_cast<storage_t<D>*>(out.p)[off] = storage_t<D>(static_cast<compute_t<D>>(acc[static_cast<std::size_t>(i++)]));
      });
    } else {
      throw std::logic_error("kiln: cpu: scatter_add of bool");
    }
  });
}

KILN_LAZY_DEF void run_unfold(const view& x, const view& out, const window2d& w, double pad) {
  const index_t n = x.shape.e[0], c = x.shape.e[1], h = x.shape.e[2], wd = x.shape.e[3];
  const index_t ho = window_positions(h, w.kh, w.sh, w.ph, w.dh), wo = window_positions(wd, w.kw, w.sw, w.pw, w.dw);
  visit(out.dt, [&]<dtype D>() {
    using T = storage_t<D>;
    const T fill = T(static_cast<compute_t<D>>(pad));
    const index_t xs1 = x.strides.e[1], xs2 = x.strides.e[2], xs3 = x.strides.e[3];
    const index_t os1 = out.strides.e[1], os2 = out.strides.e[2];
    parallel_for(n * c, 1, [&](index_t b, index_t e) {
      for (index_t q = b; q < e; ++q) {
        const index_t img = q / c, ch = q % c;
        const T* src = reinterpret_cast<const T*>(x.p) + img * x.strides.e[0] + ch * xs1;
        T* dst = reinterpret_cast<T*>(out.p) + img * out.strides.e[0];
        for (index_t ky = 0; ky < w.kh; ++ky)
          for (index_t kx = 0; kx < w.kw; ++kx) {
            T* row = dst + ((ch * w.kh + ky) * w.kw + kx) * os1;
            const index_t off = kx * w.dw - w.pw;
            const span in = inside(wo, wd, w.sw, off);
            for (index_t oy = 0; oy < ho; ++oy) {
              T* d = row + oy * wo * os2;
              const index_t iy = oy * w.sh - w.ph + ky * w.dh;
              if (iy < 0 || iy >= h) {
                for (index_t ox = 0; ox < wo; ++ox) d[ox * os2] = fill;
                continue;
              }
              const T* r = src + iy * xs2;
              for (index_t ox = 0; ox < in.lo; ++ox) d[ox * os2] = fill;
              if (w.sw == 1 && xs3 == 1 && os2 == 1) {
                std::memcpy(d + in.lo, r + in.lo + off, static_cast<std::size_t>(in.hi - in.lo) * sizeof(T));
              } else {
                for (index_t ox = in.lo; ox < in.hi; ++ox) d[ox * os2] = r[(ox * w.sw + off) * xs3];
              }
              for (index_t ox = in.hi; ox < wo; ++ox) d[ox * os2] = fill;
            }
          }
      }
    });
  });
}

KILN_LAZY_DEF void run_fold(const view& cols, const view& out, const window2d& w) {
  const index_t n = out.shape.e[0], c = out.shape.e[1], h = out.shape.e[2], wd = out.shape.e[3];
  const index_t ho = window_positions(h, w.kh, w.sh, w.ph, w.dh), wo = window_positions(wd, w.kw, w.sw, w.pw, w.dw);
  visit(out.dt, [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      using T = storage_t<D>;
      using C = compute_t<D>;
      const index_t cs1 = cols.strides.e[1], cs2 = cols.strides.e[2];
      parallel_for(n * c, 1, [&](index_t b, index_t e) {
        std::vector<C> acc(static_cast<std::size_t>(h * wd));
        for (index_t q = b; q < e; ++q) {
          const index_t img = q / c, ch = q % c;
          std::fill(acc.begin(), acc.end(), C(0));
          const T* src = reinterpret_cast<const T*>(cols.p) + img * cols.strides.e[0];
          for (index_t ky = 0; ky < w.kh; ++ky)
            for (index_t kx = 0; kx < w.kw; ++kx) {
              const T* row = src + ((ch * w.kh + ky) * w.kw + kx) * cs1;
              const index_t off = kx * w.dw - w.pw;
              const span in = inside(wo, wd, w.sw, off);
              for (index_t oy = 0; oy < ho; ++oy) {
                const index_t iy = oy * w.sh - w.ph + ky * w.dh;
                if (iy < 0 || iy >= h) continue;
                const T* s = row + oy * wo * cs2;
                C* a = acc.data() + iy * wd;
                if (w.sw == 1 && cs2 == 1) {
                  for (index_t ox = in.lo; ox < in.hi; ++ox) a[ox + off] += static_cast<C>(s[ox]);
                } else {
                  for (index_t ox = in.lo; ox < in.hi; ++ox) a[ox * w.sw + off] += static_cast<C>(s[ox * cs2]);
                }
              }
            }
          T* dst = reinterpret_cast<T*>(out.p) + img * out.strides.e[0] + ch * out.strides.e[1];
          for (index_t y = 0; y < h; ++y)
            for (index_t xx = 0; xx < wd; ++xx)
              dst[y * out.strides.e[2] + xx * out.strides.e[3]] = T(acc[static_cast<std::size_t>(y * wd + xx)]);
        }
      });
    } else {
      throw std::logic_error("kiln: cpu: fold of integers");
    }
  });
}

/// The offsets of the first element of each line along `axis` in x and in out (none if the
/// axis is empty).
KILN_LAZY void line_starts(const view& x, const view& out, int axis, std::vector<index_t>& xo, std::vector<index_t>& oo) {
  dims lines = x.shape;
  lines.e[axis] = 1;
  if (x.shape.e[axis] == 0) return;
  xo.reserve(static_cast<std::size_t>(lines.numel()));
  oo.reserve(static_cast<std::size_t>(lines.numel()));
  for_each_index(lines, [&](const index_t* ii) {
    index_t a = 0, b = 0;
    for (int d = 0; d < lines.rank; ++d) a += ii[d] * x.strides.e[d], b += ii[d] * out.strides.e[d];
    xo.push_back(a);
    oo.push_back(b);
  });
}

/// cumsum (product false; from the end if reverse) and cumprod along axis, accumulated in double
/// for floats (as PyTorch's CPU scans) and in wrapping 64 bits for i64.
KILN_LAZY_DEF void run_scan(const view& x, const view& out, int axis, bool reverse, bool product) {
  const index_t n = x.shape.e[axis];
  std::vector<index_t> xo, oo;
  line_starts(x, out, axis, xo, oo);
  const index_t xs = x.strides.e[axis], os = out.strides.e[axis];
  visit(out.dt, [&]<dtype D>() {
    if constexpr (D != dtype::boolean && D != dtype::i32) {
      using acc_t = std::conditional_t<is_floating(D), double, std::uint64_t>;  // (unsigned: i64 wraps)
      const auto* xp = reinterpret_cast<const storage_t<D>*>(x.p);
      auto* op = reinterpret_cast<storage_t<D>*>(out.p);
      const index_t grain = std::max<index_t>(1, 4096 / std::max<index_t>(n, 1));
      parallel_for(static_cast<index_t>(xo.size()), grain, [&](index_t b, index_t e) {
        for (index_t l = b; l < e; ++l) {
          acc_t acc = product ? 1 : 0;
          const index_t x0 = xo[static_cast<std::size_t>(l)], o0 = oo[static_cast<std::size_t>(l)];
          for (index_t k = 0; k < n; ++k) {
            const index_t j = reverse ? n - 1 - k : k;
            const auto v = static_cast<acc_t>(static_cast<compute_t<D>>(xp[x0 + j * xs]));
            acc = product ? acc_t(acc * v) : acc_t(acc + v);
            op[o0 + j * os] = storage_t<D>(static_cast<compute_t<D>>(acc));
          }
        }
      });
    } else {
      throw std::logic_error("kiln: cpu: a scan of bool or i32 (capture casts to i64)");
    }
  });
}

KILN_LAZY_DEF void run_argsort(const view& x, const view& out, int axis, bool descending) {
  const index_t n = x.shape.e[axis];
  std::vector<index_t> xo, oo;
  line_starts(x, out, axis, xo, oo);
  const index_t xs = x.strides.e[axis], os = out.strides.e[axis];
  auto* op = reinterpret_cast<std::int64_t*>(out.p);
  visit(x.dt, [&]<dtype D>() {
    const auto* xp = reinterpret_cast<const storage_t<D>*>(x.p);
    const index_t grain = std::max<index_t>(1, 4096 / std::max<index_t>(n, 1));
    parallel_for(static_cast<index_t>(xo.size()), grain, [&](index_t b, index_t e) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
      for (index_t l = b; l < e; ++l) {
        const storage_t<D>* line = xp + xo[static_cast<std::size_t>(l)];
        for (index_t k = 0; k < n; ++k) idx[static_cast<std::size_t>(k)] = k;
        std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t i, std::int64_t j) {
          return ops::sorts_before<D>(static_cast<compute_t<D>>(line[i * xs]), static_cast<compute_t<D>>(line[j * xs]),
                                      descending);
        });
        for (index_t k = 0; k < n; ++k) op[oo[static_cast<std::size_t>(l)] + k * os] = idx[static_cast<std::size_t>(k)];
      }
    });
  });
}

KILN_LAZY_DEF void run_rand(const view& seed, const view& out, std::uint32_t stream) {
  const philox r(static_cast<std::uint64_t>(*reinterpret_cast<const std::int64_t*>(seed.p)), stream);
  const index_t total = out.shape.numel();
  if (is_contiguous(out)) {
    float* p = reinterpret_cast<float*>(out.p);
    parallel_for((total + 3) / 4, 1024, [&](index_t b, index_t e) {
      for (index_t blk = b; blk < e; ++blk) {
        const auto w = r.block(static_cast<std::uint64_t>(blk));
        for (index_t j = 0; j < 4 && blk * 4 + j < total; ++j) p[blk * 4 + j] = philox::to_uniform24(w[static_cast<std::size_t>(j)]);
      }
    });
    return;
  }
  index_t i = 0;
  for_each_index(out.shape, [&](const index_t* oi) {
    index_t off = 0;
    for (int d = 0; d < out.shape.rank; ++d) off += oi[d] * out.strides.e[d];
    reinterpret_cast<float*>(out.p)[off] = r.uniform24(static_cast<std::uint64_t>(i++));
  });
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::cpu::detail
