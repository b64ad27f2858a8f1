// kiln/core/shape_rules.hpp: the static shape of each op's result, as constexpr functions on
// shape values. Expression nodes use them while the user's code compiles; passes and the eager
// backend use the same functions, so every layer agrees on what a shape means.
//
// Each rule returns {shape, ok}. A poisoned operand (an earlier error) gives a poisoned, ok
// result, so one mistake is reported once.
#pragma once

#include <cstdint>
#include <limits>

#include "shape.hpp"

namespace kiln {

/// Slice end meaning "up to the end of the axis".
inline constexpr index_t to_end = std::numeric_limits<index_t>::max();

/// Whether tensor shape `got` fits the declared shape (dyn extents take any value).
constexpr bool fits_declared(const dims& declared, const dims& got) {
  bool fits = got.rank == declared.rank;
  for (int i = 0; fits && i < declared.rank; ++i) fits = is_dyn(declared.e[i]) || declared.e[i] == got.e[i];
  return fits;
}

struct shape_result {
  dims shape;
  bool ok = true;
};

constexpr shape_result poisoned_result() { return {dims::poison(), true}; }

/// Reduction over the axes in `mask` (bit i = axis i).
constexpr shape_result reduce_shape(const dims& in, std::uint32_t mask, bool keepdim) {
  if (in.poisoned()) return poisoned_result();
  if (in.rank < 32 && (mask >> in.rank) != 0) return {dims::poison(), false};
  dims r;
  for (int i = 0; i < in.rank; ++i) {
    if (mask & (1u << i)) {
      if (keepdim) r.e[r.rank++] = 1;
    } else {
      r.e[r.rank++] = in.e[i];
    }
  }
  return {r, true};
}

/// Batched matmul [..., m, k] x [..., k, n] -> [..., m, n], batch extents broadcast.
constexpr shape_result matmul_shape(const dims& a, const dims& b) {
  if (a.poisoned() || b.poisoned()) return poisoned_result();
  if (a.rank < 2 || b.rank < 2) return {dims::poison(), false};
  if (!extents_compatible(a.e[a.rank - 1], b.e[b.rank - 2])) return {dims::poison(), false};
  dims ba = a, bb = b;
  ba.rank -= 2;
  bb.rank -= 2;
  const broadcast_result batch = broadcast(ba, bb);
  if (!batch.ok) return {dims::poison(), false};
  dims r = batch.shape;
  r.e[r.rank++] = a.e[a.rank - 2];
  r.e[r.rank++] = b.e[b.rank - 1];
  return {r, true};
}

/// Reshape to `to`, where at most one extent may be dyn (inferred from the element count).
constexpr shape_result reshape_shape(const dims& from, const dims& to) {
  if (from.poisoned()) return poisoned_result();
  int infer = -1;
  index_t known = 1;
  for (int i = 0; i < to.rank; ++i) {
    if (is_dyn(to.e[i])) {
      if (infer >= 0) return {dims::poison(), false};
      infer = i;
    } else {
      known *= to.e[i];
    }
  }
  if (!from.is_static()) {  // checked at run time
    // one dynamic extent in and one out, the rest equal in product: the same extent (a name
    // passes through: [n, 4, 8] -> [n, 32])
    dims r = to;
    index_t known_in = 1;
    int dyns = 0;
    index_t name = dyn;
    for (int i = 0; i < from.rank; ++i) {
      if (is_dyn(from.e[i])) {
        ++dyns;
        name = from.e[i];
      } else {
        known_in *= from.e[i];
      }
    }
    if (infer >= 0) r.e[infer] = dyns == 1 && known_in == known ? name : dyn;
    return {r, true};
  }
  dims r = to;
  const index_t n = from.numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0) return {dims::poison(), false};
    r.e[infer] = n / known;
  } else if (known != n) {
    return {dims::poison(), false};
  }
  return {r, true};
}

constexpr shape_result permute_shape(const dims& in, const std::int8_t* p, int n) {
  if (in.poisoned()) return poisoned_result();
  if (n != in.rank) return {dims::poison(), false};
  dims r;
  r.rank = n;
  bool seen[max_rank]{};
  for (int i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] >= n || seen[p[i]]) return {dims::poison(), false};
    seen[p[i]] = true;
    r.e[i] = in.e[p[i]];
  }
  return {r, true};
}

