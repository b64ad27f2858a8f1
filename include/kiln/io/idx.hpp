// kiln/io/idx.hpp: reading IDX files, the format of (Fashion-)MNIST.
//
// An IDX file is a magic number (two zero bytes, an element type code, the number of
// dimensions), one big-endian 32-bit extent per dimension, then the elements, big-endian,
// row-major. Type codes: 0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32,
// 0x0D float32, 0x0E float64.
//
// kiln has no 8-bit dtype, so elements are converted on reading to the dtype the caller asks
// for (idx_options::to), optionally scaled: {.to = f32, .scale = 1.0 / 255} gives pixels in
// [0, 1]; {.to = i64} gives class labels. Converting floats to integers is refused rather than
// rounded.
//
// Distributions ship the files gzip-compressed (Debian's dataset-fashion-mnist: *.gz under
// /usr/share/datasets/fashion-mnist). Decompression needs zlib, which kiln's core does not
// depend on: include <kiln/io/idx_gzip.hpp> (link zlib, CMake target ZLIB::ZLIB) and pass
// {.inflate = kiln::io::gunzip}. A gzip file read without it is an error that says so.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/config.hpp"
#include "../core/tensor.hpp"
#include "file.hpp"

namespace kiln::io {

/// The size that decompressed data declares in its first bytes (a file header): 0 while `prefix`
/// is too short to tell, else the size the whole data must have. Throws format_error (naming
/// `name`) if the prefix cannot begin valid data. A decompressor stops at that size.
using declared_size_fn = std::uint64_t (*)(std::span<const std::byte> prefix, const std::string& name);

/// Decompresses a whole file: (compressed bytes, name for errors, most bytes to produce, the
/// size its content declares or nullptr).
using inflate_fn = std::vector<std::byte> (*)(std::span<const std::byte>, const std::string&, std::uint64_t,
                                              declared_size_fn);

struct idx_options {
  /// dtype of the result. Integer dtypes need integer data; bool is not supported.
  dtype to = dtype::f32;
  /// Every element is multiplied by this (floating-point `to` only); 1.0 / 255 maps bytes to [0, 1].
  double scale = 1;
  /// Decompressor for gzip files (kiln::io::gunzip from <kiln/io/idx_gzip.hpp>).
  inflate_fn inflate = nullptr;
  /// Most bytes a compressed file may decompress to (guards against decompression bombs; the
  /// decompressor also stops at the size the IDX header declares).
  std::uint64_t max_bytes = std::uint64_t{1} << 32;
};

/// IDX element types.
enum class idx_type : std::uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0b, i32 = 0x0c, f32 = 0x0d, f64 = 0x0e };

struct idx_header {
  idx_type type = idx_type::u8;
  dims shape;
  std::size_t data_offset = 0;  ///< where the elements start (4 + 4 * rank)
};

namespace detail {

inline std::size_t idx_elem_size(idx_type t) {
  switch (t) {
    case idx_type::u8:
    case idx_type::i8: return 1;
    case idx_type::i16: return 2;
    case idx_type::i32:
    case idx_type::f32: return 4;
    case idx_type::f64: return 8;
  }
  return 0;
}

inline const char* idx_type_name(idx_type t) {
  switch (t) {
    case idx_type::u8: return "u8";
    case idx_type::i8: return "i8";
    case idx_type::i16: return "i16";
    case idx_type::i32: return "i32";
    case idx_type::f32: return "f32";
    case idx_type::f64: return "f64";
  }
  return "?";
}

inline std::uint64_t load_be(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

/// Converts `n` big-endian elements of C++ type Src at `in` into `out` (contiguous, dtype D).
template <class Src, dtype D>
void idx_convert(const std::byte* in, std::size_t n, storage_t<D>* out, double scale) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bits = load_be(in + i * sizeof(Src), sizeof(Src));
    Src x;
    if constexpr (std::is_same_v<Src, float>) x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    else if constexpr (std::is_same_v<Src, double>) x = std::bit_cast<double>(bits);
    else x = static_cast<Src>(static_cast<std::make_unsigned_t<Src>>(bits));  // two's complement
    if constexpr (is_floating(D)) out[i] = any_tensor::convert<D>(static_cast<double>(x) * scale);
    else out[i] = any_tensor::convert<D>(x);
  }
}

}  // namespace detail

