// libFuzzer target for kiln's file readers: every input is parsed as a safetensors file and as
// an IDX file (raw or gzip) from memory. Malformed input must end in kiln::io::format_error;
// anything else (another exception, a crash, a sanitizer report, a leak) is a finding. Inputs
// that parse must also survive a round trip: serialize what was read, parse it again, and get
// the same names, dtypes, shapes, bits and metadata; load_into must agree with the full load.
// And no input may take more heap than 16 times its size + 64 MB (counted by operator new).
#include <kiln/io/idx_gzip.hpp>
#include <kiln/io/safetensors.hpp>

#include "../heap_count.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

using namespace kiln;

namespace {

bool same(const any_tensor& a, const any_tensor& b) {
  if (a.dt() != b.dt() || !(a.shape() == b.shape()) || !a.is_contiguous() || !b.is_contiguous()) return false;
  const auto n = static_cast<std::size_t>(a.numel()) * size_of(a.dt());
  return n == 0 || std::memcmp(a.bytes(), b.bytes(), n) == 0;
}

bool same(const io::tensor_map& a, const io::tensor_map& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
    if (i->first != j->first || !same(i->second, j->second)) return false;
  return true;
}

void safetensors(std::span<const std::byte> in) {
  io::safetensors_file f;
  try {
    (void)io::parse_safetensors_header(in);
    f = io::parse_safetensors(in);
  } catch (const io::format_error&) {
    return;
  }
  const std::vector<std::byte> out = io::serialize_safetensors(f.tensors, f.metadata);
  const io::safetensors_file again = io::parse_safetensors(out);  // must not throw
  if (!same(f.tensors, again.tensors) || f.metadata != again.metadata) __builtin_trap();

  io::tensor_map dst;
  for (const auto& [name, t] : f.tensors) dst.emplace(name, any_tensor(t.dt(), t.shape()));
  if (io::parse_into(in, dst) != f.metadata || !same(dst, f.tensors)) __builtin_trap();
}

void idx(std::span<const std::byte> in) {
  const io::idx_options to_f32{.to = dtype::f32, .scale = 1.0 / 255, .inflate = io::gunzip, .max_bytes = 1 << 20};
  const io::idx_options to_i64{.to = dtype::i64, .inflate = io::gunzip, .max_bytes = 1 << 20};
  try {
    (void)io::parse_idx(in, to_f32);
  } catch (const io::format_error&) {
  }
  try {
    (void)io::parse_idx(in, to_i64);
  } catch (const io::format_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  const std::size_t peak = kt::heap::peak_during([&] {
    safetensors(in);
    idx(in);
  });
  if (peak > 16 * size + (std::size_t{64} << 20)) __builtin_trap();  // memory not bounded by the input
  return 0;
}
