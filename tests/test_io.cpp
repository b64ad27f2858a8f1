// kiln::io: safetensors read/write (against a file written by the Python safetensors package and
// byte vectors from the reference implementation's tests), every rejection path with
// destinations left untouched, atomic writes, and IDX files (synthetic, gzip, real Fashion-MNIST).
// Includes only core/ and io/ headers so that this test compiles fast.
#include <doctest/doctest.h>
#include <kiln/io/idx.hpp>
#include <kiln/io/safetensors.hpp>
#if KILN_TEST_HAVE_ZLIB
#include <kiln/io/idx_gzip.hpp>
#endif

#include "heap_count.hpp"
#include "seed.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

using namespace kiln;
namespace fs = std::filesystem;
using io::format_error;


namespace {

using kt::rng;  // KILN_TEST_SEED replays it (seed.hpp)

/// A fresh directory, removed with everything in it at the end of the scope.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::set<std::string> entries() const {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(path)) s.insert(e.path().filename().string());
    return s;
  }
};

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}
void write_bytes(const fs::path& p, std::span<const std::byte> b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
std::vector<std::byte> to_bytes(std::string_view s) {
  std::vector<std::byte> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

/// A safetensors file from a header text (used as is, no padding) and `data` bytes of data.
std::vector<std::byte> make_file(std::string_view header, std::size_t data, std::uint64_t n = UINT64_MAX) {
  if (n == UINT64_MAX) n = header.size();
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  s += header;
  for (std::size_t i = 0; i < data; ++i) s += static_cast<char>(i * 37 % 2);  // valid BOOL bytes too
  return to_bytes(s);
}

/// Random contents of every element (bit patterns for floats, so NaNs and infinities appear).
void fill_random(const any_tensor& t) {
  visit(t.dt(), [&]<dtype D>() {
    using T = storage_t<D>;
    auto* p = reinterpret_cast<T*>(t.bytes());
    for_each_index(t.shape(), [&](const index_t* idx) {
      T& x = p[t.offset_of(idx)];
      const std::uint64_t r = rng()();
      if constexpr (D == dtype::boolean) x = (r & 1) != 0;
      else if constexpr (D == dtype::bf16) x = bfloat16::from_bits(static_cast<std::uint16_t>(r));
      else if constexpr (D == dtype::f32) x = (r >> 60) ? std::bit_cast<float>(static_cast<std::uint32_t>(r)) : float(r % 1000) / 8;
      else if constexpr (D == dtype::f64) x = (r >> 60) ? std::bit_cast<double>(r) : double(r % 1000) / 8;
      else x = static_cast<T>(r);
    });
  });
}
any_tensor random_tensor(dtype d, const dims& shape) {
  any_tensor t(d, shape);
  fill_random(t);
  return t;
}

/// Same dtype, shape and element bits (read through each tensor's strides).
bool same_bits(const any_tensor& a, const any_tensor& b) {
  if (a.dt() != b.dt() || !(a.shape() == b.shape())) return false;
  const std::size_t size = size_of(a.dt());
  bool same = true;
  for_each_index(a.shape(), [&](const index_t* idx) {
    same = same && std::memcmp(a.bytes() + a.offset_of(idx) * static_cast<index_t>(size),
                               b.bytes() + b.offset_of(idx) * static_cast<index_t>(size), size) == 0;
  });
  return same;
}

/// The message of the format_error that f throws (fails the test if it throws nothing else).
template <class F>
std::string format_error_of(F&& f) {
  try {
    f();
  } catch (const format_error& e) {
    return e.what();
  }
  FAIL("expected kiln::io::format_error");
  return {};
}

/// Checks that `bytes` is rejected with a message containing `what`.
void check_rejected(const std::vector<std::byte>& bytes, std::string_view what) {
  const std::string msg = format_error_of([&] { (void)io::parse_safetensors(bytes, "bad.safetensors"); });
  INFO("message: " << msg);
  CHECK(msg.find(what) != std::string::npos);
  CHECK(msg.rfind("kiln: bad.safetensors: ", 0) == 0);
}

std::vector<std::byte> operator+(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const fs::path data_dir = KILN_TEST_DATA_DIR;

}  // namespace

// ---- safetensors: compatibility ------------------------------------------------------------

TEST_CASE("safetensors: reads the file written by the Python package, bit for bit") {
  const fs::path file = data_dir / "fixture.safetensors";
  const io::safetensors_file f = io::load_safetensors_file(file);

  // fixture.txt: name dtype shape bits..., written by the same script from the same arrays.
  std::ifstream txt(data_dir / "fixture.txt");
  REQUIRE(txt);
  std::string line;
  std::size_t lines = 0;
  while (std::getline(txt, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++lines;
    std::istringstream in(line);
    std::string name, code, shape;
    in >> name >> code >> shape;
    INFO("tensor " << name);
    REQUIRE(f.tensors.count(name));
    const any_tensor& t = f.tensors.at(name);
    CHECK(io::detail::st_name(t.dt()) == code);
    dims want;
    if (shape != "-") {
      std::istringstream s(shape);
      for (std::string e; std::getline(s, e, ',');) want.e[static_cast<std::size_t>(want.rank++)] = std::stoll(e);
    }
    CHECK(t.shape() == want);
    CHECK(t.is_contiguous());
    std::vector<std::uint64_t> bits;
    for (std::string w; in >> w;) bits.push_back(std::stoull(w, nullptr, 16));
    REQUIRE(bits.size() == static_cast<std::size_t>(t.numel()));
    const std::size_t size = size_of(t.dt());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      std::uint64_t got = 0;
      std::memcpy(&got, t.bytes() + i * size, size);  // little-endian host
      CHECK_MESSAGE(got == bits[i], "element " << i);
    }
  }
  CHECK(lines == 8);
  CHECK(f.tensors.size() == lines);

  // A few values spelled out, as a reader of this test would check them by eye.
  const tensor<float, 2> w(f.tensors.at("layers.0.weight"));
  CHECK(w(0, 0) == -1.5f);
  CHECK(w(0, 4) == -0.5f);
  CHECK(w(1, 3) == 0.5f);
  CHECK(w(1, 4) == std::numeric_limits<float>::denorm_min());
  CHECK(std::isinf(w(2, 2)));
  CHECK((w(2, 3) == 0 && std::signbit(w(2, 3))));
  CHECK(std::isnan(w(2, 4)));
  CHECK(tensor<double, 1>(f.tensors.at("layers.0.bias"))(4) == 3.141592653589793);
  CHECK(tensor<std::int64_t, 0>(f.tensors.at("step"))() == 1234567890123);
  CHECK(tensor<std::int32_t, 2>(f.tensors.at("ids/\u00e9"))(0, 0) == std::numeric_limits<std::int32_t>::min());
  CHECK(tensor<std::int64_t, 1>(f.tensors.at("big"))(0) == std::numeric_limits<std::int64_t>::min());
  CHECK(tensor<bool, 1>(f.tensors.at("mask"))(3) == true);
  CHECK(float(tensor<bfloat16, 2>(f.tensors.at("half.bf16"))(1, 1)) == 3.140625f);
  CHECK(f.tensors.at("empty").shape() == dims{0, 3});

  const io::metadata_map meta{{"format", "pt"}, {"note", "kiln fixture \"quoted\" \\ na\u00efve \u2713"}, {"empty", ""}};
  CHECK(f.metadata == meta);

  // The header alone, in data order (the package sorts by alignment, then name).
  const io::safetensors_header h = io::read_safetensors_header(file);
  REQUIRE(h.tensors.size() == 8);
  CHECK(h.tensors.front().name == "big");
  CHECK(h.data_start == 8 + 600);
  CHECK(h.tensors.back().end + h.data_start == fs::file_size(file));

  // load_into fills typed tensors through their handles.
  tensor<float, 2> w2({3, 5});
  tensor<std::int64_t, 0> step(std::array<index_t, 0>{});
  const io::metadata_map m = io::load_into(file, {{"layers.0.weight", w2}, {"step", step}}, {.allow_extra = true});
  CHECK(same_bits(w2.any(), w.any()));
  CHECK(step() == 1234567890123);
  CHECK(m == meta);
}

TEST_CASE("safetensors: writes the bytes of the reference implementation's tests") {
  // safetensors/src/tensor.rs, test_serialization: {"attn.0": F32 [1, 2, 3] = 0..5}
  tensor<float, 3> a({1, 2, 3}, {0, 1, 2, 3, 4, 5});
  const std::vector<int> want = {
      64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,  58,  123, 34,  100,
      116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,
      49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,
      58,  91,  48,  44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,
      0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  const std::vector<std::byte> got = io::serialize_safetensors({{"attn.0", a}});
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK_MESSAGE(std::to_integer<int>(got[i]) == want[i], "byte " << i);

  // test_empty: no tensors, then metadata {"framework": "pt"}
  const std::vector<std::byte> empty = io::serialize_safetensors({});
  CHECK(empty == make_file("{}      ", 0));
  const std::vector<std::byte> meta = io::serialize_safetensors({}, {{"framework", "pt"}});
  CHECK(meta == make_file("{\"__metadata__\":{\"framework\":\"pt\"}}     ", 0));
  CHECK(io::parse_safetensors(meta).metadata.at("framework") == "pt");
}

TEST_CASE("safetensors: save and load round-trip every dtype, views, empty and scalar tensors") {
  temp_dir dir;
  io::tensor_map src;
  const dtype all[] = {dtype::boolean, dtype::i32, dtype::i64, dtype::bf16, dtype::f32, dtype::f64};
  for (const dtype d : all) {
    const std::string n(name(d));
    src[n + ".plain"] = random_tensor(d, {3, 5, 7});
    src[n + ".transposed"] = random_tensor(d, {5, 3}).transpose(0, 1);           // [3, 5], strided
    src[n + ".stepped"] = random_tensor(d, {4, 9}).slice(1, 1, 8, 3).slice(0, 1, 4);  // offset and step
    src[n + ".empty"] = any_tensor(d, {0, 4});
    src[n + ".scalar"] = random_tensor(d, dims{});
    src[n + ".rank8"] = random_tensor(d, {1, 2, 1, 3, 1, 1, 2, 1});
  }
  // Signalling NaNs and odd payloads must keep their bits through views and load_into (a copy
  // through float would quiet them).
  tensor<bfloat16, 2>{src["bf16.transposed"]}(1, 2) = bfloat16::from_bits(0x7f81);
  tensor<bfloat16, 3>{src["bf16.plain"]}(0, 0, 0) = bfloat16::from_bits(0xff82);
  tensor<float, 2>{src["f32.stepped"]}(2, 1) = std::bit_cast<float>(0x7f800001u);
  REQUIRE(!src["f32.transposed"].is_contiguous());
  REQUIRE(!src["i64.stepped"].is_contiguous());
  // Names that need JSON escapes, and non-ASCII ones.
  src["quote\" back\\slash\nnewline\ttab \x01"] = random_tensor(dtype::f32, {2});
  src["unicode \u00e9\u4e2d\U0001f600"] = random_tensor(dtype::i32, {3});
  src[""] = random_tensor(dtype::f64, {1});
  const io::metadata_map meta{{"epoch", "3"}, {"weird \"key\"\n", "value \u2713 \\"}};

  const fs::path file = dir.path / "model.safetensors";
  io::save_safetensors(file, src, meta);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});  // no temporary left behind

  const io::safetensors_file back = io::load_safetensors_file(file);
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == src.size());
  for (const auto& entry : src) {  // no structured binding: clang 14 cannot capture one (INFO)
    const std::string& n = entry.first;
    INFO("tensor " << n);
    REQUIRE(back.tensors.count(n));
    CHECK(back.tensors.at(n).is_contiguous());
    CHECK(same_bits(back.tensors.at(n), entry.second));
  }
  // The in-memory writer gives the same bytes; every tensor is aligned to its element size.
  CHECK(io::serialize_safetensors(src, meta) == read_bytes(file));
  const io::safetensors_header h = io::read_safetensors_header(file);
  CHECK(h.data_start % 8 == 0);
  for (const io::tensor_info& t : h.tensors) CHECK((h.data_start + t.begin) % size_of(*t.dt) == 0);

  // load_into through a strided view keeps the bits too.
  const any_tensor store(dtype::bf16, {5, 3});
  io::load_into(file, {{"bf16.transposed", store.transpose(0, 1)}}, {.allow_extra = true});
  CHECK(same_bits(store.transpose(0, 1), src["bf16.transposed"]));
  CHECK(tensor<bfloat16, 2>(store)(2, 1).bits == 0x7f81);

  // Saving again replaces the file.
  io::save_safetensors(file, {{"only", src.at("f64.plain")}});
  CHECK(io::load_safetensors(file).size() == 1);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});

  CHECK_THROWS_AS(io::save_safetensors(dir.path / "x", {{"__metadata__", src.at("f32.plain")}}), std::invalid_argument);
  CHECK_THROWS_AS(io::save_safetensors(dir.path / "x", {{"undefined", any_tensor()}}), std::invalid_argument);
  CHECK_THROWS_AS(io::save_safetensors(dir.path / "x", {{"bad \xff utf8", src.at("f32.plain")}}), std::invalid_argument);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
}

