// kiln/debug/logs.hpp: KILN_LOGS, printing a plan's stages, and Graphviz DOT dumps.
//
//   KILN_LOGS=graph,stages,prims,fusion,plan   (a comma list; `all` for every item)
// makes the first evaluation of each expression type print those stages of its plan to
// stderr, from the frozen plan, as TORCH_LOGS does for torch.compile. to_dot() writes the
// fused graph as DOT, one cluster per kernel: `dot -Tpng plan.dot -o plan.png`.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "../core/config.hpp"
#include "../graph/graph.hpp"
#include "../graph/trace.hpp"
#include "../passes/pipeline.hpp"

#if KILN_DEFINE_RUNTIME
#include <sstream>
#endif

namespace kiln {

/// Which stages to log.
struct log_stages {
  bool graph = false, prims = false, fusion = false, plan = false, stages = false;
  constexpr bool any() const { return graph || prims || fusion || plan || stages; }
};

/// Parses a KILN_LOGS value; names it does not know are listed in `unknown`.
KILN_LAZY log_stages parse_logs(std::string_view spec, std::string* unknown = nullptr);

/// The stages KILN_LOGS asks for, read once (a warning names unknown stages).
KILN_LAZY const log_stages& logs_from_env();

namespace debug {

KILN_LAZY std::string node_line(const node& n, int i);

KILN_LAZY std::string bytes_text(const passes::bytes_t& b);

template <class G>
void print_graph(std::ostream& os, const G& g, std::string_view title) {
  os << "[kiln] " << title << ": " << g.nodes.size() << " nodes, " << g.leaves << " leaves\n";
  for (std::size_t i = 0; i < g.nodes.size(); ++i) os << "  " << node_line(g.nodes[i], static_cast<int>(i)) << "\n";
  os << "  outputs:";
  for (int o : g.outputs) os << " %" << o;
  os << "\n";
}

template <class S>
void print_fusion(std::ostream& os, const S& s) {
  os << "[kiln] fusion: " << s.kernels.size() << " kernels\n";
  for (std::size_t k = 0; k < s.kernels.size(); ++k) {
    const passes::kernel& K = s.kernels[k];
    os << "  kernel " << k << ": " << name(K.kind) << " over " << to_string(K.space);
    if (K.kind == passes::kernel_kind::reduction) os << " reducing axes " << K.axes;
    os << ", " << K.nodes << " nodes, reads " << K.reads << " (" << bytes_text(K.bytes_read) << "), writes "
       << K.writes << " (" << bytes_text(K.bytes_written) << ")\n   ";
    for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
      if (s.kernel_of[i] == static_cast<int>(k)) os << " %" << i << (s.written[i] ? "*" : "");
    os << "\n";
  }
  os << "  (* = written to memory)\n";
}

template <class S>
void print_plan(std::ostream& os, const S& s) {
  os << "[kiln] plan: " << s.buffers.size() << " scratch buffers, peak scratch "
     << bytes_text(passes::scratch_bytes(s)) << "\n";
  for (std::size_t b = 0; b < s.buffers.size(); ++b) {
    os << "  buffer " << b << " (" << bytes_text(s.buffers[b]) << "):";
    for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
      if (s.buffer_of[i] == static_cast<int>(b)) os << " %" << i << " (kernel " << s.kernel_of[i] << ")";
    os << "\n";
  }
}

}  // namespace debug

/// Prints the requested stages of a plan: the graph as captured, then the frozen schedule's
/// primitive graph, kernels and buffers.
KILN_LAZY void print_stages(std::ostream& os, const log_stages& st, const graph& captured,
                            const passes::schedule& s);

/// The same for a graph that runs unfused (the eager backend): no kernels, no buffers.
KILN_LAZY void print_reference(std::ostream& os, const log_stages& st, const graph& captured, const graph& ref);

/// The node count E's graph has after each graph stage of passes::pipeline (-1: a stage that
/// does not run for E): a constant, so that logging a plan instantiates no code per stage.
template <class E>
inline constexpr auto stage_node_counts = []<int... I>(std::integer_sequence<int, I...>) {
  return std::array<int, sizeof...(I)>{
      (stage_runs_for<E, I>() ? static_cast<int>(stage_graph<E, I>().nodes.size()) : -1)...};
}(std::make_integer_sequence<int, passes::fuse_stage>{});

/// One line per stage of passes::pipeline: what it left of a graph (nodes; kernels; buffers),
/// from the traced node count and stage_node_counts.
KILN_LAZY std::string stage_summary(std::size_t traced_nodes, std::span<const int> counts, std::size_t kernels,
                                    std::size_t buffers);

namespace detail {
/// What log_plan_once prints, once the stages asked for are known: not a template, so that each
/// plan adds only its call (the frozen arrays go as spans).
KILN_LAZY void log_plan(const log_stages& st, const graph_span& traced_graph, std::span<const int> counts,
                        const passes::schedule_span& s);

KILN_LAZY void log_reference(const log_stages& st, const graph_span& traced_graph, const graph_span& ref);
}  // namespace detail

/// KILN_LOGS: the first run of expression type E prints the stages asked for, of the frozen
/// plan S that runs (a backend calls this through program<E>::log_schedule, backend.hpp).
template <class E, const auto& S>
void log_plan_once() {
  const log_stages& st = logs_from_env();
  if (!st.any()) return;
  static std::once_flag once;
  std::call_once(once, [&] {
    detail::log_plan(st, graph_span::of(traced<E>::value), stage_node_counts<E>, passes::schedule_span::of(S));
  });
}

/// The same for a backend that runs E's reference graph R unfused.
template <class E, const auto& R>
void log_reference_once() {
  const log_stages& st = logs_from_env();
  if (!st.any()) return;
  static std::once_flag once;
  std::call_once(once, [&] { detail::log_reference(st, graph_span::of(traced<E>::value), graph_span::of(R)); });
}

namespace debug {
KILN_LAZY std::string dot_escape(std::string s);
}  // namespace debug

/// Graphviz DOT of a schedule: one cluster per kernel, leaves as ellipses, views dashed,
/// values written to memory with a bold border.
KILN_LAZY std::string to_dot(const passes::schedule_span& s);

/// DOT of a frozen schedule.
template <std::size_t N, std::size_t M, std::size_t K, std::size_t B>
std::string to_dot(const passes::frozen_schedule<N, M, K, B>& s) {
  return to_dot(passes::schedule_span::of(s));
}

/// DOT of a run-time schedule.
template <int = 0>
std::string to_dot(const passes::schedule& s) { return to_dot(passes::schedule_span::of(s)); }

/// DOT of an expression's plan.
template <traceable E>
std::string to_dot(const E&) {
  return to_dot(plan<E>::schedule);
}

#if KILN_DEFINE_RUNTIME
KILN_LAZY_DEF log_stages parse_logs(std::string_view spec, std::string* unknown) {
  log_stages s;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "graph") s.graph = true;
    else if (item == "prims") s.prims = true;
    else if (item == "fusion") s.fusion = true;
    else if (item == "plan") s.plan = true;
    else if (item == "stages") s.stages = true;
    else if (item == "all") s = {true, true, true, true, true};
    else if (!item.empty() && unknown) *unknown += (unknown->empty() ? "" : ", ") + std::string(item);
  }
  return s;
}