/// broadcast_to's result: `to`, each dyn extent of it the source's (right-aligned; dyn where
/// that is); fails where `from` does not broadcast to it, or a dyn extent has no source extent.
constexpr shape_result broadcast_to_shape(const dims& from, const dims& to) {
  if (from.poisoned() || to.poisoned()) return poisoned_result();
  if (from.rank > to.rank) return {dims::poison(), false};
  dims r = to;
  for (int a = 0; a < to.rank; ++a) {
    const int j = from.rank - to.rank + a;
    if (!is_dyn(to.e[a])) continue;
    if (j < 0) return {dims::poison(), false};
    r.e[a] = from.e[j];
  }
  if (!broadcastable_to(from, r)) return {dims::poison(), false};
  return {r, true};
}

struct slice_bounds {
  index_t begin = 0, end = 0;
  bool ok = true;
};
/// Resolves a slice's begin/end against a concrete extent n: negatives count from the end,
/// to_end means n; then 0 <= begin <= end <= n must hold.
constexpr slice_bounds resolve_slice(index_t n, index_t begin, index_t end, index_t step) {
  slice_bounds s{begin < 0 ? begin + n : begin, end == to_end ? n : end < 0 ? end + n : end, true};
  s.ok = step > 0 && s.begin >= 0 && s.begin <= s.end && s.end <= n;
  return s;
}
constexpr index_t slice_extent(index_t begin, index_t end, index_t step) {
  return end > begin ? (end - begin - 1) / step + 1 : 0;  // no overflow for huge steps
}

constexpr shape_result slice_shape(const dims& in, int axis, index_t begin, index_t end, index_t step) {
  if (in.poisoned()) return poisoned_result();
  if (axis < 0 || axis >= in.rank || step <= 0) return {dims::poison(), false};
  dims r = in;
  const index_t n = in.e[axis];
  if (!is_dyn(n)) {
    const slice_bounds s = resolve_slice(n, begin, end, step);
    if (!s.ok) return {dims::poison(), false};
    r.e[axis] = slice_extent(s.begin, s.end, step);
  } else if (begin >= 0 && end >= 0 && end != to_end) {
    if (begin > end) return {dims::poison(), false};
    r.e[axis] = slice_extent(begin, end, step);  // the run-time extent must reach `end`
  } else {
    r.e[axis] = dyn;
  }
  return {r, true};
}

constexpr shape_result concat_shape(const dims& a, const dims& b, int axis) {
  if (a.poisoned() || b.poisoned()) return poisoned_result();
  if (a.rank != b.rank || axis < 0 || axis >= a.rank) return {dims::poison(), false};
  dims r = a;
  for (int i = 0; i < a.rank; ++i) {
    if (i == axis) {
      r.e[i] = is_dyn(a.e[i]) || is_dyn(b.e[i]) ? dyn : a.e[i] + b.e[i];
    } else {
      if (!extents_compatible(a.e[i], b.e[i])) return {dims::poison(), false};
      r.e[i] = is_dyn(a.e[i]) ? b.e[i] : a.e[i];
    }
  }
  return {r, true};
}

/// layer_norm(x, gamma, beta): gamma and beta cover x's trailing axes.
constexpr shape_result layer_norm_shape(const dims& x, const dims& gamma, const dims& beta) {
  if (x.poisoned() || gamma.poisoned() || beta.poisoned()) return poisoned_result();
  if (!(gamma.rank == beta.rank) || gamma.rank > x.rank || gamma.rank == 0) return {dims::poison(), false};
  for (int i = 0; i < gamma.rank; ++i) {
    const index_t e = x.e[x.rank - gamma.rank + i];
    if (!extents_compatible(e, gamma.e[i]) || !extents_compatible(e, beta.e[i])) return {dims::poison(), false};
  }
  return {x, true};
}

