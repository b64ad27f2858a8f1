// kiln/debug/profiler.hpp: every kernel of every plan run, timed, as torch.profiler records
// operators: a trace in the Chrome/Perfetto JSON format (chrome://tracing, ui.perfetto.dev) and
// a summary table sorted by time, as key_averages().table() prints it.
//
//   KILN_PROFILE=trace.json ./app        the whole run: the trace written at exit, the table
//                                        printed to stderr
//   { kiln::profiler p("trace.json");    a scope: recording from here to p's end (or p.stop()),
//     ...                                the trace written then (no path: not written);
//     std::puts(p.table().c_str()); }    the table of what it recorded
//
// A plan run records one event for the call ("plan") and one per kernel ("kernel", named by
// its fused ops: "matmul+add+relu"), with the calling thread, its start and duration, and the
// bytes it reads and writes and the flops it does, estimated from the run's shapes (each input
// and each written value once; 2 m n k for a product, one per element otherwise); and the rest
// of the call in rows of their own, "(shapes and memory)" before the kernels (new outputs and
// scratch: their page faults), "(outputs copied)", and for a call run by a team of threads
// "(threads: the team's start)" and "(threads: the team's end)", so that the rows sum to the
// calls. When
// nothing records, a plan run pays one atomic load. One recorder at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../core/config.hpp"

#if KILN_DEFINE_RUNTIME
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#endif

namespace kiln {

namespace profiling {

/// One timed span: a kernel or a whole plan call.
struct event {
  std::uint32_t name = 0;  ///< index into recorder::names()
  bool plan = false;       ///< the whole call (else one kernel of it)
  std::uint32_t tid = 0;   ///< the recording thread, numbered from 1 in the order they first record
  std::uint64_t call = 0;  ///< the plan call it belongs to, numbered from 1
  double start_us = 0, dur_us = 0;  ///< from the recorder's start
  double bytes = 0, flops = 0;
};

/// Totals of one name, for the table.
struct totals {
  std::uint64_t calls = 0;
  double us = 0, bytes = 0, flops = 0;
  bool plan = false;
};

/// Now, in nanoseconds of std::chrono::steady_clock: the time stamps recorder::add takes.
KILN_RUNTIME std::int64_t now();

/// What one recording holds (thread-safe).
class recorder {
 public:
  /// Events kept for the trace; beyond, only the totals grow (the trace says how many it left out).
  static constexpr std::size_t max_events = 2'000'000;

  KILN_RUNTIME recorder();
  /// Microseconds from the start to t (a time stamp of now()).
  double at(std::int64_t t) const { return static_cast<double>(t - start_) / 1e3; }
  /// A new plan call's number.
  std::uint64_t next_call() { return calls_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// Records a span of `name`, from t0 to t1 (time stamps of now()).
  KILN_RUNTIME void add(const std::string& name, bool plan, std::uint64_t call, std::int64_t t0, std::int64_t t1,
                        double bytes, double flops);

  KILN_RUNTIME std::vector<event> events() const;
  KILN_RUNTIME std::vector<std::string> names() const;
  KILN_RUNTIME std::map<std::string, totals> summary() const;
  std::uint64_t dropped() const { return dropped_.load(); }
  /// The trace, Chrome's JSON trace format (an object with "traceEvents").
  KILN_RUNTIME std::string trace_json() const;
  /// Writes trace_json() to `path` (throws std::filesystem::filesystem_error if it cannot).
  KILN_RUNTIME void write_trace(const std::string& path) const;
  /// The summary, one row per name, kernels sorted by total time, then the plans.
  KILN_RUNTIME std::string table(std::size_t rows = 40) const;

 private:
  std::int64_t start_;
  std::atomic<std::uint64_t> calls_{0}, dropped_{0};
  mutable std::mutex m_;
  std::vector<event> events_;
  std::vector<std::string> names_;
  std::map<std::string, std::uint32_t> ids_;
  std::map<std::string, totals> totals_;
};

/// The recorder plans record into (nullptr: none). The first call reads KILN_PROFILE.
KILN_RUNTIME std::atomic<recorder*>& current();
inline recorder* active() { return current().load(std::memory_order_acquire); }

/// A number for the calling thread (1, 2, ... in the order threads first ask).
KILN_RUNTIME std::uint32_t thread_number();

}  // namespace profiling

/// Records every plan run from construction to stop() (or destruction); then writes the trace
/// to `trace` unless it is empty. Throws std::logic_error if another recording is on.
class profiler {
 public:
  KILN_RUNTIME explicit profiler(std::string trace = {});
  KILN_RUNTIME ~profiler();
  profiler(const profiler&) = delete;
  profiler& operator=(const profiler&) = delete;
  /// Ends the recording (and writes the trace, if a path was given); later calls do nothing.
  KILN_RUNTIME void stop();
  const profiling::recorder& recorded() const { return r_; }
  std::string table(std::size_t rows = 40) const { return r_.table(rows); }

