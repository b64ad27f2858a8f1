// kiln/backend/cpu.hpp: the CPU backend. Runs a frozen schedule (passes/pipeline.hpp) as the
// fused loop nests of backend/cpu/kernels.hpp, one per kernel of the plan, in plan order, with
// the plan's scratch buffers, vectorised with xsimd and threaded with cpu::parallel_for.
//
//   const auto& s = kiln::plan<E>::schedule;                 // a constant
//   std::vector<any_tensor> out = kiln::cpu::run_schedule<s>(leaves);
//
// Same contract as eager::run_schedule: the leaf table in, the graph's outputs out, never
// sharing storage with a leaf. Usually reached through kiln::compile and kiln::eval (eval.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.hpp"
#include "../debug/profiler.hpp"
#include "../passes/fuse.hpp"
#include "backend.hpp"
#include "cpu/kernels.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu {

namespace detail {

/// Whether every node of the schedule is one the CPU backend runs (primitives only).
template <class Sched>
constexpr int first_unsupported(const Sched& s) {
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i) {
    const op o = s.g.nodes[i].o;
    const op_kind k = kind_of(o);
    const bool ok = k == op_kind::leaf || k == op_kind::constant || is_pointwise(o) || o == op::sum || o == op::amax ||
                    o == op::amin || o == op::matmul || k == op_kind::shape || k == op_kind::movement ||
                    k == op_kind::random;
    if (!ok) return static_cast<int>(i);
  }
  return -1;
}

/// A run's memory: outputs (fresh, or the caller's), scratch buffers, and for each output that
/// no kernel computes (a leaf, a constant, a view), the kernel after which to copy it.
struct run_memory {
  std::vector<any_tensor> outs;
  std::vector<int> after;
  std::vector<char> computed;
};

/// A schedule's scratch buffers, kept between its runs on one thread (each grows to the largest
/// size it has needed): repeated calls touch memory that is already mapped, as PyTorch's
/// caching allocator does, instead of taking page faults on fresh allocations every time.
struct scratch_cache {
  std::vector<block> blocks;
  std::vector<std::size_t> bytes;
  KILN_RUNTIME ~scratch_cache();  // out of line: not compiled again for each plan's thread_local cache
};

KILN_LAZY run_memory prepare(state& st, const std::vector<any_tensor>* into, scratch_cache& cache);

/// Copies the outputs whose source kernel k has just run (k = -1: sources that are leaves).
KILN_LAZY void materialise(state& st, const run_memory& r, int k);

/// Whether a call is big enough for a team (with_team): some value, leaves included, of at
/// least 32768 elements. A heuristic: smaller plans seldom thread at all (parallel_for's grains,
/// the GEMM's 4 MFLOP), so they do not pay for starting a team; those that do thread (a GEMM of
/// 128^3) run as without a team, one parallel region per threaded kernel.
KILN_LAZY bool opens_team(const state& st);

/// A kernel of a plan: the code of every kernel with its code words (code_key),
/// kernel_code<words>::run, and the nodes it runs on.
struct kernel_entry {
  void (*run)(state&, const kernel_binding&);
  kernel_binding b;
};

/// Kernel K's nodes, memory references' nodes and scalars' nodes, in one array: the data that
/// binds shared code to it (the rest of its analysis need not be in the program).
template <const auto& S, int K>
inline constexpr auto binding_of = [] {
  const auto& f = kernel_of<S, K>::value;
  std::array<int, f.node.size() + f.mem_node.size() + f.scalar_node.size()> b{};
  std::size_t i = 0;
  for (const int x : f.node) b[i++] = x;
  for (const int x : f.mem_node) b[i++] = x;
  for (const int x : f.scalar_node) b[i++] = x;
  return b;
}();

/// Plan S's kernels in order: the one part of a run that is plan-specific code.
template <const auto& S, int... K>
constexpr std::array<kernel_entry, sizeof...(K)> kernel_table(std::integer_sequence<int, K...>) {
  return {kernel_entry{&kernel_code<code_key<S, K>()>::run,
                       {binding_of<S, K>.data(), binding_of<S, K>.data() + kernel_of<S, K>::value.node.size(),
                        binding_of<S, K>.data() + kernel_of<S, K>::value.node.size() +
                            kernel_of<S, K>::value.mem_node.size()}}...};
}

