// The profiler (debug/profiler.hpp): every kernel of every plan run, with its plan call, in a
// Chrome trace that parses and nests, and a table whose kernels account for the calls' time.
#include "cpu_support.hpp"

#include <kiln/io/json.hpp>
#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace kiln;

namespace {

using net = nn::mlp<"mlp", 784, 512, 256, 10>;
using X = input<"x", f32, shape<dyn, 784>>;
using Y = input<"y", kiln::i64, shape<dyn>>;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// kiln's JSON reader keeps the values of integers only (a safetensors header has no others): a
// number with a fraction is checked for its syntax and kind; its sign by the text.
bool non_negative_number(const io::json::value& v) {
  return v.k == io::json::kind::number || (v.k == io::json::kind::integer && !v.negative);
}

}  // namespace

TEST_CASE("a training step's kernels, each in its call, in a trace that parses; the table sums to the steps") {
  const auto path = std::filesystem::temp_directory_path() / ("kiln_profile_" + std::to_string(::getpid()) + ".json");
  auto tr = optim::trainer(cross_entropy(net{}(X{}), Y{}), net::params{}, optim::adam{.lr = 1e-3}, nn::make_params<net>(3));
  const any_tensor x = kt::random<float, 2>({256, 784}).any();
  any_tensor y(dtype::i64, dims{256});
  for (index_t i = 0; i < 256; ++i) y.data<std::int64_t>()[i] = (i * 7) % 10;
  tr.step({{"x", x}, {"y", y}});  // compiled, warm: outside the recording
  const int steps = 5;
  std::vector<profiling::event> ev;
  std::vector<std::string> names;
  std::string table;
  {
    profiler p(path);
    CHECK_THROWS_AS(profiler(), std::logic_error);  // one recording at a time
    for (int i = 0; i < steps; ++i) tr.step({{"x", x}, {"y", y}});
    ev = p.recorded().events();
    names = p.recorded().names();
    table = p.table();
  }
  tr.step({{"x", x}, {"y", y}});  // after the scope: not recorded, and no recorder is left behind
  CHECK(profiling::active() == nullptr);

  // one plan event per step, and its kernels inside it, on the calling thread
  std::map<std::uint64_t, const profiling::event*> plans;
  for (const auto& e : ev)
    if (e.plan) plans[e.call] = &e;
  REQUIRE(plans.size() == static_cast<std::size_t>(steps));
  std::map<std::uint64_t, double> row_us;
  std::map<std::uint64_t, int> kernels;
  double flops = 0;
  for (const auto& e : ev) {
    if (e.plan) continue;
    const profiling::event& call = *plans.at(e.call);
    CHECK(e.start_us >= call.start_us);
    CHECK(e.start_us + e.dur_us <= call.start_us + call.dur_us + 1e-3);
    CHECK(e.tid == call.tid);
    row_us[e.call] += e.dur_us;
    if (names[e.name].front() == '(') continue;  // the call's time outside its kernels
    CHECK(e.bytes > 0);
    ++kernels[e.call];
    flops += e.flops;
  }
  for (const auto& [call, n] : kernels) CHECK(n == kernels.begin()->second);  // the same kernels every step
  CHECK(kernels.begin()->second >= 3);
  // the step's flops: forward 2 b (784 512 + 512 256 + 256 10), backward twice that (the first
  // layer's input gradient is not needed); the estimate counts the products and the elementwise work
  const double products = 2.0 * 256 * (784 * 512 + 512 * 256 + 256 * 10) * 3 - 2.0 * 256 * 784 * 512;
  CHECK(flops / steps >= products);
  CHECK(flops / steps <= 1.2 * products);
  for (const auto& entry : row_us) {  // (no structured binding: clang 14 cannot capture one)
    const std::uint64_t call = entry.first;
    const double us = entry.second;
    CAPTURE(call);
    CHECK(us <= plans.at(call)->dur_us);
    CHECK(us >= 0.95 * plans.at(call)->dur_us);  // the table's rows account for the step
  }
  CHECK(table.find("(shapes and memory)") != std::string::npos);
  CHECK(table.find("matmul") != std::string::npos);
  CHECK(table.find("plan calls: 5") != std::string::npos);

  // the trace: Chrome's JSON object format, every event complete ("X") or metadata ("M")
  const std::string text = read_file(path);
  CHECK(text.find(": -") == std::string::npos);  // no negative time, size or count
  const io::json::value doc = io::json::parse(text);
  std::filesystem::remove(path);
  const io::json::value* events = doc.find("traceEvents");
  REQUIRE(events);
  REQUIRE(events->k == io::json::kind::array);
  CHECK(events->items.size() == ev.size() + 1);
  int complete = 0;
  for (const io::json::value& e : events->items) {
    REQUIRE(e.k == io::json::kind::object);
    const io::json::value* ph = e.find("ph");
    REQUIRE(ph);
    REQUIRE(e.find("name"));
    CHECK(e.find("name")->k == io::json::kind::string);
    CHECK(e.find("pid"));
    CHECK(e.find("tid"));
    if (ph->s == "M") continue;
    CHECK(ph->s == "X");
    CHECK(non_negative_number(*e.find("ts")));
    CHECK(non_negative_number(*e.find("dur")));
    CHECK(e.find("args")->find("bytes"));
    ++complete;
  }
  CHECK(complete == static_cast<int>(ev.size()));
  CHECK(std::find(names.begin(), names.end(), std::string("copy")) == names.end());
}

TEST_CASE("without a recording a plan records nothing; a trace that cannot be written throws from stop()") {
  using A = input<"a", f32, shape<dyn>>;
  const auto f = compile(exp(A{}) + 1);
  const any_tensor a = kt::random<float, 1>({1000}).any();
  CHECK(profiling::active() == nullptr);
  (void)f({{"a", a}});
  profiler p("/nonexistent-directory/kiln/trace.json");
  (void)f({{"a", a}});
  CHECK(p.recorded().events().size() == 3);  // the call, its memory and its one kernel
  CHECK_THROWS_AS(p.stop(), std::filesystem::filesystem_error);
  CHECK(profiling::active() == nullptr);
  p.stop();  // a second stop does nothing
}