 private:
  profiling::recorder r_;
  std::string trace_;
  bool on_ = false;
};

#if KILN_DEFINE_RUNTIME
namespace profiling {

KILN_RUNTIME std::int64_t now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

KILN_RUNTIME recorder::recorder() : start_(now()) {}

KILN_RUNTIME void recorder::add(const std::string& name, bool plan, std::uint64_t call, std::int64_t t0, std::int64_t t1,
                                double bytes, double flops) {
  const double s = at(t0), d = static_cast<double>(t1 - t0) / 1e3;
  const std::uint32_t tid = thread_number();
  std::lock_guard<std::mutex> l(m_);
  totals& t = totals_[name];
  ++t.calls;
  t.us += d;
  t.bytes += bytes;
  t.flops += flops;
  t.plan = plan;
  if (events_.size() >= max_events) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto [it, fresh] = ids_.try_emplace(name, static_cast<std::uint32_t>(names_.size()));
  if (fresh) names_.push_back(name);
  events_.push_back({it->second, plan, tid, call, s, d, bytes, flops});
}

KILN_RUNTIME std::vector<event> recorder::events() const {
  std::lock_guard<std::mutex> l(m_);
  return events_;
}
KILN_RUNTIME std::vector<std::string> recorder::names() const {
  std::lock_guard<std::mutex> l(m_);
  return names_;
}
KILN_RUNTIME std::map<std::string, totals> recorder::summary() const {
  std::lock_guard<std::mutex> l(m_);
  return totals_;
}

namespace detail {
inline void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  out += '"';
}
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
}  // namespace detail

KILN_RUNTIME std::string recorder::trace_json() const {
  std::vector<event> ev;
  std::vector<std::string> nm;
  {
    std::lock_guard<std::mutex> l(m_);
    ev = events_;
    nm = names_;
  }
  std::string j = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"producer\": \"kiln\", \"dropped_events\": " +
                  std::to_string(dropped()) + "},\n\"traceEvents\": [\n";
  j += R"({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "kiln plans"}})";
  for (const event& e : ev) {
    j += ",\n{\"name\": ";
    detail::append_json_string(j, nm[e.name]);
    j += e.plan ? R"(, "cat": "plan")" : R"(, "cat": "kernel")";
    j += ", \"ph\": \"X\", \"ts\": " + detail::fixed(e.start_us, 3) + ", \"dur\": " + detail::fixed(e.dur_us, 3) +
         ", \"pid\": 1, \"tid\": " + std::to_string(e.tid) + ", \"args\": {\"call\": " + std::to_string(e.call) +
         ", \"bytes\": " + detail::fixed(e.bytes, 0) + ", \"flops\": " + detail::fixed(e.flops, 0) + "}}";
  }
  j += "\n]}\n";
  return j;
}

KILN_RUNTIME void recorder::write_trace(const std::string& path) const {
  const std::string j = trace_json();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f)
    throw std::filesystem::filesystem_error("kiln::profiler: cannot write the trace", path,
                                            std::make_error_code(std::errc::io_error));
  const bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
  if (std::fclose(f) != 0 || !ok)
    throw std::filesystem::filesystem_error("kiln::profiler: cannot write the trace", path,
                                            std::make_error_code(std::errc::io_error));
}

KILN_RUNTIME std::string recorder::table(std::size_t rows) const {
  const std::map<std::string, totals> t = summary();
  std::vector<std::pair<std::string, totals>> kernels, plans;
  double kernel_us = 0, plan_us = 0;
  std::uint64_t plan_calls = 0;
  for (const auto& [name, x] : t) {
    (x.plan ? plans : kernels).push_back({name, x});
    if (x.plan) plan_us += x.us, plan_calls += x.calls;
    else kernel_us += x.us;
  }
  auto by_time = [](const auto& a, const auto& b) { return a.second.us > b.second.us; };
  std::sort(kernels.begin(), kernels.end(), by_time);
  std::sort(plans.begin(), plans.end(), by_time);
  std::string out;
  char line[512];
  auto row = [&](const std::string& name, const totals& x, double of) {
    std::string n = name.size() > 48 ? name.substr(0, 45) + "..." : name;
    std::snprintf(line, sizeof line, "%-48s %8llu %12.3f %7.1f%% %11.2f %9.2f %9.2f\n", n.c_str(),
                  static_cast<unsigned long long>(x.calls), x.us / 1e3, of > 0 ? 100 * x.us / of : 0.0,
                  x.calls ? x.us / static_cast<double>(x.calls) : 0.0, x.us > 0 ? x.bytes / x.us / 1e3 : 0.0,
                  x.us > 0 ? x.flops / x.us / 1e3 : 0.0);
    out += line;
  };
  std::snprintf(line, sizeof line, "%-48s %8s %12s %8s %11s %9s %9s\n", "kernel", "calls", "total ms", "%", "avg us",
                "GB/s", "GFLOP/s");
  out += line;
  out += std::string(111, '-') + "\n";
  for (std::size_t i = 0; i < kernels.size() && i < rows; ++i) row(kernels[i].first, kernels[i].second, kernel_us);
  if (kernels.size() > rows) out += "(" + std::to_string(kernels.size() - rows) + " more kernels)\n";
  out += std::string(111, '-') + "\n";
  for (std::size_t i = 0; i < plans.size() && i < rows; ++i) row(plans[i].first, plans[i].second, plan_us);
  std::snprintf(line, sizeof line,
                "rows above: %.3f ms in all; plan calls: %llu, %.3f ms (the rows are %.1f%% of it)\n", kernel_us / 1e3,
                static_cast<unsigned long long>(plan_calls), plan_us / 1e3, plan_us > 0 ? 100 * kernel_us / plan_us : 0.0);
  out += line;
  return out;
}

KILN_RUNTIME std::uint32_t thread_number() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t n = next.fetch_add(1, std::memory_order_relaxed);
  return n;
}