// ---- safetensors: rejection ----------------------------------------------------------------

TEST_CASE("safetensors: every truncation and extension of a valid file is rejected") {
  io::tensor_map src;
  src["a"] = random_tensor(dtype::f32, {3, 5});
  src["b"] = random_tensor(dtype::i64, {7});
  src["c"] = random_tensor(dtype::boolean, {5});
  src["d"] = random_tensor(dtype::bf16, {2, 3});
  const std::vector<std::byte> good = io::serialize_safetensors(src, {{"k", "v"}});
  REQUIRE(io::parse_safetensors(good).tensors.size() == 4);
  for (std::size_t len = 0; len < good.size(); ++len) {
    const std::span<const std::byte> part(good.data(), len);
    CHECK_THROWS_AS((void)io::parse_safetensors(part), format_error);
  }
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  check_rejected(longer, "the tensors cover");

  // On disk, through load_into: the destinations keep their contents.
  temp_dir dir;
  io::tensor_map dst;
  io::tensor_map before;
  for (const auto& [n, t] : src) {
    dst[n] = random_tensor(t.dt(), t.shape());
    before[n] = dst[n].clone();
  }
  for (const std::size_t len : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{20}, good.size() / 2,
                                good.size() - 9, good.size() - 1}) {
    const fs::path file = dir.path / "t.safetensors";
    write_bytes(file, std::span<const std::byte>(good.data(), len));
    const std::string msg = format_error_of([&] { (void)io::load_into(file, dst); });
    CHECK(msg.find(file.string()) != std::string::npos);
    for (const auto& [n, t] : dst) CHECK(same_bits(t, before[n]));
  }
}