/// Reads and checks the magic number and extents of an (uncompressed) IDX buffer.
KILN_RUNTIME idx_header parse_idx_header(std::span<const std::byte> b, const std::string& name = "<memory>");

namespace detail {
/// The tensor of an uncompressed IDX buffer (options already checked).
KILN_RUNTIME any_tensor idx_to_tensor(std::span<const std::byte> b, const idx_options& opt, const std::string& name);
}  // namespace detail

/// The size of the IDX data that `prefix` begins (header and elements), 0 if the prefix is too
/// short to tell; throws format_error if it is not the start of an IDX header (declared_size_fn).
KILN_RUNTIME std::uint64_t idx_declared_size(std::span<const std::byte> prefix, const std::string& name);

/// Reads an IDX buffer (a whole file, gzip-compressed if opt.inflate is set) into a new
/// contiguous tensor of dtype opt.to. `name` labels errors.
KILN_RUNTIME any_tensor parse_idx(std::span<const std::byte> b, const idx_options& opt = {},
                                 const std::string& name = "<memory>");

/// Reads an IDX file (see parse_idx).
KILN_RUNTIME any_tensor read_idx(const std::filesystem::path& path, const idx_options& opt = {});

#if KILN_DEFINE_RUNTIME
namespace detail {
// The header's fields, checked, and the element count; false (h partial) while `b` is too short
// to hold them and `whole` is false (b is a prefix), a format_error if `whole`.
KILN_RUNTIME bool idx_fields(std::span<const std::byte> b, const std::string& name, bool whole, idx_header& h,
                             std::uint64_t& count) {
  if (b.size() < 4) {
    if (!whole) return false;
    throw format_error(name, "the file has " + std::to_string(b.size()) + " bytes, too few for the 4-byte IDX magic number");
  }
  const auto byte = [&](std::size_t i) { return std::to_integer<unsigned>(b[i]); };
  if (byte(0) != 0 || byte(1) != 0)
    throw format_error(name, "not an IDX file: the magic number must start with two zero bytes" +
                                 std::string(byte(0) == 0x1f && byte(1) == 0x8b ? " (this is gzip data)" : ""));
  const unsigned code = byte(2);
  switch (code) {
    case 0x08: case 0x09: case 0x0b: case 0x0c: case 0x0d: case 0x0e: h.type = static_cast<idx_type>(code); break;
    default: throw format_error(name, "unknown IDX element type code " + std::to_string(code));
  }
  const unsigned rank = byte(3);
  if (rank > static_cast<unsigned>(max_rank))
    throw format_error(name, "the IDX file has " + std::to_string(rank) + " dimensions; kiln supports at most " +
                                 std::to_string(max_rank));
  h.data_offset = 4 + 4 * std::size_t{rank};
  if (b.size() < h.data_offset) {
    if (!whole) return false;
    throw format_error(name, "truncated: " + std::to_string(rank) + " dimensions need a " +
                                 std::to_string(h.data_offset) + "-byte header but the file has " +
                                 std::to_string(b.size()) + " bytes");
  }
  h.shape.rank = static_cast<int>(rank);
  // The product of the non-zero extents is bounded as every run-time shape is (countable(),
  // kiln::max_elements) so that no product kiln forms from the shape (element and byte counts,
  // strides) can overflow, even when a zero extent makes the tensor empty.
  for (unsigned i = 0; i < rank; ++i) h.shape.e[i] = static_cast<index_t>(detail::load_be(b.data() + 4 + 4 * i, 4));
  std::uint64_t nonzero = 1;
  bool zero = false;
  for (unsigned i = 0; i < rank; ++i) {
    const auto e = static_cast<std::uint64_t>(h.shape.e[i]);
    if (e == 0) zero = true;
    else if (nonzero > static_cast<std::uint64_t>(max_elements) / e)
      throw format_error(name, "dimensions " + to_string(h.shape) + " are too large (more than 2^59 elements)");
    else nonzero *= e;
  }
  count = zero ? 0 : nonzero;
  return true;
}
}  // namespace detail