/// scaled_dot_product_attention(q [..., h, tq, d], k [..., hk, tk, d], v [..., hk, tk, dv], mask)
/// -> [..., h, tq, dv]: the leading extents of q, k and v agree; hk divides h (grouped-query
/// attention: each k/v head serves h / hk consecutive q heads; both static where they differ);
/// the mask broadcasts to the scores [..., h, tq, tk] (rank 0: no mask). Rank 2 has no heads.
constexpr shape_result sdpa_shape(const dims& q, const dims& k, const dims& v, const dims& mask) {
  if (q.poisoned() || k.poisoned() || v.poisoned() || mask.poisoned()) return poisoned_result();
  const int r = q.rank;
  const shape_result bad{dims::poison(), false};
  if (r < 2 || k.rank != r || v.rank != r) return bad;
  if (!extents_compatible(q.e[r - 1], k.e[r - 1]) || !extents_compatible(k.e[r - 2], v.e[r - 2])) return bad;
  for (int i = 0; i < r - 3; ++i)
    if (!extents_compatible(q.e[i], k.e[i]) || !extents_compatible(q.e[i], v.e[i])) return bad;
  if (r >= 3) {
    const index_t h = q.e[r - 3], hk = k.e[r - 3];
    if (!extents_compatible(hk, v.e[r - 3])) return bad;
    if (!extents_compatible(h, hk) && (is_dyn(h) || is_dyn(hk) || hk <= 0 || h % hk != 0)) return bad;
  }
  dims scores = q;
  scores.e[r - 1] = k.e[r - 2];
  if (mask.rank > r) return bad;
  for (int i = 1; i <= mask.rank; ++i) {
    const index_t m = mask.e[mask.rank - i];
    if (m != 1 && !extents_compatible(m, scores.e[r - i])) return bad;
  }
  dims out = q;
  out.e[r - 1] = v.e[r - 1];
  return {out, true};
}

/// Whether attention's fused primitives take these operands: the trailing heads, lengths and
/// head sizes static, as their packed outputs need, and at most one dyn (batch) extent, so that
/// the gradients' rows can be viewed back as q, k and v.
constexpr bool attention_extents_static(const dims& q, const dims& k, const dims& v) {
  const int r = q.rank;
  int dq = 0, dk = 0, dv = 0;
  for (int i = 0; i < r; ++i) {
    if ((is_dyn(q.e[i]) || is_dyn(k.e[i]) || is_dyn(v.e[i])) && i >= r - 3) return false;
    dq += is_dyn(q.e[i]);
    dk += is_dyn(k.e[i]);
    dv += is_dyn(v.e[i]);
  }
  return r >= 2 && dq <= 1 && dk <= 1 && dv <= 1;
}

/// The extents of one attention problem, from q [..., h, tq, d] and k, v [..., hk, tk, d | dv]
/// (run-time shapes): `lead` is the product of the leading extents (1 for rank 2 and 3).
struct attention_geometry {
  index_t lead = 1, h = 1, hk = 1, tq = 0, tk = 0, d = 0, dv = 0;
  constexpr attention_geometry(const dims& q, const dims& k, const dims& v) {
    const int r = q.rank;
    for (int i = 0; i < r - 3; ++i) lead *= q.e[i];
    if (r >= 3) {
      h = q.e[r - 3];
      hk = k.e[r - 3];
    }
    tq = q.e[r - 2];
    tk = k.e[r - 2];
    d = q.e[r - 1];
    dv = v.e[r - 1];
  }
  /// The scores' shape [..., h, tq, tk], which the mask broadcasts to.
  static constexpr dims scores(const dims& q, const dims& k) {
    dims s = q;
    s.e[s.rank - 1] = k.e[k.rank - 2];
    return s;
  }
};

/// attention(q, k, v, mask) -> [..., h, tq, dv + 1]: sdpa's value and each row's logsumexp.
constexpr shape_result attention_shape(const dims& q, const dims& k, const dims& v, const dims& mask) {
  shape_result s = sdpa_shape(q, k, v, mask);
  if (!s.ok || s.shape.poisoned()) return s;
  if (!attention_extents_static(q, k, v)) return {dims::poison(), false};
  s.shape.e[s.shape.rank - 1] += 1;
  return s;
}

