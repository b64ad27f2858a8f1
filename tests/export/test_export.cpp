// A model exported through the C ABI (kiln/export.hpp, kiln_add_model) against the same model
// compiled into this program: bit-identical outputs from parameters set from memory or loaded
// from safetensors, from caller memory that is strided or not aligned, from four threads at
// once; every bad argument an error code and a message, with nothing written. Writes the files
// that the C and Python callers check (export_c, export_python).
#include <kiln/export/kiln_model.h>
#include <kiln/io/safetensors.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "../support.hpp"
#include "mlp.hpp"

using namespace kiln;
using namespace kt_export;

namespace {

/// A kiln_tensor describing a kiln tensor's memory.
struct c_tensor {
  std::vector<std::int64_t> shape, strides;
  kiln_tensor t{};
  c_tensor(const char* name, const any_tensor& v, bool with_strides = false)
      : shape(v.shape().e, v.shape().e + v.rank()), strides(v.strides().e, v.strides().e + v.rank()) {
    t = {name, static_cast<std::int32_t>(v.dt()), v.rank(), shape.data(), with_strides ? strides.data() : nullptr, v.bytes()};
  }
};

struct model_handle {
  kiln_model* m = nullptr;
  model_handle() { REQUIRE(kiln_model_create(&m) == KILN_OK); }
  ~model_handle() { kiln_model_destroy(m); }
};

std::map<std::string, any_tensor> random_params() {
  return {{"fc1.weight", kt::random_tensor(f32, dims{20, 16}, -0.5, 0.5)},
          {"fc1.bias", kt::random_tensor(f32, dims{16}, -0.5, 0.5)},
          {"fc2.weight", kt::random_tensor(f32, dims{16, 5}, -0.5, 0.5)},
          {"fc2.bias", kt::random_tensor(f32, dims{5}, -0.5, 0.5)}};
}

/// The model compiled here, on the CPU backend.
std::vector<any_tensor> reference(const std::map<std::string, any_tensor>& params, const any_tensor& x) {
  std::vector<feed> feeds{{"x", x}};
  for (const auto& [name, t] : params) feeds.push_back({name, t});
  return eval_all(mlp(), std::span<const feed>(feeds), cpu::backend);
}

void set_params(kiln_model* m, const std::map<std::string, any_tensor>& params) {
  for (const auto& [name, t] : params) {
    c_tensor c(name.c_str(), t);
    REQUIRE(kiln_model_set_param(m, &c.t) == KILN_OK);
  }
}

/// Runs the library's model; its outputs in new tensors.
std::vector<any_tensor> run(const kiln_model* m, const any_tensor& x) {
  c_tensor in("x", x);
  std::vector<any_tensor> out;
  std::vector<c_tensor> outs;
  for (std::size_t q = 0; q < 2; ++q) {
    std::int32_t rank = 0;
    std::int64_t shape[KILN_MAX_RANK];
    REQUIRE(kiln_model_output_shape(m, &in.t, 1, q, &rank, shape) == KILN_OK);
    dims d;
    d.rank = rank;
    for (int a = 0; a < rank; ++a) d.e[a] = shape[a];
    out.emplace_back(f32, d);
  }
  for (const any_tensor& t : out) outs.emplace_back(nullptr, t);
  kiln_tensor o[2] = {outs[0].t, outs[1].t};
  const int rc = kiln_model_run(m, &in.t, 1, o, 2);
  INFO(kiln_last_error());
  REQUIRE(rc == KILN_OK);
  return out;
}

std::string error_of(int rc, int want) {
  CHECK(rc == want);
  return kiln_last_error();
}

}  // namespace