namespace detail {
/// KILN_PROFILE's recording: the whole run, written (and its table printed) at exit.
struct env_recording {
  recorder r;
  std::string path;
  explicit env_recording(const char* p) : path(p) {}
  ~env_recording() {
    current().store(nullptr, std::memory_order_release);
    try {
      r.write_trace(path);
      std::fprintf(stderr, "kiln: profile written to %s\n%s", path.c_str(), r.table().c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: KILN_PROFILE: %s\n", e.what());
    }
  }
};
inline recorder* from_environment() {
  const char* p = std::getenv("KILN_PROFILE");
  if (!p || !*p) return nullptr;
  static env_recording rec(p);
  return &rec.r;
}
}  // namespace detail

KILN_RUNTIME std::atomic<recorder*>& current() {
  static std::atomic<recorder*> c{detail::from_environment()};
  return c;
}

}  // namespace profiling

KILN_RUNTIME profiler::profiler(std::string trace) : trace_(std::move(trace)) {
  profiling::recorder* none = nullptr;
  if (!profiling::current().compare_exchange_strong(none, &r_, std::memory_order_acq_rel))
    throw std::logic_error("kiln::profiler: another recording is on (a profiler, or KILN_PROFILE)");
  on_ = true;
}
KILN_RUNTIME void profiler::stop() {
  if (!on_) return;
  on_ = false;
  profiling::recorder* self = &r_;
  profiling::current().compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  if (!trace_.empty()) r_.write_trace(trace_);
}
KILN_RUNTIME profiler::~profiler() {
  try {
    stop();
  } catch (const std::exception& e) {  // a destructor does not throw: say it
    std::fprintf(stderr, "kiln::profiler: %s\n", e.what());
  }
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
