// kiln/backend/cpu/runtime.hpp: the run-time side of one run of a schedule on the CPU: every
// node's actual shape (from the leaves' shapes, with the same checks and messages as the eager
// backend), where each computed value lives, and strided views of leaves, buffers and views of
// them (reshape, permute, slice, broadcast change strides, never copy, unless a reshape of a
// non-contiguous view needs a copy, as the eager backend's reshape does).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../../core/shape_rules.hpp"
#include "../../core/tensor.hpp"
#include "../../graph/graph.hpp"
#include "../../graph/resolve.hpp"
#include "parallel.hpp"

namespace kiln::cpu::detail {

/// A strided view of memory: the address of element 0, and strides in elements.
struct view {
  std::byte* p = nullptr;
  dtype dt = dtype::f32;
  dims shape{}, strides{};
};

/// An uninitialised allocation aligned like tensor storage (scratch buffers and temporaries),
/// from the same cache of large blocks (core/storage.hpp).
class block {
 public:
  block() = default;
  KILN_RUNTIME explicit block(std::size_t bytes);
  block(block&& o) noexcept : size_(o.size_), p_(std::exchange(o.p_, nullptr)) {}
  block& operator=(block&& o) noexcept {
    std::swap(size_, o.size_);
    std::swap(p_, o.p_);
    return *this;
  }
  KILN_RUNTIME ~block();
  std::byte* data() const { return p_; }

 private:
  std::size_t size_ = 0;
  std::byte* p_ = nullptr;
};

inline view view_of_tensor(const any_tensor& t) { return {t.bytes(), t.dt(), t.shape(), t.strides()}; }

inline view contiguous_view(std::byte* p, dtype dt, const dims& shape) { return {p, dt, shape, contiguous_strides(shape)}; }

inline bool is_contiguous(const view& v) {
  index_t expect = 1;
  for (int i = v.shape.rank - 1; i >= 0; --i) {
    if (v.shape.e[i] != 1 && v.strides.e[i] != expect) return false;
    expect *= v.shape.e[i];
  }
  return true;
}

/// Copies src's elements into dst (same shape and element size), through both views' strides.
KILN_RUNTIME void copy_elements(const view& dst, const view& src);

/// Writes v (converted to the view's dtype) into every element of a view.
KILN_RUNTIME void fill(const view& out, double v);

/// Strides (in elements) with which view v is read at each index of a value of shape `to`
/// that v broadcasts to (right-aligned; 0 where v has extent 1 or no axis).
inline dims broadcast_strides(const view& v, const dims& to) {
  dims s;
  s.rank = to.rank;
  for (int i = 0; i < to.rank; ++i) {
    const int j = v.shape.rank - to.rank + i;
    s.e[i] = j < 0 || v.shape.e[j] == 1 ? 0 : v.strides.e[j];
  }
  return s;
}

KILN_RUNTIME dims broadcast_or_throw(op o, const dims& a, const dims& b);

/// Strides that view a tensor of shape `from` with strides `st` as shape `to` without a copy
/// (the rule of torch's view(): each run of `from` axes that are contiguous among themselves
/// must be split exactly by `to`), or false when the layout does not allow it.
KILN_RUNTIME bool reshape_strides(const dims& from, const dims& st, const dims& to, dims& out);

/// The arrays of a frozen schedule, as pointers (so that the run-time code is not a template).
struct schedule_ref {
  const node* nodes = nullptr;
  std::size_t size = 0;
  int leaves = 0;
  const int* outputs = nullptr;
  std::size_t n_outputs = 0;
  const int* kernel_of = nullptr;
  const char* written = nullptr;
  const int* buffer_of = nullptr;
  std::size_t n_buffers = 0;

  template <class S>
  static schedule_ref of(const S& s) {
    return {s.g.nodes.data(), s.g.nodes.size(), s.g.leaves, s.g.outputs.data(), s.g.outputs.size(),
            s.kernel_of.data(), s.written.data(), s.buffer_of.data(), s.buffers.size()};
  }
};

/// One run of a schedule: run-time shapes of every node, the memory of every value a kernel
/// computes, and views of everything else, made when first asked for.
struct state {
  schedule_ref s;
  const std::vector<any_tensor>& leaves;
  std::vector<dims> shape;
  std::vector<view> dest;  ///< memory of values computed by kernels (p == nullptr: none yet)
  std::vector<view> views;
  std::vector<char> viewed;
  std::vector<block> temps;