/// What the profiler (debug/profiler.hpp) says of a plan's kernels, found once per schedule.
struct kernel_profile {
  std::string name;                        ///< its ops, "matmul+add+relu"
  std::vector<int> members, inputs, written;  ///< its nodes, the values it reads, those it writes
};
struct plan_profile {
  std::string name;
  std::vector<kernel_profile> kernels;
};
KILN_LAZY const plan_profile& profile_of(const schedule_ref& s, std::size_t n_kernels);
/// Kernel k's bytes read and written, and flops, at this run's shapes (estimates).
KILN_LAZY std::pair<double, double> kernel_cost(const state& st, const kernel_profile& k);

/// Runs a plan's kernels on leaves. Not a template: each plan adds its kernels and a table of
/// them, not its own copy of this driver (build cost, docs/build-cost.md).
KILN_LAZY std::vector<any_tensor> run_plan(const schedule_ref& s, std::span<const kernel_entry> kernels,
                                           const std::vector<any_tensor>& leaves,
                                           const std::vector<any_tensor>* into, scratch_cache& cache);

template <const auto& S>
std::vector<any_tensor> run(const std::vector<any_tensor>& leaves, const std::vector<any_tensor>* into) {
  static_assert(first_unsupported(S) < 0,
                "kiln: cpu: the schedule has a node that is not a primitive (decompose the graph first)");
#if defined(__CUDA_ARCH__)
  // nvcc's device pass parses host code too, but never emits it: the plan's CPU kernels are
  // left to the host pass (cicc 13.0 crashes instantiating them, and would only discard them).
  (void)leaves, (void)into;
  return {};
#else
  constexpr int nk = static_cast<int>(S.kernels.size());
  static constexpr auto kernels = kernel_table<S>(std::make_integer_sequence<int, nk>{});
  static thread_local scratch_cache cache;
  return run_plan(schedule_ref::of(S), kernels, leaves, into, cache);
#endif
}

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME scratch_cache::~scratch_cache() = default;

KILN_LAZY_DEF run_memory prepare(state& st, const std::vector<any_tensor>* into, scratch_cache& cache) {
  const schedule_ref& s = st.s;
  run_memory r;
  r.outs.resize(s.n_outputs);
  for (std::size_t q = 0; q < s.n_outputs; ++q) {
    const auto o = static_cast<std::size_t>(s.outputs[q]);
    const dims& shape = st.shape[o];
    const dtype dt = s.nodes[o].dt;
    if (into && (*into)[q].defined()) {
      const any_tensor& t = (*into)[q];
      if (t.dt() != dt) throw dtype_error("assign", t.dt(), dt);
      if (!(t.shape() == shape)) throw shape_error("assign", t.shape(), shape, "differ");
      r.outs[q] = t;
    } else {
      for (std::size_t p = 0; p < q && !r.outs[q].defined(); ++p)
        if (s.outputs[p] == s.outputs[q]) r.outs[q] = r.outs[p];
      if (!r.outs[q].defined()) r.outs[q] = any_tensor(dt, shape, uninitialized);  // every element is written
    }
    if (s.kernel_of[o] >= 0 && !st.dest[o].p) st.dest[o] = view_of_tensor(r.outs[q]);
  }
  // scratch buffers, sized for the largest value each holds at these shapes
  std::vector<std::size_t> need(s.n_buffers, 0);
  for (std::size_t i = 0; i < s.size; ++i) {
    const int b = s.buffer_of[i];
    if (b < 0 || st.dest[i].p) continue;
    const std::size_t bytes = static_cast<std::size_t>(st.shape[i].numel()) * size_of(s.nodes[i].dt);
    need[static_cast<std::size_t>(b)] = std::max(need[static_cast<std::size_t>(b)], bytes);
  }
  cache.blocks.resize(need.size());
  cache.bytes.resize(need.size(), 0);
  for (std::size_t b = 0; b < need.size(); ++b)
    if (cache.bytes[b] < need[b] || !cache.blocks[b].data()) {
      cache.blocks[b] = block(need[b]);
      cache.bytes[b] = need[b];
    }
  for (std::size_t i = 0; i < s.size; ++i) {
    const int b = s.buffer_of[i];
    if (b >= 0 && !st.dest[i].p)
      st.dest[i] = contiguous_view(cache.blocks[static_cast<std::size_t>(b)].data(), s.nodes[i].dt, st.shape[i]);
  }
  // a written value with neither (one that only an output views: the plan leaves its memory
  // to the caller) gets memory of its own; the output is copied out of it
  for (std::size_t i = 0; i < s.size; ++i)
    if (s.kernel_of[i] >= 0 && s.written[i] && !st.dest[i].p) st.dest[i] = st.temp(s.nodes[i].dt, st.shape[i]);
  // outputs that no kernel computes are copied once their source exists: before the kernels,
  // or right after the kernel that computes it (its buffer may be reused later)
  r.after.assign(s.n_outputs, -1);
  r.computed.assign(s.n_outputs, 0);
  for (std::size_t q = 0; q < s.n_outputs; ++q) {
    int x = s.outputs[q];
    r.computed[q] = s.kernel_of[static_cast<std::size_t>(x)] >= 0;
    while (passes::is_view(s.nodes[static_cast<std::size_t>(x)].o) && s.nodes[static_cast<std::size_t>(x)].o != op::numel)
      x = s.nodes[static_cast<std::size_t>(x)].in[0];
    r.after[q] = s.kernel_of[static_cast<std::size_t>(x)];
  }
  return r;
}