/// attention_grad(q, k, v, mask, y, g) -> [..., h tq + hk tk, d + dv]: rows of dq (its first d
/// columns) then rows of dk ++ dv, for y = attention(q, k, v, mask) and g its cotangent, of y
/// [..., h, tq, dv + 1] or of its value alone [..., h, tq, dv] (the logsumexp's cotangent zero).
constexpr shape_result attention_grad_shape(const dims& q, const dims& k, const dims& v, const dims& mask,
                                            const dims& y, const dims& g) {
  if (q.poisoned() || k.poisoned() || v.poisoned() || mask.poisoned() || y.poisoned() || g.poisoned())
    return poisoned_result();
  const shape_result bad{dims::poison(), false};
  const int r = q.rank;
  const shape_result a = attention_shape(q, k, v, mask);
  if (!a.ok || y.rank != r || g.rank != r) return bad;
  for (int i = 0; i < r; ++i)
    if (!extents_compatible(y.e[i], a.shape.e[i]) ||
        !(extents_compatible(g.e[i], a.shape.e[i]) || (i == r - 1 && g.e[i] == a.shape.e[i] - 1)))
      return bad;
  const index_t h = r >= 3 ? q.e[r - 3] : 1, hk = r >= 3 ? k.e[r - 3] : 1;
  dims out;
  out.rank = r >= 3 ? r - 1 : 2;
  for (int i = 0; i < r - 3; ++i) out.e[i] = q.e[i];
  out.e[out.rank - 2] = h * q.e[r - 2] + hk * k.e[r - 2];
  out.e[out.rank - 1] = q.e[r - 1] + v.e[r - 1];
  return {out, true};
}

/// linear(x, w, b) = x w^T + b, with w [out, in] and b [out] (PyTorch's layout).
constexpr shape_result linear_shape(const dims& x, const dims& w, const dims& b) {
  if (x.poisoned() || w.poisoned() || b.poisoned()) return poisoned_result();
  if (w.rank != 2 || b.rank != 1 || x.rank < 1) return {dims::poison(), false};
  if (!extents_compatible(x.e[x.rank - 1], w.e[1]) || !extents_compatible(w.e[0], b.e[0])) return {dims::poison(), false};
  dims r = x;
  r.e[r.rank - 1] = is_dyn(w.e[0]) ? b.e[0] : w.e[0];
  return {r, true};
}

/// cross_entropy(logits [n, c], labels [n]) -> the mean loss, rank 0.
constexpr shape_result cross_entropy_shape(const dims& logits, const dims& labels) {
  if (logits.poisoned() || labels.poisoned()) return poisoned_result();
  if (logits.rank != 2 || labels.rank != 1 || !extents_compatible(logits.e[0], labels.e[0]))
    return {dims::poison(), false};
  return {dims{}, true};
}

// ---- windows (unfold, fold, conv2d, pooling) and indexing (gather, scatter_add) ------------

/// A 2-D sliding window over the last two axes of [n, c, h, w]: kernel extents, strides,
/// zero padding on both sides and dilation, as in torch.nn.functional.unfold and conv2d.
struct window2d {
  index_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  /// Kernel elements per channel.
  constexpr index_t size() const { return kh * kw; }
  /// Every field fits the node's packing (16 bits) and makes sense.
  constexpr bool valid() const {
    const bool ranges = kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0 && dh >= 1 && dw >= 1;
    const index_t lim = 1 << 15;
    return ranges && kh < lim && kw < lim && sh < lim && sw < lim && ph < lim && pw < lim && dh < lim && dw < lim;
  }
  friend constexpr bool operator==(const window2d&, const window2d&) = default;
};

/// Output positions of a window along one axis of static extent n (0 if the window does not
/// fit in the padded axis).
constexpr index_t window_positions(index_t n, index_t k, index_t s, index_t p, index_t d) {
  const index_t span = d * (k - 1) + 1;
  return n < 0 || n + 2 * p < span ? 0 : (n + 2 * p - span) / s + 1;
}

/// unfold (im2col): [n, c, h, w] -> [n, c * kh * kw, ho * wo]; column l holds the window at
/// output position l, rows ordered (channel, ky, kx). Channels and spatial extents are static.
constexpr shape_result unfold_shape(const dims& x, const window2d& w) {
  if (x.poisoned()) return poisoned_result();
  if (x.rank != 4 || !w.valid() || is_dyn(x.e[1]) || is_dyn(x.e[2]) || is_dyn(x.e[3])) return {dims::poison(), false};
  const index_t ho = window_positions(x.e[2], w.kh, w.sh, w.ph, w.dh), wo = window_positions(x.e[3], w.kw, w.sw, w.pw, w.dw);
  if (ho < 1 || wo < 1) return {dims::poison(), false};
  return {dims{x.e[0], x.e[1] * w.size(), ho * wo}, true};
}