KILN_LAZY_DEF const log_stages& logs_from_env() {
  static const log_stages s = [] {
    const char* v = std::getenv("KILN_LOGS");
    std::string unknown;
    const log_stages r = parse_logs(v ? v : "", &unknown);
    if (!unknown.empty())
      std::fprintf(stderr, "kiln: KILN_LOGS: unknown stage(s) %s (known: graph, stages, prims, fusion, plan, all)\n",
                   unknown.c_str());
    return r;
  }();
  return s;
}

KILN_LAZY_DEF std::string debug::node_line(const node& n, int i) {
  std::string s = "%" + std::to_string(i) + " = " + std::string(name(n.o)) + " " + std::string(name(n.dt)) + " " +
                  to_string(n.shape);
  for (int j = 0; j < n.nin(); ++j) s += " %" + std::to_string(n.in[j]);
  if (!n.label().empty()) s += " \"" + std::string(n.label()) + "\"";
  if (n.o == op::constant) {
    std::ostringstream v;
    v << n.value;
    s += " value=" + v.str();
  }
  if (n.o == op::attention || n.o == op::attention_grad) {
    std::ostringstream v;
    v << attention_scale(n);
    s += " scale=" + v.str() + (attention_causal(n) ? " causal" : "");
  }
  if (kind_of(n.o) == op_kind::reduce) s += " axes=" + std::to_string(n.axes) + (n.keepdim ? " keepdim" : "");
  if (n.o == op::unfold || n.o == op::fold || n.o == op::conv2d || n.o == op::max_pool2d || n.o == op::avg_pool2d) {
    const window2d w = window_of(n);
    s += " kernel=" + std::to_string(w.kh) + "x" + std::to_string(w.kw) + " stride=" + std::to_string(w.sh) + "," +
         std::to_string(w.sw) + " padding=" + std::to_string(w.ph) + "," + std::to_string(w.pw) + " dilation=" +
         std::to_string(w.dh) + "," + std::to_string(w.dw);
  }
  if (n.o == op::rand) s += " stream=" + std::to_string(n.axes);
  if (n.o == op::cumsum) s += " axis=" + std::to_string(n.axis) + (n.value != 0 ? " reverse" : "");
  if (n.o == op::cumprod) s += " axis=" + std::to_string(n.axis);
  if (n.o == op::argsort) s += " axis=" + std::to_string(n.axis) + (n.value != 0 ? " descending" : "");
  return s;
}