TEST_CASE("export: the model describes its inputs, parameters and outputs") {
  CHECK(kiln_abi_version() == KILN_ABI_VERSION);
  CHECK(kiln_model_count(KILN_INPUT) == 1);
  CHECK(kiln_model_count(KILN_PARAM) == 4);
  CHECK(kiln_model_count(KILN_OUTPUT) == 2);
  const char* name = nullptr;
  std::int32_t dt = -1, rank = -1;
  std::int64_t shape[KILN_MAX_RANK];
  REQUIRE(kiln_model_info(KILN_INPUT, 0, &name, &dt, &rank, shape) == KILN_OK);
  CHECK(std::string(name) == "x");
  CHECK(dt == KILN_F32);
  CHECK(rank == 2);
  CHECK(shape[0] == -1);
  CHECK(shape[1] == 20);
  CHECK(kiln_model_info(KILN_OUTPUT, 2, &name, &dt, &rank, shape) == KILN_ERROR_ARGUMENT);
  CHECK(kiln_model_info(7, 0, &name, &dt, &rank, shape) == KILN_ERROR_ARGUMENT);
  const io::json::value d = io::json::parse(kiln_model_describe());
  CHECK(d.find("abi")->magnitude == KILN_ABI_VERSION);
  const io::json::value& params = *d.find("params");
  REQUIRE(params.items.size() == 4);
  std::set<std::string> names;
  for (const auto& p : params.items) names.insert(p.find("name")->s);
  CHECK(names == std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(d.find("outputs")->items[1].find("shape")->items[0].negative);  // -1: the batch
}

TEST_CASE("export: parameters set from memory or loaded from a file give this program's outputs, bit for bit") {
  const auto params = random_params();
  model_handle h;
  set_params(h.m, params);
  for (const index_t batch : {1, 7, 300}) {
    const any_tensor x = kt::random_tensor(f32, dims{batch, 20});
    const auto want = reference(params, x);
    const auto got = run(h.m, x);
    CHECK(kt::same_bits(got[0], want[0]));
    CHECK(kt::same_bits(got[1], want[1]));
  }
  // from a safetensors file; a trainer's checkpoint (kiln.step, optimizer state) loads too
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kiln-export-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  io::save_safetensors(dir / "w.safetensors", params);
  auto with_state = params;
  with_state["fc1.weight.exp_avg"] = kt::random_tensor(f32, dims{20, 16});
  io::save_safetensors(dir / "ckpt.safetensors", with_state, {{"kiln.step", "12"}});
  const any_tensor x = kt::random_tensor(f32, dims{9, 20});
  const auto want = reference(params, x);
  for (const char* file : {"w.safetensors", "ckpt.safetensors"}) {
    model_handle loaded;
    INFO(file);
    REQUIRE(kiln_model_load(loaded.m, (dir / file).c_str()) == KILN_OK);
    const auto got = run(loaded.m, x);
    CHECK(kt::same_bits(got[0], want[0]));
    CHECK(kt::same_bits(got[1], want[1]));
  }
  // a file that does not match is refused, naming the first mismatch, and changes nothing
  auto missing = params;
  missing.erase("fc2.bias");
  io::save_safetensors(dir / "missing.safetensors", missing);
  auto wrong_shape = params;
  wrong_shape["fc1.bias"] = kt::random_tensor(f32, dims{15});
  io::save_safetensors(dir / "shape.safetensors", wrong_shape);
  auto wrong_dtype = params;
  wrong_dtype["fc2.weight"] = kt::random_tensor(f64, dims{16, 5});
  io::save_safetensors(dir / "dtype.safetensors", wrong_dtype);
  io::save_safetensors(dir / "extra.safetensors", with_state);  // extra tensors, not a checkpoint
  {
    std::ofstream(dir / "cut.safetensors", std::ios::binary) << "\x10\0\0\0\0\0\0\0{\"a\":";
  }
  const struct {
    const char* file;
    const char* says;
  } bad[] = {{"missing.safetensors", "fc2.bias"},
             {"shape.safetensors", "fc1.bias"},
             {"dtype.safetensors", "fc2.weight"},
             {"extra.safetensors", "fc1.weight.exp_avg"},
             {"cut.safetensors", "cut.safetensors"},
             {"none.safetensors", "none.safetensors"}};
  for (const auto& b : bad) {
    INFO(b.file);
    const std::string msg = error_of(kiln_model_load(h.m, (dir / b.file).c_str()), KILN_ERROR_FILE);
    INFO(msg);
    CHECK(msg.find(b.says) != std::string::npos);
  }
  const auto after = run(h.m, x);
  CHECK(kt::same_bits(after[0], want[0]));
  // from memory: the whole file, and every prefix of it refused
  const std::vector<std::byte> bytes = io::serialize_safetensors(params);
  model_handle from_memory;
  REQUIRE(kiln_model_load_buffer(from_memory.m, bytes.data(), bytes.size()) == KILN_OK);
  CHECK(kt::same_bits(run(from_memory.m, x)[0], want[0]));
  for (std::size_t cut = 0; cut < bytes.size(); cut += 1 + cut / 3)
    CHECK(kiln_model_load_buffer(h.m, bytes.data(), cut) == KILN_ERROR_FILE);
  CHECK(kiln_model_load_buffer(h.m, nullptr, 10) == KILN_ERROR_ARGUMENT);
  std::filesystem::remove_all(dir);
}

TEST_CASE("export: caller memory that is strided or not aligned to its elements") {
  const auto params = random_params();
  model_handle h;
  set_params(h.m, params);
  const any_tensor x = kt::random_tensor(f32, dims{6, 20});
  const auto want = reference(params, x);
  // x as the transpose of a caller's [20, 6] array
  const any_tensor xt = x.transpose(0, 1).clone().transpose(0, 1);
  c_tensor strided("x", xt, true);
  // x one byte past an aligned address; the outputs two and three bytes past
  std::vector<std::byte> xbuf(6 * 20 * 4 + 1), obuf0(6 * 5 * 4 + 2), obuf1(6 * 5 * 4 + 3, std::byte{0});
  std::memcpy(xbuf.data() + 1, x.bytes(), 6 * 20 * 4);
  const std::int64_t xs[2] = {6, 20}, os[2] = {6, 5};
  const kiln_tensor odd{"x", KILN_F32, 2, xs, nullptr, xbuf.data() + 1};
  for (const kiln_tensor& in : {strided.t, odd}) {
    kiln_tensor out[2] = {{nullptr, KILN_F32, 2, os, nullptr, obuf0.data() + 2}, {nullptr, KILN_F32, 2, os, nullptr, obuf1.data() + 3}};
    REQUIRE(kiln_model_run(h.m, &in, 1, out, 2) == KILN_OK);
    CHECK(std::memcmp(obuf0.data() + 2, want[0].bytes(), 6 * 5 * 4) == 0);
    CHECK(std::memcmp(obuf1.data() + 3, want[1].bytes(), 6 * 5 * 4) == 0);
  }
}

TEST_CASE("export: bad arguments give an error code and a message, and write nothing") {
  const auto params = random_params();
  model_handle h;
  set_params(h.m, params);
  any_tensor x = kt::random_tensor(f32, dims{4, 20});
  c_tensor in("x", x);
  any_tensor y0 = kt::random_tensor(f32, dims{4, 5}), y1 = kt::random_tensor(f32, dims{4, 5});
  const std::vector<double> before0 = kt::values_of(y0), before1 = kt::values_of(y1);
  c_tensor o0(nullptr, y0), o1(nullptr, y1);
  kiln_tensor out[2] = {o0.t, o1.t};
  const auto untouched = [&] {
    CHECK(kt::values_of(y0) == before0);
    CHECK(kt::values_of(y1) == before1);
  };
  CHECK(kiln_model_create(nullptr) == KILN_ERROR_ARGUMENT);
  CHECK(error_of(kiln_model_run(nullptr, &in.t, 1, out, 2), KILN_ERROR_ARGUMENT).find("null") != std::string::npos);
  CHECK(error_of(kiln_model_run(h.m, nullptr, 1, out, 2), KILN_ERROR_ARGUMENT).find("null") != std::string::npos);
  CHECK(error_of(kiln_model_run(h.m, &in.t, 1, nullptr, 2), KILN_ERROR_ARGUMENT).find("null") != std::string::npos);
  CHECK(error_of(kiln_model_run(h.m, &in.t, 0, out, 2), KILN_ERROR_ARGUMENT).find("has 1 inputs, got 0") != std::string::npos);
  CHECK(error_of(kiln_model_run(h.m, &in.t, 1, out, 1), KILN_ERROR_ARGUMENT).find("has 2 outputs, got 1") != std::string::npos);
  kiln_tensor renamed = in.t;
  renamed.name = "y";
  CHECK(error_of(kiln_model_run(h.m, &renamed, 1, out, 2), KILN_ERROR_ARGUMENT).find("no input 'y'") != std::string::npos);
  renamed.name = "fc1.bias";
  CHECK(error_of(kiln_model_run(h.m, &renamed, 1, out, 2), KILN_ERROR_ARGUMENT).find("it is a param") != std::string::npos);
  renamed.name = nullptr;
  CHECK(kiln_model_run(h.m, &renamed, 1, out, 2) == KILN_ERROR_ARGUMENT);
  kiln_tensor retyped = in.t;
  retyped.dtype = KILN_F64;
  CHECK(error_of(kiln_model_run(h.m, &retyped, 1, out, 2), KILN_ERROR_DTYPE).find("input 'x'") != std::string::npos);
  retyped.dtype = 9;
  CHECK(error_of(kiln_model_run(h.m, &retyped, 1, out, 2), KILN_ERROR_ARGUMENT).find("not a kiln_dtype") != std::string::npos);
  const std::int64_t wide[2] = {4, 21}, negative[2] = {-4, 20}, huge[2] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  for (const std::int64_t* s : {wide, negative, huge}) {
    kiln_tensor reshaped = in.t;
    reshaped.shape = s;
    CHECK(kiln_model_run(h.m, &reshaped, 1, out, 2) == KILN_ERROR_SHAPE);
  }
  kiln_tensor ranked = in.t;
  ranked.rank = 9;
  CHECK(kiln_model_run(h.m, &ranked, 1, out, 2) == KILN_ERROR_ARGUMENT);
  ranked.rank = 2;
  ranked.shape = nullptr;
  CHECK(kiln_model_run(h.m, &ranked, 1, out, 2) == KILN_ERROR_ARGUMENT);
  // an output of the wrong shape: the other is not written either
  const std::int64_t three[2] = {3, 5};
  kiln_tensor short_out[2] = {o0.t, o1.t};
  short_out[1].shape = three;
  CHECK(error_of(kiln_model_run(h.m, &in.t, 1, short_out, 2), KILN_ERROR_SHAPE).find("[4, 5]") != std::string::npos);
  // the same for a destination that is not aligned (computed apart, copied out at the end)
  std::vector<std::byte> odd(4 * 5 * 4 + 1, std::byte{0x5a});
  short_out[1].data = odd.data() + 1;
  CHECK(kiln_model_run(h.m, &in.t, 1, short_out, 2) == KILN_ERROR_SHAPE);
  CHECK(std::all_of(odd.begin(), odd.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  untouched();
  // parameters: unknown names, inputs, wrong dtypes and shapes; the old value stays
  c_tensor w("fc1.bias", kt::random_tensor(f32, dims{15}));
  CHECK(error_of(kiln_model_set_param(h.m, &w.t), KILN_ERROR_SHAPE).find("param 'fc1.bias'") != std::string::npos);
  c_tensor wx("x", kt::random_tensor(f32, dims{4, 20}));
  CHECK(error_of(kiln_model_set_param(h.m, &wx.t), KILN_ERROR_ARGUMENT).find("is an input") != std::string::npos);
  c_tensor wd("fc1.bias", kt::random_tensor(f64, dims{16}));
  CHECK(kiln_model_set_param(h.m, &wd.t) == KILN_ERROR_DTYPE);
  CHECK(kiln_model_set_param(h.m, nullptr) == KILN_ERROR_ARGUMENT);
  CHECK(kiln_model_load(h.m, nullptr) == KILN_ERROR_ARGUMENT);
  const auto got = run(h.m, x);
  CHECK(kt::same_bits(got[0], reference(params, x)[0]));
  CHECK(std::string(kiln_last_error()).empty());  // a success clears it
}

TEST_CASE("export: one model called from four threads at once gives the serial outputs") {
  const auto params = random_params();
  model_handle h;
  set_params(h.m, params);
  std::vector<any_tensor> xs;
  std::vector<std::vector<any_tensor>> want;
  for (int t = 0; t < 4; ++t) {
    xs.push_back(kt::random_tensor(f32, dims{64 + 50 * t, 20}));
    want.push_back(run(h.m, xs.back()));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int call = 0; call < 25; ++call) {
        c_tensor in("x", xs[static_cast<std::size_t>(t)]);
        any_tensor a(f32, dims{xs[static_cast<std::size_t>(t)].shape().e[0], 5}), b(f32, a.shape());
        c_tensor oa(nullptr, a), ob(nullptr, b);
        kiln_tensor out[2] = {oa.t, ob.t};
        if (kiln_model_run(h.m, &in.t, 1, out, 2) != KILN_OK) ++bad;
        else bad += !kt::same_bits(a, want[static_cast<std::size_t>(t)][0]) + !kt::same_bits(b, want[static_cast<std::size_t>(t)][1]);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
}

TEST_CASE("export: the files the C and Python callers check") {
  // weights, an input and the outputs this program computes, as raw little-endian f32
  const std::filesystem::path dir = KILN_EXPORT_FILES;
  std::filesystem::create_directories(dir);
  const auto params = random_params();
  const any_tensor x = kt::random_tensor(f32, dims{11, 20});
  const auto want = reference(params, x);
  io::save_safetensors(dir / "weights.safetensors", params);
  const auto write = [&](const char* file, const any_tensor& t) {
    std::ofstream f(dir / file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(t.bytes()), static_cast<std::streamsize>(t.numel() * 4));
    REQUIRE(f.good());
  };
  write("x.f32", x);
  write("logits.f32", want[0]);
  write("log_probs.f32", want[1]);
}
