// kiln/passes/plan.hpp: memory planning. Decides which intermediates get scratch buffers
// (those a kernel writes for another kernel: values that stay inside a kernel never touch
// memory; graph outputs are written into the caller's tensors), and shares buffers between
// values whose lifetimes do not overlap (greedy, best fit, in kernel order). Reports the peak
// scratch memory and the bytes each kernel moves.
#pragma once

#include <array>
#include <span>

#include "../core/cvec.hpp"
#include "fuse.hpp"

namespace kiln::passes {

/// A fused graph with its memory plan: the whole result of the compile-time pipeline.
struct schedule {
  graph g;
  cvec<int> kernel_of;
  cvec<char> written;
  cvec<kernel> kernels;
  cvec<int> buffer_of;   ///< per node: its scratch buffer, or -1
  cvec<bytes_t> buffers; ///< size of each scratch buffer
};

/// The memory-planning pass.
constexpr schedule plan(const fused_graph& f) {
  const graph& g = f.g;
  const std::size_t n = g.nodes.size();
  schedule s{g, f.kernel_of, f.written, f.kernels, cvec<int>(n, -1), {}};
  // (raw pointers below: indexing them costs no call in constant evaluation)
  const node* nd = g.nodes.data();
  const int* ko = f.kernel_of.data();
  const char* wr = f.written.data();
  // last kernel that reads each value (through views too)
  cvec<int> last(n, -1);
  int* la = last.data();
  for (std::size_t u = 0; u < n; ++u) {
    const int k = ko[u];
    if (k == no_kernel) continue;
    for (int j = 0, nj = nd[u].nin(); j < nj; ++j) {
      if (!reads_input_values(nd[u].o, j)) continue;
      int src = nd[u].in[j];
      while (is_view(nd[src].o)) src = nd[src].in[0];
      if (la[src] < k) la[src] = k;
    }
  }
  // outputs, and the values an output views (its buffer is the caller's, not scratch)
  cvec<char> is_output(n, 0);
  char* out = is_output.data();
  for (int o : g.outputs) {
    out[o] = 1;
    while (is_view(nd[o].o)) o = nd[o].in[0];
    out[o] = 1;
  }
  // the values each kernel writes to scratch, kernel by kernel (a counting sort)
  const std::size_t nk = f.kernels.size();
  cvec<int> start(nk + 1, 0), produced(n, 0);
  int* st = start.data();
  for (std::size_t i = 0; i < n; ++i)
    if (ko[i] != no_kernel && wr[i] && !out[i]) ++st[ko[i] + 1];
  for (std::size_t k = 0; k < nk; ++k) st[k + 1] += st[k];
  {
    cvec<int> fill(start.begin(), start.end() - 1);
    int* fl = fill.data();
    int* pr = produced.data();
    for (std::size_t i = 0; i < n; ++i)
      if (ko[i] != no_kernel && wr[i] && !out[i]) pr[fl[ko[i]]++] = static_cast<int>(i);
  }
  // greedy best fit over the buffers free at each kernel; a buffer is free again after the
  // last kernel that reads its value (a buffer read by kernel k cannot take a value k writes)
  cvec<int> free_now;
  cvec<cvec<int>> freed_at(nk + 2);
  int current = -1;
  for (int p = 0; p < start[nk]; ++p) {
    const auto i = static_cast<std::size_t>(produced[static_cast<std::size_t>(p)]);
    const int k = f.kernel_of[i];
    while (current < k) {
      ++current;
      for (int b : freed_at[static_cast<std::size_t>(current)]) free_now.push_back(b);
    }
    const bytes_t need = bytes_of(g.nodes[i].shape, g.nodes[i].dt);
    int pick = -1;  // index into free_now
    for (std::size_t j = 0; j < free_now.size(); ++j) {
      const bytes_t& have = s.buffers[static_cast<std::size_t>(free_now[j])];
      if (!have.covers(need)) continue;
      if (pick < 0 || s.buffers[static_cast<std::size_t>(free_now[static_cast<std::size_t>(pick)])].covers(have))
        pick = static_cast<int>(j);
    }
    int best;
    if (pick >= 0) {
      best = free_now[static_cast<std::size_t>(pick)];
      free_now[static_cast<std::size_t>(pick)] = free_now.back();
      free_now.pop_back();
    } else {
      s.buffers.push_back(need);
      best = static_cast<int>(s.buffers.size()) - 1;
    }
    s.buffer_of[i] = best;
    const int until = last[i] > k ? last[i] : k;
    freed_at[static_cast<std::size_t>(until + 1)].push_back(best);
  }
  return s;
}

/// Peak scratch memory of a schedule: the sum of its buffers.
template <class S>
constexpr bytes_t scratch_bytes(const S& s) {
  bytes_t total{};
  for (const bytes_t& b : s.buffers) total += b;
  return total;
}

/// A fused graph frozen into arrays (the fusion pass's result as a constant of its own).
template <std::size_t N, std::size_t M, std::size_t K>
struct frozen_fused {
  frozen_graph<N, M> g;
  std::array<int, N> kernel_of{};
  std::array<char, N> written{};
  std::array<kernel, K> kernels{};