TEST_CASE("safetensors: malformed headers are rejected with a message that says what is wrong") {
  const std::string f4 = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  // Length field and size limits.
  check_rejected(to_bytes("abc"), "fewer than the 8");
  check_rejected(make_file("{}", 0, 100'000'001), "exceeds the limit of 100000000 bytes");
  check_rejected(make_file("{}", 0, 99), "header points outside the file");
  // The header's text (errors in the fields kiln ignores too: they are checked, not built).
  check_rejected(make_file("", 0), "start with '{'");
  check_rejected(make_file(" {}", 0), "start with '{'");
  check_rejected(make_file("[]", 0), "start with '{'");
  check_rejected(make_file("{\"\xff\":1}", 0), "not valid UTF-8");
  check_rejected(make_file("{\"\xed\xa0\x80\":1}", 0), "not valid UTF-8");  // an encoded surrogate
  check_rejected(make_file("{", 0), "not valid JSON");
  check_rejected(make_file("{}x", 0), "not valid JSON: byte 2: unexpected data");
  check_rejected(make_file("{\"a\":{" + f4 + "},}", 4), "not valid JSON");
  check_rejected(make_file("{'a':1}", 0), "not valid JSON");
  check_rejected(make_file("{\"a\":{\"x\":\"\\ud800\"}}", 0), "unpaired high surrogate");
  check_rejected(make_file("{\"a\":{\"x\":\"\\udc00\"}}", 0), "unpaired low surrogate");
  check_rejected(make_file("{\"a\":{\"x\":\"tab\there\"}}", 0), "control character");
  check_rejected(make_file("{\"a\":{\"x\":01}}", 0), "leading zeros");
  check_rejected(make_file("{\"a\":{\"x\":tru}}", 0), "not valid JSON");
  check_rejected(make_file("{\"a\":{\"x\":" + std::string(100, '[') + std::string(100, ']') + "}}", 0),
                 "nested deeper than 64 levels");
  // The schema.
  check_rejected(make_file("{\"a\":[]}", 0), "tensor 'a': its header entry must be an object");
  check_rejected(make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "has no \"dtype\"");
  check_rejected(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "has no \"shape\"");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "has no \"data_offsets\"");
  check_rejected(make_file(R"({"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4), "\"dtype\" must be a string");
  check_rejected(make_file(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype 'Q7'");
  check_rejected(make_file(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1),
                 "tensor 'a' has dtype F4, which kiln cannot load");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4), "\"shape\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "\"shape\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}})", 4), "\"shape\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})", 4),
                 "\"shape\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4), "\"shape\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "\"data_offsets\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4), "\"data_offsets\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-0,4.0]}})", 4), "\"data_offsets\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4), "\"data_offsets\" must be");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
                 "has rank 9; kiln supports at most 8");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0),
                 "shape too large");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0),
                 "shape too large");
  // empty, but more than 2^59 elements over its other extents (found by the fuzzer: a
  // shape_error from the tensor's constructor escaped as no format_error)
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[0,1177953022,874649111],"data_offsets":[0,0]}})", 0),
                 "shape too large for kiln (more than 2^59 elements)");
  check_rejected(make_file("{\"__metadata__\":{\"a\":1}}", 0), "the value of 'a' is not a string");
  check_rejected(make_file("{\"__metadata__\":[]}", 0), "\"__metadata__\" must be an object of strings");
  check_rejected(make_file("{\"a\":{" + f4 + "},\"a\":{" + f4 + "}}", 4), "duplicate key \"a\"");
  check_rejected(make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
                 "duplicate key \"dtype\"");
  check_rejected(make_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0), "duplicate key \"k\"");
  // Offsets.
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                 "header points outside the file: tensor 'a' has data_offsets [0, 8] but the file holds 4 bytes");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", 12),
                 "tensor 'a' has 12 bytes, shape [2, 3] of F32 needs 24");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "end before they start");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                 "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                 "bytes [4, 8) of the tensor data belong to no tensor");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "bytes [0, 4)");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "the tensors cover 4 bytes");
  // Data that the header accepts but kiln cannot hold.
  check_rejected(make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", 0) + std::vector{std::byte{1}, std::byte{0}, std::byte{2}},
                 "tensor 'm' (BOOL) has byte value 2 at element 2");
  check_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                "h":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})", 8),
                 "tensor 'h' has dtype F16, which kiln cannot load");

  // Accepted: space padding, null metadata, unknown fields (ignored, as the reference does).
  const auto ok = io::parse_safetensors(make_file(
      R"({"__metadata__":null,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":[1.5,{"x":null,"y":true}]}}   )", 4));
  CHECK(ok.tensors.at("a").shape() == dims{1});
  CHECK(ok.metadata.empty());
}