KILN_LAZY_DEF void materialise(state& st, const run_memory& r, int k) {
  for (std::size_t q = 0; q < r.outs.size(); ++q) {
    if (r.computed[q] || r.after[q] != k) continue;
    const int o = st.s.outputs[q];
    const node& x = st.at(o);
    const view out = view_of_tensor(r.outs[q]);
    if (x.o == op::constant) fill(out, x.value);
    else if (x.o == op::numel) fill(out, static_cast<double>(st.numel_of(o)));
    else copy_elements(out, st.view_of(o));
  }
}

KILN_LAZY_DEF bool opens_team(const state& st) {
  for (const dims& d : st.shape)
    if (d.numel() >= 32768) return true;
  return false;
}

KILN_LAZY_DEF const plan_profile& profile_of(const schedule_ref& s, std::size_t n_kernels) {
  static std::mutex m;
  static std::map<const node*, plan_profile> known;
  std::lock_guard<std::mutex> l(m);
  auto [it, fresh] = known.try_emplace(s.nodes);
  plan_profile& p = it->second;
  if (!fresh) return p;
  p.kernels.resize(n_kernels);
  for (std::size_t i = 0; i < s.size; ++i) {
    const int k = s.kernel_of[i];
    if (k < 0) continue;
    kernel_profile& kp = p.kernels[static_cast<std::size_t>(k)];
    kp.members.push_back(static_cast<int>(i));
    if (s.written[i]) kp.written.push_back(static_cast<int>(i));
    const node& n = s.nodes[i];
    for (int a = 0; a < info(n.o).arity; ++a) {
      const int j = n.in[a];
      const op o = s.nodes[static_cast<std::size_t>(j)].o;
      if (s.kernel_of[static_cast<std::size_t>(j)] == k || o == op::constant || o == op::scalar) continue;
      if (std::find(kp.inputs.begin(), kp.inputs.end(), j) == kp.inputs.end()) kp.inputs.push_back(j);
    }
  }
  for (kernel_profile& kp : p.kernels) {
    int shown = 0;
    for (const int i : kp.members) {
      const op o = s.nodes[static_cast<std::size_t>(i)].o;
      if (passes::is_view(o)) continue;
      if (++shown > 8) {
        kp.name += "+...";
        break;
      }
      if (!kp.name.empty()) kp.name += '+';
      kp.name += name(o);
    }
    if (kp.name.empty()) kp.name = "copy";
  }
  p.name = "plan " + std::to_string(known.size()) + " (" + std::to_string(n_kernels) + " kernels, " +
           std::to_string(s.size) + " nodes)";
  return p;
}