KILN_LAZY_DEF std::string debug::bytes_text(const passes::bytes_t& b) {
  std::string s;
  if (b.fixed || !b.per_dyn) s = std::to_string(b.fixed);
  if (b.per_dyn) s += (s.empty() ? "" : " + ") + std::to_string(b.per_dyn) + "*N";
  return s + (b.approximate ? " (approx.)" : "") + " B";
}

KILN_LAZY_DEF void print_stages(std::ostream& os, const log_stages& st, const graph& captured,
                                const passes::schedule& s) {
  if (st.graph) debug::print_graph(os, captured, "graph (as captured)");
  if (st.prims) debug::print_graph(os, s.g, "prims (decomposed, canonicalised)");
  if (st.fusion) debug::print_fusion(os, s);
  if (st.plan) debug::print_plan(os, s);
}

KILN_LAZY_DEF void print_reference(std::ostream& os, const log_stages& st, const graph& captured, const graph& ref) {
  if (st.graph) debug::print_graph(os, captured, "graph (as captured)");
  if (st.prims) debug::print_graph(os, ref, "reference graph (run node by node, unfused)");
  if (st.fusion || st.plan) os << "[kiln] fusion, plan: none (the eager backend runs the graph node by node)\n";
}

KILN_LAZY_DEF std::string stage_summary(std::size_t traced_nodes, std::span<const int> counts, std::size_t kernels,
                                        std::size_t buffers) {
  std::string out = "[kiln] stages: traced " + std::to_string(traced_nodes) + " nodes\n";
  for (std::size_t i = 0; i < counts.size(); ++i)
    out += "  " + std::to_string(i) + " " + std::string(passes::pipeline[i].name) + ": " +
           (counts[i] >= 0 ? std::to_string(counts[i]) + " nodes\n" : std::string("skipped (no derivatives)\n"));
  out += "  " + std::to_string(passes::fuse_stage) + " fuse: " + std::to_string(kernels) + " kernels\n";
  out += "  " + std::to_string(passes::fuse_stage + 1) + " plan: " + std::to_string(buffers) + " scratch buffers\n";
  return out;
}

KILN_LAZY_DEF void detail::log_plan(const log_stages& st, const graph_span& traced_graph, std::span<const int> counts,
                                    const passes::schedule_span& s) {
  std::ostringstream os;
  if (st.stages) os << stage_summary(traced_graph.nodes.size(), counts, s.kernels.size(), s.buffers.size());
  print_stages(os, st, traced_graph.thaw(), s.thaw());
  std::fputs(os.str().c_str(), stderr);
}

KILN_LAZY_DEF void detail::log_reference(const log_stages& st, const graph_span& traced_graph, const graph_span& ref) {
  std::ostringstream os;
  print_reference(os, st, traced_graph.thaw(), ref.thaw());
  std::fputs(os.str().c_str(), stderr);
}

KILN_LAZY_DEF std::string debug::dot_escape(std::string s) {
  std::string r;
  for (char c : s) r += c == '"' ? std::string("\\\"") : std::string(1, c);
  return r;
}

KILN_LAZY_DEF std::string to_dot(const passes::schedule_span& s) {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  auto label = [&](std::size_t i) {
    const node& n = s.g.nodes[i];
    // appended piece by piece: GCC 12's -Wrestrict misfires on `"%" + std::string` (PR 105651)
    std::string l = "%";
    l += std::to_string(i);
    l += ' ';
    l += name(n.o);
    if (!n.label().empty()) {
      l += ' ';
      l += n.label();
    }
    l += "\\n";
    l += name(n.dt);
    l += ' ';
    l += to_string(n.shape);
    return debug::dot_escape(l);
  };
  auto decl = [&](std::size_t i, const char* indent) {
    const node& n = s.g.nodes[i];
    os << indent << "n" << i << " [label=\"" << label(i) << "\"";
    if (kind_of(n.o) == op_kind::leaf) os << ", shape=ellipse";
    else if (n.o == op::constant) os << ", shape=plaintext";
    else if (passes::is_view(n.o)) os << ", style=dashed";
    if (s.written[i] && kind_of(n.o) != op_kind::leaf) os << ", penwidth=2.5";
    os << "];\n";
  };
  for (std::size_t k = 0; k < s.kernels.size(); ++k) {
    const passes::kernel& K = s.kernels[k];
    os << "  subgraph cluster_" << k << " {\n    label=\"kernel " << k << ": " << name(K.kind) << " "
       << to_string(K.space) << "\";\n    style=filled; color=\"#e8eef7\";\n";
    for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
      if (s.kernel_of[i] == static_cast<int>(k)) decl(i, "    ");
    os << "  }\n";
  }
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
    if (s.kernel_of[i] < 0) decl(i, "  ");
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
    for (int j = 0; j < s.g.nodes[i].nin(); ++j) os << "  n" << s.g.nodes[i].in[j] << " -> n" << i << ";\n";
  os << "}\n";
  return os.str();
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