  constexpr fused_graph thaw() const {
    fused_graph f{g.thaw(), {}, {}, {}};
    f.kernel_of.assign(kernel_of.begin(), kernel_of.end());
    f.written.assign(written.begin(), written.end());
    f.kernels.assign(kernels.begin(), kernels.end());
    return f;
  }
};

namespace detail {
/// Copies the first n nodes (m outputs, k kernels, b buffers) of a fused graph or schedule s,
/// growable or frozen, into frozen f; with_buffers for schedules.
template <class S>
constexpr std::size_t buffer_count(const S& s) {
  if constexpr (requires { s.buffers; }) return s.buffers.size();
  else return 0;
}

template <bool with_buffers, class F, class S>
constexpr void copy_frozen(F& f, const S& s, std::size_t n, std::size_t m, std::size_t k, std::size_t b) {
  node* nodes = f.g.nodes.data();  // raw pointers: no call per element in constant evaluation
  int* kernel_of = f.kernel_of.data();
  char* written = f.written.data();
  const node* from = s.g.nodes.data();
  const int* from_kernel = s.kernel_of.data();
  const char* from_written = s.written.data();
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i] = from[i];
    kernel_of[i] = from_kernel[i];
    written[i] = from_written[i];
  }
  for (std::size_t i = 0; i < m; ++i) f.g.outputs[i] = s.g.outputs[i];
  f.g.leaves = s.g.leaves;
  for (std::size_t i = 0; i < k; ++i) f.kernels[i] = s.kernels[i];
  if constexpr (with_buffers) {
    int* buffer_of = f.buffer_of.data();
    const int* from_buffer = s.buffer_of.data();
    for (std::size_t i = 0; i < n; ++i) buffer_of[i] = from_buffer[i];
    for (std::size_t i = 0; i < b; ++i) f.buffers[i] = s.buffers[i];
  }
}

/// The sizes of what a Make lambda returns (a fused graph or a schedule): nodes, outputs,
/// kernels, buffers. Its own constant (evaluation budget).
template <class Make>
constexpr std::array<std::size_t, 4> result_sizes() {
  const auto s = Make{}();
  return {s.g.nodes.size(), s.g.outputs.size(), s.kernels.size(), buffer_count(s)};
}
template <class Make>
inline constexpr std::array<std::size_t, 4> result_size = result_sizes<Make>();

/// What a Make lambda returns, frozen with exactly its sizes (Make runs once here).
template <class Frozen, class Make>
constexpr Frozen freeze_sized_result(Make) {
  const auto s = Make{}();
  Frozen f;
  copy_frozen<requires { f.buffers; }>(f, s, s.g.nodes.size(), s.g.outputs.size(), s.kernels.size(), buffer_count(s));
  return f;
}

/// A result of at most the capacities of Frozen (a frozen fused graph or schedule), with its
/// sizes (when larger, only the sizes).
template <class Frozen>
struct bounded_result_of {
  Frozen f{};
  std::array<std::size_t, 4> size{};
  std::array<std::size_t, 4> cap{};
  constexpr bool fits() const { return size[0] <= cap[0] && size[1] <= cap[1] && size[2] <= cap[2] && size[3] <= cap[3]; }
};
template <class Frozen, class Make>
constexpr bounded_result_of<Frozen> make_bounded_result(std::array<std::size_t, 4> cap) {
  const auto s = Make{}();
  bounded_result_of<Frozen> b;
  b.cap = cap;
  b.size = {s.g.nodes.size(), s.g.outputs.size(), s.kernels.size(), buffer_count(s)};
  if (b.fits()) copy_frozen<requires { s.buffers; }>(b.f, s, b.size[0], b.size[1], b.size[2], b.size[3]);
  return b;
}
}  // namespace detail

/// Freezes the fused graph returned by a captureless constexpr lambda (run twice: size, fill).
template <class Make>
constexpr auto freeze_fused(Make) {
  constexpr auto size = detail::result_size<Make>;
  return detail::freeze_sized_result<frozen_fused<size[0], size[1], size[2]>>(Make{});
}