/// fold (col2im, unfold's adjoint): [n, c * kh * kw, ho * wo] -> [n, c, h, w], each column's
/// values added back into the window it came from (positions in the padding are dropped).
constexpr shape_result fold_shape(const dims& cols, const window2d& w, index_t h, index_t wd) {
  if (cols.poisoned()) return poisoned_result();
  if (cols.rank != 3 || !w.valid() || h < 1 || wd < 1 || is_dyn(cols.e[1]) || is_dyn(cols.e[2]) ||
      cols.e[1] % w.size() != 0)
    return {dims::poison(), false};
  const index_t ho = window_positions(h, w.kh, w.sh, w.ph, w.dh), wo = window_positions(wd, w.kw, w.sw, w.pw, w.dw);
  if (ho < 1 || wo < 1 || cols.e[2] != ho * wo) return {dims::poison(), false};
  return {dims{cols.e[0], cols.e[1] / w.size(), h, wd}, true};
}

/// conv2d(x [n, c, h, w], weight [o, c, kh, kw], bias [o]) -> [n, o, ho, wo]; the window's kh
/// and kw are the weight's. A bias of rank 0 means none.
constexpr shape_result conv2d_shape(const dims& x, const dims& wt, const dims& b, const window2d& w) {
  if (x.poisoned() || wt.poisoned() || b.poisoned()) return poisoned_result();
  if (wt.rank != 4 || is_dyn(wt.e[0]) || is_dyn(wt.e[1]) || wt.e[2] != w.kh || wt.e[3] != w.kw) return {dims::poison(), false};
  if (!(b.rank == 0 || (b.rank == 1 && extents_compatible(b.e[0], wt.e[0])))) return {dims::poison(), false};
  const shape_result u = unfold_shape(x, w);
  if (!u.ok || x.e[1] != wt.e[1]) return {dims::poison(), false};
  return {dims{x.e[0], wt.e[0], window_positions(x.e[2], w.kh, w.sh, w.ph, w.dh),
               window_positions(x.e[3], w.kw, w.sw, w.pw, w.dw)},
          true};
}

/// max_pool2d and avg_pool2d: [n, c, h, w] -> [n, c, ho, wo].
constexpr shape_result pool2d_shape(const dims& x, const window2d& w) {
  if (x.poisoned()) return poisoned_result();
  const shape_result u = unfold_shape(x, w);
  if (!u.ok || 2 * w.ph > w.kh || 2 * w.pw > w.kw) return {dims::poison(), false};  // PyTorch: pad <= kernel / 2
  return {dims{x.e[0], x.e[1], window_positions(x.e[2], w.kh, w.sh, w.ph, w.dh),
               window_positions(x.e[3], w.kw, w.sw, w.pw, w.dw)},
          true};
}

/// gather(table [v, ...], index [...]) -> [...index, ...table's trailing axes]: the rows of
/// table that index names (torch.nn.functional.embedding).
constexpr shape_result gather_shape(const dims& table, const dims& index) {
  if (table.poisoned() || index.poisoned()) return poisoned_result();
  if (table.rank < 1 || index.rank + table.rank - 1 > max_rank) return {dims::poison(), false};
  dims r = index;
  for (int i = 1; i < table.rank; ++i) r.e[r.rank++] = table.e[i];
  return {r, true};
}

/// scatter_add(index [...], src [...index, ...like's trailing axes], like [v, ...]) -> like's
/// shape: zeros with src's rows added at the rows index names (gather's adjoint).
constexpr shape_result scatter_add_shape(const dims& index, const dims& src, const dims& like) {
  if (index.poisoned() || src.poisoned() || like.poisoned()) return poisoned_result();
  const shape_result g = gather_shape(like, index);
  if (!g.ok || g.shape.rank != src.rank) return {dims::poison(), false};
  for (int i = 0; i < src.rank; ++i)
    if (!extents_compatible(g.shape.e[i], src.e[i])) return {dims::poison(), false};
  return {like, true};
}

}  // namespace kiln