KILN_RUNTIME std::uint64_t idx_declared_size(std::span<const std::byte> prefix, const std::string& name) {
  idx_header h;
  std::uint64_t count = 0;
  if (!detail::idx_fields(prefix, name, false, h, count)) return 0;
  return h.data_offset + count * detail::idx_elem_size(h.type);  // <= 2^59 * 8: no overflow
}

KILN_RUNTIME idx_header parse_idx_header(std::span<const std::byte> b, const std::string& name) {
  idx_header h;
  std::uint64_t count = 0;
  detail::idx_fields(b, name, true, h, count);
  const std::size_t size = detail::idx_elem_size(h.type);
  const std::uint64_t have = b.size() - h.data_offset;
  if (count * size > have)
    throw format_error(name, "truncated: dimensions " + to_string(h.shape) + " of " + detail::idx_type_name(h.type) +
                                 " need " + std::to_string(count * size) + " bytes of data but the file has " +
                                 std::to_string(have));
  if (count * size < have)
    throw format_error(name, "the file has " + std::to_string(have - count * size) +
                                 " bytes after the data that dimensions " + to_string(h.shape) + " of " +
                                 detail::idx_type_name(h.type) + " need (wrong dimensions or not an IDX file?)");
  return h;
}

namespace detail {
KILN_RUNTIME any_tensor idx_to_tensor(std::span<const std::byte> b, const idx_options& opt, const std::string& name) {
  const idx_header h = parse_idx_header(b, name);
  if (!is_floating(opt.to) && (h.type == idx_type::f32 || h.type == idx_type::f64))
    throw format_error(name, std::string("holds ") + detail::idx_type_name(h.type) + " data, which cannot be read as " +
                                 std::string(kiln::name(opt.to)) + " without rounding");
  any_tensor out(opt.to, h.shape);
  const auto n = static_cast<std::size_t>(h.shape.numel());
  const std::byte* in = b.data() + h.data_offset;
  visit(opt.to, [&]<dtype D>() {
    if constexpr (D != dtype::boolean) {
      auto* o = reinterpret_cast<storage_t<D>*>(out.bytes());
      switch (h.type) {
        case idx_type::u8: detail::idx_convert<std::uint8_t, D>(in, n, o, opt.scale); break;
        case idx_type::i8: detail::idx_convert<std::int8_t, D>(in, n, o, opt.scale); break;
        case idx_type::i16: detail::idx_convert<std::int16_t, D>(in, n, o, opt.scale); break;
        case idx_type::i32: detail::idx_convert<std::int32_t, D>(in, n, o, opt.scale); break;
        case idx_type::f32: detail::idx_convert<float, D>(in, n, o, opt.scale); break;
        case idx_type::f64: detail::idx_convert<double, D>(in, n, o, opt.scale); break;
      }
    }
  });
  return out;
}
}  // namespace detail

KILN_RUNTIME any_tensor parse_idx(std::span<const std::byte> b, const idx_options& opt, const std::string& name) {
  if (opt.to == dtype::boolean) throw std::invalid_argument("kiln: read_idx: cannot convert to bool");
  if (!is_floating(opt.to) && opt.scale != 1)
    throw std::invalid_argument("kiln: read_idx: scale must be 1 when converting to an integer dtype");
  if (b.size() >= 2 && std::to_integer<unsigned>(b[0]) == 0x1f && std::to_integer<unsigned>(b[1]) == 0x8b) {
    if (!opt.inflate)
      throw format_error(name, "the file is gzip-compressed: include <kiln/io/idx_gzip.hpp> (links zlib) and pass "
                               "idx_options{.inflate = kiln::io::gunzip}, or decompress it first");
    return detail::idx_to_tensor(opt.inflate(b, name, opt.max_bytes, idx_declared_size), opt, name);  // gzip in gzip is not IDX
  }
  return detail::idx_to_tensor(b, opt, name);
}

KILN_RUNTIME any_tensor read_idx(const std::filesystem::path& path, const idx_options& opt) {
  const detail::input_file f(path);
  return parse_idx(f.read_all(), opt, f.name());
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::io