TEST_CASE("safetensors: reading a header takes memory in proportion to its size, whatever it holds") {
  // A header of N bytes may hold N / 2 JSON values that kiln ignores; built as a tree they took
  // about 130 bytes each (a 100 MB header: 6.6 GB). Each header here is about 4 MB.
  const std::string entry = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  const auto repeat = [](std::string_view item, std::size_t bytes) {
    std::string out;
    for (std::size_t i = 0; out.size() < bytes; ++i) {
      if (i) out += ',';
      out += item;
    }
    return out;
  };
  const auto numbered = [](std::string_view prefix, std::string_view suffix, std::size_t bytes) {
    std::string out;
    for (std::size_t i = 0; out.size() < bytes; ++i) {
      if (i) out += ',';
      out += '"';
      out += prefix;
      out += std::to_string(i);
      out += '"';
      out += suffix;
    }
    return out;
  };
  constexpr std::size_t mb4 = std::size_t{4} << 20;
  // (the count sees the heap: a checked bound is not vacuous)
  REQUIRE(kt::heap::peak_during([&] { std::vector<char> v(mb4, 'x'); CHECK(v[mb4 / 2] == 'x'); }) >= mb4);
  std::string tensors;  // many tensors of one byte each, tiling the data
  std::size_t n_tensors = 0;
  for (; tensors.size() < mb4; ++n_tensors)
    tensors += (n_tensors ? ",\"t" : "\"t") + std::to_string(n_tensors) + R"(":{"dtype":"BOOL","shape":[],"data_offsets":[)" +
               std::to_string(n_tensors) + "," + std::to_string(n_tensors + 1) + "]}";
  const struct {
    const char* what;
    std::string header;
    std::size_t data;
  } cases[] = {
      {"numbers in an unknown field", "{\"a\":{" + entry + ",\"x\":[" + repeat("0", mb4) + "]}}", 4},
      {"objects in an unknown field", "{\"a\":{" + entry + ",\"x\":[" + repeat("{}", mb4) + "]}}", 4},
      {"arrays in an unknown field", "{\"a\":{" + entry + ",\"x\":[" + repeat("[[]]", mb4) + "]}}", 4},
      {"keys of an unknown field", "{\"a\":{" + entry + ",\"x\":{" + numbered("", ":0", mb4) + "}}}", 4},
      {"metadata", "{\"__metadata__\":{" + numbered("", ":\"\"", mb4) + "},\"a\":{" + entry + "}}", 4},
      {"tensors", "{" + tensors + "}", n_tensors},
  };
  for (const auto& c : cases) {
    INFO(std::string(c.what) << ", a header of " << c.header.size() << " bytes");
    const std::vector<std::byte> file = make_file(c.header, c.data);
    std::size_t n = 0;
    const std::size_t peak = kt::heap::peak_during([&] { n = io::parse_safetensors(file, "big.safetensors").tensors.size(); });
    CHECK(n == (c.data == 4 ? 1 : n_tensors));
    CHECK(peak <= 16 * c.header.size() + (std::size_t{1} << 20));
    MESSAGE(std::string(c.what) << ": " << peak / c.header.size() << "x the header");
  }
}

TEST_CASE("safetensors: load_into checks names, dtypes and shapes, and writes nothing on failure") {
  temp_dir dir;
  const fs::path file = dir.path / "ckpt.safetensors";
  io::tensor_map src;
  src["w"] = random_tensor(dtype::f32, {2, 3});
  src["b"] = random_tensor(dtype::f64, {3});
  src["m"] = random_tensor(dtype::boolean, {5});
  io::save_safetensors(file, src, {{"epoch", "7"}});

  const any_tensor w_store = random_tensor(dtype::f32, {3, 2});
  io::tensor_map dst{{"w", w_store.transpose(0, 1)}, {"b", random_tensor(dtype::f64, {3})}, {"m", random_tensor(dtype::boolean, {5})}};
  io::tensor_map before;
  for (const auto& [n, t] : dst) before[n] = t.clone();
  const auto unchanged = [&] {
    for (const auto& d : dst) CHECK_MESSAGE(same_bits(d.second, before[d.first]), "destination " << d.first << " was written");
  };

  const auto rejected = [&](const io::tensor_map& d, std::string_view what, io::load_options o = {}) {
    const std::string msg = format_error_of([&] { (void)io::load_into(file, d, o); });
    INFO("message: " << msg);
    CHECK(msg.find(what) != std::string::npos);
    unchanged();
  };
  io::tensor_map wrong = dst;
  wrong["w"] = any_tensor(dtype::f32, {3, 2});
  rejected(wrong, "tensor 'w' is F32 [2, 3] in the file but the destination is F32 [3, 2]");
  wrong = dst;
  wrong["b"] = any_tensor(dtype::f32, {3});
  rejected(wrong, "tensor 'b' is F64 [3] in the file but the destination is F32 [3]");
  wrong = dst;
  wrong["missing"] = any_tensor(dtype::f32, {1});
  rejected(wrong, "has no tensor 'missing' (it has 3: 'b', 'w', 'm')");  // in file order
  io::tensor_map fewer{{"w", dst["w"]}, {"b", dst["b"]}};
  rejected(fewer, "has tensor 'm', which was not asked for");
  wrong = dst;
  wrong["w"] = any_tensor();
  CHECK_THROWS_AS((void)io::load_into(file, wrong), std::invalid_argument);
  unchanged();

  // A corrupt byte in the last tensor in the file (BOOL sorts last): the others were read
  // already, and still no destination changes.
  std::vector<std::byte> bytes = read_bytes(file);
  bytes.back() = std::byte{7};
  write_bytes(file, bytes);
  rejected(dst, "BOOL elements must be 0 or 1");
  bytes.back() = std::byte{1};
  write_bytes(file, bytes);

  // Success: values land in the destinations, through the transposed view too.
  const io::metadata_map meta = io::load_into(file, dst);
  CHECK(meta.at("epoch") == "7");
  CHECK(same_bits(dst["w"], src["w"]));
  CHECK(same_bits(dst["b"], src["b"]));
  CHECK(same_bits(w_store.transpose(0, 1), src["w"]));
  // A subset with allow_extra; typed destinations.
  tensor<double, 1> b({3});
  io::load_into(file, {{"b", b}}, {.allow_extra = true});
  CHECK(same_bits(b.any(), src["b"]));
  // From memory, the same checks.
  CHECK_THROWS_AS((void)io::parse_into(read_bytes(file), {{"b", b}}), format_error);
}

TEST_CASE("safetensors: a failed save leaves the destination as it was and no temporary file") {
  temp_dir dir;
  const fs::path file = dir.path / "ckpt.safetensors";
  const io::tensor_map small{{"a", random_tensor(dtype::f32, {4, 5})}};
  io::save_safetensors(file, small);
  const std::vector<std::byte> old = read_bytes(file);
  const std::set<std::string> listing = dir.entries();
  const io::tensor_map big{{"a", random_tensor(dtype::f64, {300, 500})}};  // 1.2 MB

  // The destination is a directory: the rename fails, after the data was written.
  fs::create_directory(dir.path / "sub");
  CHECK_THROWS_AS(io::save_safetensors(dir.path / "sub", big), fs::filesystem_error);
  CHECK(fs::is_directory(dir.path / "sub"));
  CHECK(fs::is_empty(dir.path / "sub"));
  // The directory does not exist.
  CHECK_THROWS_AS(io::save_safetensors(dir.path / "nowhere" / "x.safetensors", big), fs::filesystem_error);
  CHECK(!fs::exists(dir.path / "nowhere"));
  fs::remove(dir.path / "sub");
  CHECK(dir.entries() == listing);

  // A write fails halfway (the file-size limit is hit): the old file survives intact.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // else the signal ends the process
  rlimit lim = saved;
  lim.rlim_cur = 64 * 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  const std::string what = [&] {
    try {
      io::save_safetensors(file, big);
    } catch (const fs::filesystem_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  INFO("message: " << what);
  CHECK(what.find("write failed") != std::string::npos);
  CHECK(read_bytes(file) == old);
  CHECK(dir.entries() == listing);

  // A read-only directory (only meaningful without root, which ignores permissions).
  if (::geteuid() != 0) {
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_AS(io::save_safetensors(file, big), fs::filesystem_error);
    fs::permissions(dir.path, fs::perms::owner_all);
    CHECK(read_bytes(file) == old);
    CHECK(dir.entries() == listing);
  }
  // Reading a directory or a missing file is an OS error, not a format error.
  CHECK_THROWS_AS((void)io::load_safetensors(dir.path), fs::filesystem_error);
  CHECK_THROWS_AS((void)io::load_safetensors(dir.path / "missing"), fs::filesystem_error);
}

TEST_CASE("safetensors: saving keeps the replaced file's mode, writes through a link, cleans a dead writer's temporaries") {
  temp_dir dir;
  const fs::path file = dir.path / "ckpt.safetensors";
  const io::tensor_map t{{"a", random_tensor(dtype::f32, {3, 4})}};
  io::save_safetensors(file, t);
  // a private checkpoint stays private (the new file used to get 0666 & ~umask)
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  io::save_safetensors(file, t);
  CHECK(fs::status(file).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  // through a symbolic link: the link stays, its target is replaced
  const fs::path link = dir.path / "latest.safetensors";
  fs::create_symlink("ckpt.safetensors", link);
  const io::tensor_map u{{"a", random_tensor(dtype::f32, {3, 4})}};
  io::save_safetensors(link, u);
  CHECK(fs::is_symlink(fs::symlink_status(link)));
  CHECK(same_bits(io::load_safetensors(file).at("a"), u.at("a")));
  // a temporary left by a killed save of the same file (its process is gone) is removed; one
  // of a live process, and one of another file, are not
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const fs::path stale = dir.path / (".ckpt.safetensors.tmp-" + std::to_string(child) + "-0");
  const fs::path live = dir.path / (".ckpt.safetensors.tmp-" + std::to_string(::getpid()) + "-999");
  const fs::path other = dir.path / (".other.safetensors.tmp-" + std::to_string(child) + "-0");
  for (const fs::path& p : {stale, live, other}) write_bytes(p, to_bytes("partial"));
  io::save_safetensors(file, t);
  CHECK(!fs::exists(stale));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
}

TEST_CASE("safetensors and idx: a FIFO is refused at once, not waited on") {
  temp_dir dir;
  const fs::path fifo = dir.path / "pipe.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS((void)io::read_safetensors_header(fifo), doctest::Contains("not a regular file"), fs::filesystem_error);
  CHECK_THROWS_AS((void)io::read_idx(fifo, {}), fs::filesystem_error);
}

// ---- IDX --------------------------------------------------------------------------------------

namespace {

/// An IDX file: magic, big-endian extents, then `data` (already big-endian).
std::vector<std::byte> make_idx(unsigned type, std::vector<std::uint32_t> extents, const std::vector<std::byte>& data) {
  std::vector<std::byte> b{std::byte{0}, std::byte{0}, std::byte(type), std::byte(extents.size())};
  for (const std::uint32_t e : extents)
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::byte((e >> s) & 0xff));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <class T>
std::vector<std::byte> big_endian(const std::vector<T>& v) {
  std::vector<std::byte> b;
  for (const T x : v) {
    std::uint64_t u = 0;
    std::memcpy(&u, &x, sizeof(T));
    for (int s = 8 * static_cast<int>(sizeof(T)) - 8; s >= 0; s -= 8) b.push_back(std::byte((u >> s) & 0xff));
  }
  return b;
}

std::string idx_error(const std::vector<std::byte>& b, io::idx_options o = {}) {
  return format_error_of([&] { (void)io::parse_idx(b, o, "x.idx"); });
}

}  // namespace

TEST_CASE("idx: u8 images and labels, converted and scaled") {
  const std::uint32_t n = 5, h = 7, w = 3;
  std::vector<std::byte> pixels(n * h * w);
  for (auto& p : pixels) p = std::byte(rng()() & 0xff);
  pixels[0] = std::byte{255};
  pixels[1] = std::byte{0};
  const auto images = make_idx(0x08, {n, h, w}, pixels);
  const any_tensor x = io::parse_idx(images, {.to = dtype::f32, .scale = 1.0 / 255});
  REQUIRE(x.dt() == dtype::f32);
  REQUIRE(x.shape() == dims{5, 7, 3});
  const float* px = x.data<float>();
  for (std::size_t i = 0; i < pixels.size(); ++i)
    CHECK(std::fabs(px[i] - std::to_integer<int>(pixels[i]) / 255.0) <= 6e-8);
  CHECK(px[0] == 1.0f);
  CHECK(px[1] == 0.0f);
  const any_tensor raw = io::parse_idx(images, {.to = dtype::i32});
  for (std::size_t i = 0; i < pixels.size(); ++i) CHECK(raw.data<std::int32_t>()[i] == std::to_integer<int>(pixels[i]));

  std::vector<std::byte> labels(n);
  for (auto& l : labels) l = std::byte(rng()() % 10);
  temp_dir dir;
  write_bytes(dir.path / "labels-idx1-ubyte", make_idx(0x08, {n}, labels));
  const any_tensor y = io::read_idx(dir.path / "labels-idx1-ubyte", {.to = dtype::i64});
  REQUIRE(y.shape() == dims{5});
  for (std::size_t i = 0; i < n; ++i) CHECK(y.data<std::int64_t>()[i] == std::to_integer<int>(labels[i]));
}

TEST_CASE("idx: signed and floating element types are read big-endian") {
  const std::vector<std::int8_t> i8{-128, -1, 0, 127};
  const std::vector<std::int16_t> i16{-32768, -2, 300, 32767};
  const std::vector<std::int32_t> i32{std::numeric_limits<std::int32_t>::min(), -70000, 1, 2147483647};
  const std::vector<float> f32{-1.5f, 0.1f, 3e38f, -0.0f};
  const std::vector<double> f64{-2.25, 1e300, 5e-324, 0.1};
  const auto as_i64 = [](const std::vector<std::byte>& b) { return io::parse_idx(b, {.to = dtype::i64}); };
  const auto as_f64 = [](const std::vector<std::byte>& b) { return io::parse_idx(b, {.to = dtype::f64}); };
  const any_tensor a = as_i64(make_idx(0x09, {2, 2}, big_endian(i8)));
  const any_tensor b = as_i64(make_idx(0x0b, {4}, big_endian(i16)));
  const any_tensor c = as_i64(make_idx(0x0c, {1, 4}, big_endian(i32)));
  const any_tensor d = as_f64(make_idx(0x0d, {4}, big_endian(f32)));
  const any_tensor e = as_f64(make_idx(0x0e, {4, 1}, big_endian(f64)));
  CHECK(a.shape() == dims{2, 2});
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(a.data<std::int64_t>()[i] == i8[i]);
    CHECK(b.data<std::int64_t>()[i] == i16[i]);
    CHECK(c.data<std::int64_t>()[i] == i32[i]);
    CHECK(std::bit_cast<std::uint64_t>(d.data<double>()[i]) == std::bit_cast<std::uint64_t>(double(f32[i])));
    CHECK(std::bit_cast<std::uint64_t>(e.data<double>()[i]) == std::bit_cast<std::uint64_t>(f64[i]));
  }
  const any_tensor h = io::parse_idx(make_idx(0x0b, {4}, big_endian(i16)), {.to = dtype::bf16, .scale = 0.5});
  CHECK(float(h.data<bfloat16>()[2]) == 150.0f);
  CHECK(io::parse_idx(make_idx(0x08, {0, 4}, {})).shape() == dims{0, 4});
  CHECK(io::parse_idx(make_idx(0x0c, {}, big_endian(std::vector<std::int32_t>{-9})), {.to = dtype::i32}).data<std::int32_t>()[0] == -9);
}

TEST_CASE("idx: malformed files and impossible conversions are rejected") {
  const auto has = [](const std::string& msg, std::string_view what) {
    INFO("message: " << msg);
    CHECK(msg.find(what) != std::string::npos);
    CHECK(msg.rfind("kiln: x.idx: ", 0) == 0);
  };
  const std::vector<std::byte> six(6, std::byte{1});
  has(idx_error({}), "too few for the 4-byte IDX magic");
  has(idx_error({std::byte{0}, std::byte{0}, std::byte{8}}), "too few for the 4-byte IDX magic");
  has(idx_error({std::byte{0}, std::byte{1}, std::byte{8}, std::byte{1}}), "magic number must start with two zero bytes");
  has(idx_error(make_idx(0x0a, {6}, six)), "unknown IDX element type code 10");
  has(idx_error(make_idx(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 6}, six)), "has 9 dimensions; kiln supports at most 8");
  const auto header = make_idx(0x08, {2, 3}, {});
  has(idx_error(std::vector<std::byte>(header.begin(), header.begin() + 9)),
      "truncated: 2 dimensions need a 12-byte header but the file has 9 bytes");
  has(idx_error(make_idx(0x08, {2, 4}, six)), "truncated: dimensions [2, 4] of u8 need 8 bytes of data but the file has 6");
  has(idx_error(make_idx(0x0c, {2}, six)), "need 8 bytes of data but the file has 6");
  has(idx_error(make_idx(0x08, {2, 2}, six)), "the file has 2 bytes after the data");
  has(idx_error(make_idx(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, six)), "are too large");
  has(idx_error(make_idx(0x08, {0, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {})), "are too large");
  has(idx_error(make_idx(0x08, {0, 0x40000000u, 0x40000000u}, {})), "are too large (more than 2^59 elements)");
  has(idx_error(make_idx(0x0d, {1}, big_endian(std::vector<float>{1.5f})), {.to = dtype::i64}),
      "holds f32 data, which cannot be read as i64 without rounding");
  const std::vector<std::byte> gz{std::byte{0x1f}, std::byte{0x8b}, std::byte{8}, std::byte{0}};
  has(idx_error(gz), "gzip-compressed: include <kiln/io/idx_gzip.hpp>");
  CHECK_THROWS_AS((void)io::parse_idx(make_idx(0x08, {6}, six), {.to = dtype::boolean}), std::invalid_argument);
  CHECK_THROWS_AS((void)io::parse_idx(make_idx(0x08, {6}, six), {.to = dtype::i64, .scale = 2}), std::invalid_argument);
}

#if KILN_TEST_HAVE_ZLIB
namespace {
/// gzip-compresses `in` with zlib's deflate (one member).
std::vector<std::byte> gzip(const std::vector<std::byte>& in) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<std::byte> out(deflateBound(&z, static_cast<uLong>(in.size())));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
}  // namespace

TEST_CASE("idx: gzip-compressed files, one or several members; corrupt ones are rejected") {
  std::vector<std::byte> pixels(4 * 9 * 11);
  for (auto& p : pixels) p = std::byte(rng()() % 7);  // compressible
  const auto raw = make_idx(0x08, {4, 9, 11}, pixels);
  const io::idx_options opt{.to = dtype::f32, .scale = 1.0 / 255, .inflate = io::gunzip};
  const any_tensor want = io::parse_idx(raw, opt);
  const auto gz = gzip(raw);
  REQUIRE(gz.size() < raw.size());
  temp_dir dir;
  write_bytes(dir.path / "images-idx3-ubyte.gz", gz);
  CHECK(same_bits(io::read_idx(dir.path / "images-idx3-ubyte.gz", opt), want));
  // Two members (what `cat a.gz b.gz` gives) decompress as one stream.
  const std::size_t cut = 4 + 4 * 3 + 50;
  const auto two = gzip(std::vector<std::byte>(raw.begin(), raw.begin() + cut)) +
                   gzip(std::vector<std::byte>(raw.begin() + cut, raw.end()));
  CHECK(same_bits(io::parse_idx(two, opt), want));

  const auto has = [](const std::string& msg, std::string_view what) {
    INFO("message: " << msg);
    CHECK(msg.find(what) != std::string::npos);
  };
  for (const std::size_t len : {std::size_t{2}, std::size_t{10}, gz.size() / 2, gz.size() - 1})
    has(idx_error(std::vector<std::byte>(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(len)), opt), "gzip: ");
  has(idx_error(std::vector<std::byte>(gz.begin(), gz.end() - 5), opt), "gzip: the compressed data is truncated");
  auto corrupt = gz;
  corrupt[gz.size() - 6] ^= std::byte{0xff};  // the CRC
  has(idx_error(corrupt, opt), "gzip: the compressed data is corrupt");
  has(idx_error(gz + std::vector<std::byte>{std::byte{0}, std::byte{0}}, opt), "2 bytes of trailing data");
  io::idx_options small = opt;
  small.max_bytes = raw.size() - 1;
  has(idx_error(gz, small), "decompresses to more than");
  small.max_bytes = raw.size();
  CHECK(same_bits(io::parse_idx(gz, small), want));
  small.max_bytes = UINT64_MAX;  // no limit (the room past the limit used to wrap to 0)
  CHECK(same_bits(io::parse_idx(gz, small), want));
  // a forged size trailer is found out at the end, whatever it made the first buffer
  auto forged = gz;
  for (std::size_t i = 1; i <= 4; ++i) forged[gz.size() - i] = std::byte{0xff};
  has(idx_error(forged, opt), "gzip: the compressed data is corrupt");
  // gzip inside gzip is not IDX.
  has(idx_error(gzip(gz), opt), "magic number must start with two zero bytes (this is gzip data)");
}

TEST_CASE("idx: decompression stops at the size the IDX header declares") {
  // An IDX header that declares 10 bytes of data, followed by 64 members of 1 MB of zeros each
  // (what `cat` of gzip files gives): it was decompressed whole, 64 MB from 64 KB, before the
  // IDX reader saw the bytes after the data; a single long member likewise.
  std::vector<std::byte> ten(10);
  for (auto& p : ten) p = std::byte(rng()() % 256);
  const auto raw = make_idx(0x08, {10}, ten);
  const auto zeros = gzip(std::vector<std::byte>(std::size_t{1} << 20));
  std::vector<std::byte> many = gzip(raw);
  for (int i = 0; i < 64; ++i) many = many + zeros;
  std::vector<std::byte> long_one = raw;
  long_one.resize(std::size_t{64} << 20);
  const io::idx_options opt{.to = dtype::i32, .inflate = io::gunzip};
  for (const auto& file : {many, gzip(long_one)}) {
    INFO(file.size() << " bytes of gzip");
    std::string msg;
    const std::size_t peak = kt::heap::peak_during([&] { msg = idx_error(file, opt); });
    INFO(msg);
    CHECK(msg.find("gzip: decompresses to more than the 18 bytes that its header declares") != std::string::npos);
    CHECK(peak <= 16 * file.size() + (std::size_t{1} << 20));
  }
  // a forged size trailer (4 GiB - 1) on 1 MB of incompressible data: the first buffer is
  // believed only up to 8 times the input (it was up to 256 MiB)
  std::vector<std::byte> noise(std::size_t{1} << 20);
  for (auto& b : noise) b = std::byte(rng()() & 0xff);
  auto forged = gzip(noise);
  for (std::size_t i = 1; i <= 4; ++i) forged[forged.size() - i] = std::byte{0xff};
  std::string forged_msg;
  const std::size_t forged_peak = kt::heap::peak_during([&] {
    forged_msg = format_error_of([&] { (void)io::gunzip(forged, "forged.gz"); });
  });
  CHECK(forged_msg.find("gzip: the compressed data is corrupt") != std::string::npos);
  CHECK(forged_peak <= 16 * forged.size() + (std::size_t{1} << 20));
  // without the IDX reader's limit, gunzip decompresses it all
  CHECK(io::gunzip(many, "many.gz").size() == raw.size() + (std::size_t{64} << 20));
  // a file that declares more than it holds is decompressed whole, and found truncated
  const auto short_one = gzip(std::vector<std::byte>(raw.begin(), raw.end() - 1));
  CHECK(idx_error(short_one, opt).find("truncated") != std::string::npos);
}

TEST_CASE("idx: the Fashion-MNIST test set from Debian's dataset-fashion-mnist") {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  // scripts/setup.sh installs the dataset, so its absence is a failure, not a pass; a machine
  // without it sets KILN_TEST_NO_DATASET=1 to skip this case, visibly
  if (!fs::exists(dir / "t10k-images-idx3-ubyte.gz")) {
    const char* skip = std::getenv("KILN_TEST_NO_DATASET");
    if (skip && std::string(skip) == "1") {
      MESSAGE("skipped (KILN_TEST_NO_DATASET=1): " << dir << " is absent");
      return;
    }
    FAIL(dir << " is absent: apt-get install dataset-fashion-mnist (scripts/setup.sh does), or set "
                "KILN_TEST_NO_DATASET=1 to skip this case");
  }
  // Facts computed independently with Python's gzip module.
  const any_tensor x = io::read_idx(dir / "t10k-images-idx3-ubyte.gz", {.to = dtype::i32, .inflate = io::gunzip});
  REQUIRE(x.shape() == dims{10000, 28, 28});
  const std::int32_t* px = x.data<std::int32_t>();
  std::int64_t sum = 0, first = 0;
  std::int32_t lo = 255, hi = 0;
  for (index_t i = 0; i < x.numel(); ++i) {
    sum += px[i];
    if (i < 784) first += px[i];
    lo = std::min(lo, px[i]);
    hi = std::max(hi, px[i]);
  }
  CHECK(sum == 573469082);
  CHECK(first == 33456);
  CHECK(px[14 * 28 + 14] == 110);
  CHECK(lo == 0);
  CHECK(hi == 255);
  const any_tensor xf = io::read_idx(dir / "t10k-images-idx3-ubyte.gz", {.to = dtype::f32, .scale = 1.0 / 255, .inflate = io::gunzip});
  CHECK(xf.data<float>()[14 * 28 + 14] == doctest::Approx(110 / 255.0).epsilon(1e-7));

  const any_tensor y = io::read_idx(dir / "t10k-labels-idx1-ubyte.gz", {.to = dtype::i64, .inflate = io::gunzip});
  REQUIRE(y.shape() == dims{10000});
  std::array<int, 10> per_class{};
  for (index_t i = 0; i < y.numel(); ++i) {
    const std::int64_t l = y.data<std::int64_t>()[i];
    REQUIRE((l >= 0 && l <= 9));
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (const int c : per_class) CHECK(c == 1000);
  const std::int64_t first10[] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (int i = 0; i < 10; ++i) CHECK(y.data<std::int64_t>()[i] == first10[i]);
}
#endif

