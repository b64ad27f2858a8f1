// kiln/passes/plan.hpp: memory planning. Decides which intermediates get scratch buffers
// (those a kernel writes for another kernel: values that stay inside a kernel never touch
// memory; graph outputs are written into the caller's tensors), and shares buffers between
// values whose lifetimes do not overlap (greedy, best fit, in kernel order). Reports the peak
// scratch memory and the bytes each kernel moves.
#pragma once

#include <array>

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
  // last kernel that reads each value (through views too)
  cvec<int> last(n, -1);
  for (std::size_t u = 0; u < n; ++u) {
    const int k = f.kernel_of[u];
    if (k == no_kernel) continue;
    for (int j = 0; j < g.nodes[u].nin(); ++j) {
      if (!reads_input_values(g.nodes[u].o, j)) continue;
      int src = g.nodes[u].in[j];
      while (is_view(g.nodes[static_cast<std::size_t>(src)].o)) src = g.nodes[static_cast<std::size_t>(src)].in[0];
      auto& l = last[static_cast<std::size_t>(src)];
      l = l > k ? l : k;
    }
  }
  // outputs, and the values an output views (its buffer is the caller's, not scratch)
  cvec<char> is_output(n, 0);
  for (int o : g.outputs) {
    is_output[static_cast<std::size_t>(o)] = 1;
    while (is_view(g.nodes[static_cast<std::size_t>(o)].o)) o = g.nodes[static_cast<std::size_t>(o)].in[0];
    is_output[static_cast<std::size_t>(o)] = 1;
  }
  // the values each kernel writes to scratch, kernel by kernel (a counting sort)
  const std::size_t nk = f.kernels.size();
  cvec<int> start(nk + 1, 0), produced(n, 0);
  auto scratch = [&](std::size_t i) { return f.kernel_of[i] != no_kernel && f.written[i] && !is_output[i]; };
  for (std::size_t i = 0; i < n; ++i)
    if (scratch(i)) ++start[static_cast<std::size_t>(f.kernel_of[i]) + 1];
  for (std::size_t k = 0; k < nk; ++k) start[k + 1] += start[k];
  {
    cvec<int> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      if (scratch(i)) produced[static_cast<std::size_t>(fill[static_cast<std::size_t>(f.kernel_of[i])]++)] = static_cast<int>(i);
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
namespace detail {
/// The sizes of the schedule a Make lambda returns: its own constant (evaluation budget).
template <class Make>
inline constexpr std::array<std::size_t, 4> schedule_size = [] {
  const schedule s = Make{}();
  return std::array<std::size_t, 4>{s.g.nodes.size(), s.g.outputs.size(), s.kernels.size(), s.buffers.size()};
}();
}  // namespace detail

template <class Make>
constexpr auto freeze_schedule(Make) {
  constexpr auto size = detail::schedule_size<Make>;
  const schedule s = Make{}();
  frozen_schedule<size[0], size[1], size[2], size[3]> f;
  for (std::size_t i = 0; i < size[0]; ++i) {
    f.g.nodes[i] = s.g.nodes[i];
    f.kernel_of[i] = s.kernel_of[i];
    f.written[i] = s.written[i];
    f.buffer_of[i] = s.buffer_of[i];
  }
  for (std::size_t i = 0; i < size[1]; ++i) f.g.outputs[i] = s.g.outputs[i];
  f.g.leaves = s.g.leaves;
  for (std::size_t i = 0; i < size[2]; ++i) f.kernels[i] = s.kernels[i];
  for (std::size_t i = 0; i < size[3]; ++i) f.buffers[i] = s.buffers[i];
  return f;
}

}  // namespace kiln::passes