KILN_LAZY_DEF std::pair<double, double> kernel_cost(const state& st, const kernel_profile& k) {
  double bytes = 0, flops = 0;
  auto value_bytes = [&](int i) {
    return static_cast<double>(st.shape[static_cast<std::size_t>(i)].numel()) *
           static_cast<double>(size_of(st.at(i).dt));
  };
  for (const int i : k.inputs) bytes += value_bytes(i);
  for (const int i : k.written) bytes += value_bytes(i);
  for (const int i : k.members) {
    const node& n = st.at(i);
    const auto numel = [&](int j) { return static_cast<double>(st.shape[static_cast<std::size_t>(j)].numel()); };
    const dims& a = st.shape[static_cast<std::size_t>(n.in[0])];
    switch (kind_of(n.o)) {
      case op_kind::matmul: flops += 2 * numel(i) * static_cast<double>(a.rank ? a.e[a.rank - 1] : 1); break;
      case op_kind::reduce: flops += numel(n.in[0]); break;
      case op_kind::unary:
      case op_kind::binary:
      case op_kind::ternary:
      case op_kind::cast: flops += numel(i); break;
      default:
        if (n.o == op::attention || n.o == op::attention_grad) {  // 4 q k^T v per query and key; 2.5x backward
          const dims& kv = st.shape[static_cast<std::size_t>(n.in[1])];
          const double keys = kv.rank >= 2 ? static_cast<double>(kv.e[kv.rank - 2]) : 1;
          flops += (n.o == op::attention ? 4 : 10) * numel(n.in[0]) * keys;
        }
    }
  }
  return {bytes, flops};
}