  state(const schedule_ref& sched, const std::vector<any_tensor>& l)
      : s(sched), leaves(l), shape(sched.size), dest(sched.size), views(sched.size), viewed(sched.size, 0) {}

  const node& at(int i) const { return s.nodes[static_cast<std::size_t>(i)]; }

  /// A new contiguous temporary.
  view temp(dtype dt, const dims& s);

  /// The element count of node i's numel (a value, not memory).
  index_t numel_of(int i) const {
    const node& n = at(i);
    const dims& in = shape[static_cast<std::size_t>(n.in[0])];
    index_t count = 1;
    for (int a = 0; a < in.rank; ++a)
      if (n.axes & (1u << a)) count *= in.e[a];
    return count;
  }

  /// Node i as strided memory: a leaf, a kernel's value, or a view of one of those.
  view view_of(int i);

  /// Run-time shapes of every node, from the leaves' shapes; throws as the eager backend does.
  void resolve_shapes();
};

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME block::block(std::size_t bytes)
    : size_(kiln::detail::storage_cache::rounded_size(bytes)), p_(kiln::detail::storage_cache::get().allocate(size_)) {}

KILN_RUNTIME block::~block() { kiln::detail::storage_cache::get().release(p_, size_); }

/// Elements of U from s (stride ss, in elements; 0: one element repeated) to d (stride ds).
template <class U>
void copy_row(std::byte* d, index_t ds, const std::byte* s, index_t ss, index_t w) {
  U v;
  if (ss == 0) {
    std::memcpy(&v, s, sizeof(U));
    for (index_t k = 0; k < w; ++k) std::memcpy(d + k * ds * static_cast<index_t>(sizeof(U)), &v, sizeof(U));
    return;
  }
  for (index_t k = 0; k < w; ++k) {
    std::memcpy(&v, s + k * ss * static_cast<index_t>(sizeof(U)), sizeof(U));
    std::memcpy(d + k * ds * static_cast<index_t>(sizeof(U)), &v, sizeof(U));
  }
}
/// Copies of at least this many bytes are split among the threads: a plan's concats, slices
/// and outputs copied out ran on one thread while the team waited (attention's backward, its
/// k ++ v and value ++ cotangent, spent an eighth of its time so).
inline constexpr index_t parallel_copy_bytes = index_t{1} << 20;
/// The bytes a thread takes at a time of a split copy (enough to amortise taking it).
inline constexpr index_t copy_piece_bytes = index_t{64} << 10;

/// The bytes [lo, hi) that view-like (p, shape, strides) of `bytes`-sized elements touches.
inline std::pair<const std::byte*, const std::byte*> byte_span(const std::byte* p, const dims& shape,
                                                                const dims& strides, index_t bytes) {
  index_t lo = 0, hi = 0;
  for (int i = 0; i < shape.rank; ++i) {
    const index_t reach = (shape.e[i] - 1) * strides.e[i];
    (reach < 0 ? lo : hi) += reach;
  }
  return {p + lo * bytes, p + (hi + 1) * bytes};
}

/// Whether a copy of dst's elements from src may be split among threads: large, and the two
/// ranges apart (an overlapping copy must run in one order).
inline bool split_copy(const view& dst, const dims& src_strides, const std::byte* src, index_t bytes) {
  if (dst.shape.numel() * bytes < parallel_copy_bytes) return false;
  const auto [d0, d1] = byte_span(dst.p, dst.shape, dst.strides, bytes);
  const auto [s0, s1] = byte_span(src, dst.shape, src_strides, bytes);
  return d1 <= s0 || s1 <= d0;
}

/// Row by row over the last axis (src strides 0 where it broadcasts), with loops typed by the
/// element size: an index computation and a memcpy of run-time size per element made concat's
/// zero padding and strided copies run at a few hundred MB/s. Rows [r0, r1) in row-major order
/// over the other axes.
KILN_RUNTIME void copy_row_range(const view& dst, const dims& src_strides, const std::byte* src, index_t r0,
                                 index_t r1) {
  const auto bytes = static_cast<index_t>(size_of(dst.dt));
  const int r = dst.shape.rank;
  const index_t w = dst.shape.e[r - 1], ds = dst.strides.e[r - 1], ss = src_strides.e[r - 1];
  index_t idx[max_rank] = {};
  index_t a = 0, b = 0;
  for (index_t i = r - 2, q = r0; i >= 0; --i) {  // row r0's index over the other axes, and offsets
    idx[i] = q % dst.shape.e[i];
    q /= dst.shape.e[i];
    a += idx[i] * dst.strides.e[i];
    b += idx[i] * src_strides.e[i];
  }
  for (index_t k = r0; k < r1; ++k) {
    std::byte* d = dst.p + a * bytes;
    const std::byte* s = src + b * bytes;
    if (ds == 1 && ss == 1) std::memmove(d, s, static_cast<std::size_t>(w * bytes));
    else if (bytes == 1) copy_row<std::uint8_t>(d, ds, s, ss, w);
    else if (bytes == 2) copy_row<std::uint16_t>(d, ds, s, ss, w);
    else if (bytes == 4) copy_row<std::uint32_t>(d, ds, s, ss, w);
    else copy_row<std::uint64_t>(d, ds, s, ss, w);
    for (int i = r - 2; i >= 0; --i) {  // the next row, as an odometer
      a += dst.strides.e[i];
      b += src_strides.e[i];
      if (++idx[i] < dst.shape.e[i]) break;
      a -= idx[i] * dst.strides.e[i];
      b -= idx[i] * src_strides.e[i];
      idx[i] = 0;
    }
  }
}

KILN_RUNTIME void copy_rows(const view& dst, const dims& src_strides, const std::byte* src) {
  const auto bytes = static_cast<index_t>(size_of(dst.dt));
  const int r = dst.shape.rank;
  if (r == 0) {
    std::memcpy(dst.p, src, static_cast<std::size_t>(bytes));
    return;
  }
  const index_t w = dst.shape.e[r - 1], rows = w == 0 ? 0 : dst.shape.numel() / w;
  if (rows == 0) return;
  if (!split_copy(dst, src_strides, src, bytes)) {
    copy_row_range(dst, src_strides, src, 0, rows);
    return;
  }
  const index_t grain = std::max<index_t>(1, copy_piece_bytes / std::max<index_t>(1, w * bytes));
  parallel_for(rows, grain, [&](index_t r0, index_t r1) { copy_row_range(dst, src_strides, src, r0, r1); });
}

KILN_RUNTIME void copy_elements(const view& dst, const view& src) {
  if (dst.shape.numel() == 0) return;
  if (is_contiguous(dst) && is_contiguous(src)) {
    const index_t n = dst.shape.numel() * static_cast<index_t>(size_of(dst.dt));
    if (n < parallel_copy_bytes || !(dst.p + n <= src.p || src.p + n <= dst.p)) {
      std::memmove(dst.p, src.p, static_cast<std::size_t>(n));
      return;
    }
    parallel_for((n + copy_piece_bytes - 1) / copy_piece_bytes, 1, [&](index_t c0, index_t c1) {
      const index_t from = c0 * copy_piece_bytes, to = std::min(n, c1 * copy_piece_bytes);
      std::memcpy(dst.p + from, src.p + from, static_cast<std::size_t>(to - from));
    });
    return;
  }
  copy_rows(dst, src.strides, src.p);
}

KILN_RUNTIME void fill(const view& out, double v) {
  visit(out.dt, [&]<dtype D>() {
    const storage_t<D> x = storage_t<D>(static_cast<compute_t<D>>(v));
    if (out.shape.numel() == 0) return;
    if (is_contiguous(out)) {
      auto* p = reinterpret_cast<storage_t<D>*>(out.p);
      std::fill(p, p + out.shape.numel(), x);
      return;
    }
    dims zero;
    zero.rank = out.shape.rank;
    copy_rows(out, zero, reinterpret_cast<const std::byte*>(&x));
  });
}

KILN_RUNTIME dims broadcast_or_throw(op o, const dims& a, const dims& b) {
  const broadcast_result r = broadcast(a, b);
  if (!r.ok) throw shape_error(name(o), a, b, "cannot be broadcast together");
  return r.shape;
}

KILN_RUNTIME bool reshape_strides(const dims& from, const dims& st, const dims& to, dims& out) {
  out = contiguous_strides(to);
  if (from.numel() == 0 || from.rank == 0) return true;
  int v = to.rank - 1;
  index_t base = st.e[from.rank - 1], from_count = 1, to_count = 1;
  for (int d = from.rank - 1; d >= 0; --d) {
    from_count *= from.e[d];
    if (d == 0 || (from.e[d - 1] != 1 && st.e[d - 1] != from_count * base)) {  // end of a run
      while (v >= 0 && (to_count < from_count || to.e[v] == 1)) {
        out.e[v] = to_count * base;
        to_count *= to.e[v];
        --v;
      }
      if (to_count != from_count) return false;
      if (d > 0) {
        base = st.e[d - 1];
        from_count = to_count = 1;
      }
    }
  }
  return v == -1;
}

KILN_RUNTIME view state::temp(dtype dt, const dims& s) {
  temps.emplace_back(static_cast<std::size_t>(s.numel()) * size_of(dt));
  return contiguous_view(temps.back().data(), dt, s);
}

KILN_RUNTIME view state::view_of(int i) {
  const auto u = static_cast<std::size_t>(i);
  if (viewed[u]) return views[u];
  const node& n = at(i);
  view v;
  if (kind_of(n.o) == op_kind::leaf) {
    v = view_of_tensor(leaves[static_cast<std::size_t>(n.slot)]);
  } else if (n.o == op::constant || n.o == op::numel) {  // a value viewed (broadcast): one element
    v = temp(n.dt, dims{});
    fill(v, n.o == op::numel ? static_cast<double>(numel_of(i)) : n.value);
  } else if (dest[u].p) {
    v = dest[u];
  } else {
    const view x = view_of(n.in[0]);
    v = x;
    v.dt = n.dt;
    v.shape = shape[u];
    switch (n.o) {
      case op::reshape:
        if (!reshape_strides(x.shape, x.strides, v.shape, v.strides)) {
          const view c = temp(x.dt, x.shape);  // not expressible as strides: copy, as eager does
          copy_elements(c, x);
          v.p = c.p;
          v.strides = contiguous_strides(v.shape);
        }
        break;
      case op::permute:
        for (int a = 0; a < v.shape.rank; ++a) v.strides.e[a] = x.strides.e[n.perm[a]];
        break;
      case op::slice: {
        const slice_bounds b = resolve_slice(x.shape.e[n.axis], n.begin, n.end, n.step);
        v.p = x.p + b.begin * x.strides.e[n.axis] * static_cast<index_t>(size_of(x.dt));
        // as any_tensor::slice: no stride steps over one element (a huge step would overflow it)
        if (v.shape.e[n.axis] > 1) v.strides.e[n.axis] = x.strides.e[n.axis] * n.step;
        break;
      }
      case op::broadcast: v.strides = broadcast_strides(x, v.shape); break;
      default: throw std::logic_error("kiln: cpu: node " + std::to_string(i) + " (" + std::string(name(n.o)) + ") has no memory");
    }
  }
  views[u] = v;
  viewed[u] = 1;
  return v;
}

KILN_RUNTIME void state::resolve_shapes() {
  if (static_cast<int>(leaves.size()) != s.leaves)
    throw std::invalid_argument("kiln: cpu: the graph has " + std::to_string(s.leaves) + " leaves, got " +
                                std::to_string(leaves.size()) + " values");
  for (std::size_t u = 0; u < s.size; ++u) {
    const node& n = s.nodes[u];
    dims& r = shape[u];
    if (kind_of(n.o) == op_kind::leaf) {
      const any_tensor& t = leaves[static_cast<std::size_t>(n.slot)];
      const std::string what = placeholder_what(n.o, n.label());
      if (!t.defined()) throw std::invalid_argument("kiln: cpu: no value for " + what);
      if (t.dt() != n.dt) throw dtype_error(what, n.dt, t.dt());
      if (!fits_declared(n.shape, t.shape())) throw shape_error(what, n.shape, t.shape(), "differ (declared, bound)");
      if (!countable(t.shape())) throw shape_error(what, t.shape(), "has more than 2^59 elements");
      r = t.shape();
      continue;
    }
    // every other node by the catalogue's rule: this backend has no shape rule of its own
    r = resolve_shape(n, [&](int j) {
      const auto x = static_cast<std::size_t>(n.in[static_cast<std::size_t>(j)]);
      return operand{s.nodes[x].o, s.nodes[x].dt, shape[x]};
    });
  }
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::cpu::detail