/// A schedule frozen into arrays, to be a static constexpr member of a plan type.
template <std::size_t N, std::size_t M, std::size_t K, std::size_t B>
struct frozen_schedule {
  frozen_graph<N, M> g;
  std::array<int, N> kernel_of{};
  std::array<char, N> written{};
  std::array<kernel, K> kernels{};
  std::array<int, N> buffer_of{};
  std::array<bytes_t, B> buffers{};
};

/// Freezes the schedule returned by a captureless constexpr lambda (run twice: size, fill).
template <class Make>
constexpr auto freeze_schedule(Make) {
  constexpr auto size = detail::result_size<Make>;
  return detail::freeze_sized_result<frozen_schedule<size[0], size[1], size[2], size[3]>>(Make{});
}

namespace detail {
template <class Make, std::size_t N, std::size_t M, std::size_t K>
inline constexpr auto bounded_fused = make_bounded_result<frozen_fused<N, M, K>, Make>({N, M, K, 0});
template <class Make, std::size_t N, std::size_t M, std::size_t K, std::size_t B>
inline constexpr auto bounded_schedule = make_bounded_result<frozen_schedule<N, M, K, B>, Make>({N, M, K, B});
}  // namespace detail

/// freeze_fused and freeze_schedule for a lambda whose result is expected within the given
/// capacities (graph/graph.hpp's freeze_within): one run of the lambda where those run it twice.
template <std::size_t N, std::size_t M, std::size_t K, class Make>
constexpr auto freeze_fused_within(Make) {
  constexpr const auto& b = detail::bounded_fused<Make, N, M, K>;
  if constexpr (!b.fits()) {
    return detail::freeze_sized_result<frozen_fused<b.size[0], b.size[1], b.size[2]>>(Make{});
  } else {
    frozen_fused<b.size[0], b.size[1], b.size[2]> f;
    detail::copy_frozen<false>(f, b.f, b.size[0], b.size[1], b.size[2], 0);
    return f;
  }
}
template <std::size_t N, std::size_t M, std::size_t K, std::size_t B, class Make>
constexpr auto freeze_schedule_within(Make) {
  constexpr const auto& b = detail::bounded_schedule<Make, N, M, K, B>;
  if constexpr (!b.fits()) {
    return detail::freeze_sized_result<frozen_schedule<b.size[0], b.size[1], b.size[2], b.size[3]>>(Make{});
  } else {
    frozen_schedule<b.size[0], b.size[1], b.size[2], b.size[3]> f;
    detail::copy_frozen<true>(f, b.f, b.size[0], b.size[1], b.size[2], b.size[3]);
    return f;
  }
}

/// A frozen schedule's arrays as spans (see graph_span): lets run-time code take any plan.
struct schedule_span {
  graph_span g;
  std::span<const int> kernel_of;
  std::span<const char> written;
  std::span<const kernel> kernels;
  std::span<const int> buffer_of;
  std::span<const bytes_t> buffers;

  template <std::size_t N, std::size_t M, std::size_t K, std::size_t B>
  static constexpr schedule_span of(const frozen_schedule<N, M, K, B>& f) {
    return {graph_span::of(f.g), f.kernel_of, f.written, f.kernels, f.buffer_of, f.buffers};
  }
  /// A run-time schedule's arrays (valid while it lives).
  static schedule_span of(const schedule& s) {
    return {graph_span::of(s.g), {s.kernel_of.data(), s.kernel_of.size()}, {s.written.data(), s.written.size()},
            {s.kernels.data(), s.kernels.size()}, {s.buffer_of.data(), s.buffer_of.size()},
            {s.buffers.data(), s.buffers.size()}};
  }
  // not inlined: printing only, and inlined into thaw_schedule<S> with a constant size GCC 12
  // warns of a vectorised copy past the end of the written array (a false -Wstringop-overflow)
  [[gnu::noinline]] schedule thaw() const {
    return schedule{g.thaw(),
                    cvec<int>(kernel_of.data(), kernel_of.data() + kernel_of.size()),
                    cvec<char>(written.data(), written.data() + written.size()),
                    cvec<kernel>(kernels.data(), kernels.data() + kernels.size()),
                    cvec<int>(buffer_of.data(), buffer_of.data() + buffer_of.size()),
                    cvec<bytes_t>(buffers.data(), buffers.data() + buffers.size())};
  }
};

/// A frozen schedule as a run-time one (to print it, or to pass it to non-template code).
template <class S>
schedule thaw_schedule(const S& f) {
  return schedule_span::of(f).thaw();
}

}  // namespace kiln::passes