KILN_LAZY_DEF std::vector<any_tensor> run_plan(const schedule_ref& s, std::span<const kernel_entry> kernels,
                                               const std::vector<any_tensor>& leaves,
                                               const std::vector<any_tensor>* into, scratch_cache& cache) {
  // the profiler (debug/profiler.hpp): one atomic load per call when nothing records
  profiling::recorder* const prof = profiling::active();
  using profiling::now;
  const std::int64_t called = prof ? now() : 0;
  state st(s, leaves);
  st.resolve_shapes();
  run_memory r = prepare(st, into, cache);
  materialise(st, r, -1);
  double call_bytes = 0, call_flops = 0;
  const std::uint64_t call = prof ? prof->next_call() : 0;
  std::int64_t team_from = 0, body_end = 0;
  // the call's time outside its kernels, in rows of their own: shapes and memory (new outputs
  // and scratch: page faults), and outputs copied out of other values
  if (prof) prof->add("(shapes and memory)", false, call, called, now(), 0, 0);
  auto copies = [&](int k) {
    for (std::size_t q = 0; q < r.outs.size(); ++q)
      if (!r.computed[q] && r.after[q] == k) return true;
    return false;
  };
  auto all = [&] {
    if (!prof) {
      for (std::size_t k = 0; k < kernels.size(); ++k) {
        kernels[k].run(st, kernels[k].b);
        materialise(st, r, static_cast<int>(k));
      }
      return;
    }
    const plan_profile& pp = profile_of(s, kernels.size());
    if (team_from != 0) prof->add("(threads: the team's start)", false, call, team_from, now(), 0, 0);
    for (std::size_t k = 0; k < kernels.size(); ++k) {
      const std::int64_t t0 = now();
      kernels[k].run(st, kernels[k].b);
      const std::int64_t t1 = now();
      const auto [bytes, flops] = kernel_cost(st, pp.kernels[k]);
      call_bytes += bytes;
      call_flops += flops;
      prof->add(pp.kernels[k].name, false, call, t0, t1, bytes, flops);
      if (copies(static_cast<int>(k))) {
        materialise(st, r, static_cast<int>(k));
        prof->add("(outputs copied)", false, call, t1, now(), 0, 0);
      }
    }
    body_end = now();
  };
  // One team of threads for the whole call, also for one kernel: the team's threads are kiln's
  // pool, awake for a while after a call, where a kernel's own parallel region would wake
  // OpenMP's (asleep after every region under OMP_WAIT_POLICY=passive). Not for small plans,
  // which would pay the team's start and never thread (see opens_team).
  if (opens_team(st)) {
    if (prof) team_from = now();
    with_team(all);
    // the team's end: the caller waits for workers still in the team (long where the machine is
    // busy and a worker waits for a core)
    if (prof) prof->add("(threads: the team's end)", false, call, body_end, now(), 0, 0);
  } else {
    all();
  }
  if (prof) prof->add(profile_of(s, kernels.size()).name, true, call, called, now(), call_bytes, call_flops);
  return std::move(r.outs);
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace detail

/// How many kernels of schedule S compile code of their own: kernels of equal code (a model's
/// repeated layers, and their gradients) share one instantiation, each run on its own nodes.
template <const auto& S>
inline constexpr int compiled_kernels =
    detail::count_owners<S>(std::make_integer_sequence<int, static_cast<int>(S.kernels.size())>{});

/// Runs schedule S (a frozen schedule constant, e.g. kiln::plan<E>::schedule) on the leaf
/// table `leaves` (by slot); returns the graph's outputs in new tensors.
template <const auto& S>
std::vector<any_tensor> run_schedule(const std::vector<any_tensor>& leaves) {
  return detail::run<S>(leaves, nullptr);
}

/// The same, writing output q into into[q] where that is defined (its dtype and shape must be
/// the output's; it may be a strided view). A destination that shares storage with a leaf is
/// computed into fresh memory first and then copied, so `a = transpose(a) + a` is right; so are
/// the outputs of a plan that may throw midway, so that an error writes nothing.
template <const auto& S>
std::vector<any_tensor> run_schedule_into(const std::vector<any_tensor>& leaves, const std::vector<any_tensor>& into) {
  bool overlap = false;
  for (const any_tensor& t : into)
    for (const any_tensor& l : leaves) overlap = overlap || (t.defined() && t.shares_storage(l));
  // A plan with a node that may throw partway through (kiln::may_throw) also runs into fresh
  // memory: the destinations are written only once it is done.
  constexpr bool throws = [] {
    for (const node& n : S.g.nodes)
      if (may_throw(n.o, n.dt)) return true;
    return false;
  }();
  if (!overlap && !throws) return detail::run<S>(leaves, &into);
  return deliver(detail::run<S>(leaves, nullptr), into);
}

namespace detail {
// A plan's schedule under a short name. The templates instantiated per kernel of a plan take the
// schedule as a template argument, and so carry its name in theirs: plan<E>::schedule names the
// whole expression type E (a training step's outputs: a tuple of hundreds of ids), and a
// compiler mangles each such name at its full length. copy_of<H> is the schedule of the
// expression of structural hash H (its record's: graph/record.hpp), registered as expressions
// are; two structures of one hash would define sched(reg::plan_key<H>) twice, a compile error,
// never a wrong plan.
template <std::uint64_t H>
inline constexpr auto copy_of = sched(reg::plan_key<H>{});

/// The short-named schedule of expression E (P::expr; E and const E register one plan).
template <class E>
constexpr const auto& short_schedule() {
  using U = std::remove_cvref_t<E>;
  constexpr std::uint64_t h = record_ref<U>().hash;
  static_assert(sizeof(reg::enrol_plan<h, plan<U>::schedule>) > 0);
  return copy_of<h>;
}
}  // namespace detail

/// The CPU backend (backend/backend.hpp): `kiln::compile(expr, kiln::cpu::backend)`, and the
/// default one (backend/default.hpp).
struct backend_t {
  template <class P>
  static std::vector<any_tensor> run(const std::vector<any_tensor>& leaves, std::span<const any_tensor> into) {
    P::log_schedule();
    constexpr const auto& s = detail::short_schedule<typename P::expr>();
    if (into.empty()) return run_schedule<s>(leaves);
    return run_schedule_into<s>(leaves, std::vector<any_tensor>(into.begin(), into.end()));
  }
  /// The outputs' shapes for these leaves (their data are not read); throws as run<P> would.
  template <class P>
  static std::vector<dims> output_shapes(const std::vector<any_tensor>& leaves) {
    constexpr const auto& s = P::schedule();
    detail::state st(detail::schedule_ref::of(s), leaves);
    st.resolve_shapes();
    std::vector<dims> r;
    for (const int o : s.g.outputs) r.push_back(st.shape[static_cast<std::size_t>(o)]);
    return r;
  }
  static int num_threads() { return cpu::num_threads(); }
  static int set_num_threads(int n) { return cpu::set_num_threads(n); }
};
inline constexpr backend_t backend{};

}  // namespace kiln::cpu
