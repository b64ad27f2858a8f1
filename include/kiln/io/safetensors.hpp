// kiln/io/safetensors.hpp: reading and writing the safetensors format (Hugging Face), the
// checkpoint format of PyTorch and the Hub.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"key": "value", ...},   (optional, strings only)
//    "w1": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// (possibly padded with spaces), then the tensors' bytes, row-major and little-endian, tightly
// packed: data_offsets are relative to the end of the header and cover the rest of the file
// exactly, in some order, with no gap and no overlap.
//
// The reader trusts nothing in the file. It applies the checks of the reference implementation
// (huggingface/safetensors, safetensors/src/tensor.rs: header at most 100,000,000 bytes, valid
// UTF-8 and JSON, starting with '{'; known dtypes; offsets that tile the data buffer exactly;
// shape x dtype size == byte count, without overflow) and a few more of its own: no duplicate
// keys, ranks and extents that kiln can represent, BOOL bytes that are 0 or 1. Every failure
// is a format_error naming the file and the problem, and nothing is half-loaded: a load either
// returns every tensor or throws, and load_into writes its destinations only after the whole
// file has been read and checked.
//
// The writer sorts tensors by element size (largest first) then name, as the reference
// implementation does, and pads the header to a multiple of 8 bytes, so every tensor's data is
// aligned to its element size in the file (memory-mapping readers rely on it). It writes a
// temporary file in the destination's directory, fsyncs it and renames it into place: a
// reader of the destination sees the old file or the new one, never a partial one.
//
// kiln's dtypes map to BOOL, I32, I64, BF16, F32, F64. Files with other dtypes (F16, I8, U8,
// F8_*, ...) are validated but those tensors cannot be loaded (the error names them), except
// that load_into with allow_extra skips tensors it was not asked for.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/tensor.hpp"
#include "file.hpp"
#include "json.hpp"

static_assert(std::endian::native == std::endian::little,
              "kiln/io/safetensors.hpp: safetensors data is little-endian and kiln copies it as is; "
              "big-endian hosts are not supported");

namespace kiln::io {

/// Tensors by name (sorted, names unique).
using tensor_map = std::map<std::string, any_tensor>;
/// The header's free-form "__metadata__": strings to strings.
using metadata_map = std::map<std::string, std::string>;

/// The largest header the reader accepts, as in the reference implementation.
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;

/// What the header says about one tensor.
struct tensor_info {
  std::string name;
  std::string dtype_name;     ///< as the file spells it: "F32", "F16" ...
  std::optional<dtype> dt;    ///< the kiln dtype, if kiln has one for dtype_name
  dims shape;
  std::uint64_t begin = 0;    ///< data_offsets, in bytes from the start of the data buffer
  std::uint64_t end = 0;
};

/// A validated header.
struct safetensors_header {
  std::vector<tensor_info> tensors;  ///< in order of their data in the file
  metadata_map metadata;
  std::uint64_t data_start = 0;  ///< file offset of the data buffer (8 + header length)

  const tensor_info* find(std::string_view name) const {
    for (const tensor_info& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

/// A whole file, loaded.
struct safetensors_file {
  tensor_map tensors;
  metadata_map metadata;
};

struct load_options {
  /// load_into: ignore tensors in the file that the destinations do not name (by default
  /// they are an error, so that a checkpoint of another model is not half-used silently).
  bool allow_extra = false;
  /// load_into: called with the file's metadata once the whole file has been read and checked,
  /// before any destination is written; an exception it throws refuses the file (a
  /// checkpoint's step count, say, checked from the same read as its tensors).
  std::function<void(const metadata_map&)> accept = nullptr;
};

namespace detail {

struct st_dtype {
  std::string_view name;
  std::uint8_t bytes;       // element size; 0: a sub-byte format kiln cannot even size-check
  bool loadable;
  dtype dt;
};
// Every dtype the reference implementation and the Python package know (Python adds the FNUZ
// float8 variants), so that a file with, say, F16 tensors is reported as "F16 is not
// supported" rather than as corrupt.
inline constexpr st_dtype st_dtypes[] = {
    {"BOOL", 1, true, dtype::boolean}, {"I32", 4, true, dtype::i32},  {"I64", 8, true, dtype::i64},
    {"BF16", 2, true, dtype::bf16},    {"F32", 4, true, dtype::f32},  {"F64", 8, true, dtype::f64},
    {"U8", 1, false, {}},              {"I8", 1, false, {}},          {"F8_E5M2", 1, false, {}},
    {"F8_E4M3", 1, false, {}},         {"F8_E5M2FNUZ", 1, false, {}}, {"F8_E4M3FNUZ", 1, false, {}},
    {"F8_E8M0", 1, false, {}},         {"I16", 2, false, {}},         {"U16", 2, false, {}},
    {"F16", 2, false, {}},             {"U32", 4, false, {}},         {"U64", 8, false, {}},
    {"C64", 8, false, {}},             {"F4", 0, false, {}},          {"F6_E2M3", 0, false, {}},
    {"F6_E3M2", 0, false, {}},
};

inline const st_dtype* find_st_dtype(std::string_view name) {
  for (const st_dtype& d : st_dtypes)
    if (d.name == name) return &d;
  return nullptr;
}

inline std::string_view st_name(dtype d) {
  switch (d) {
    case dtype::boolean: return "BOOL";
    case dtype::i32: return "I32";
    case dtype::i64: return "I64";
    case dtype::bf16: return "BF16";
    case dtype::f32: return "F32";
    case dtype::f64: return "F64";
  }
  return "?";
}

inline std::string cannot_load(const tensor_info& t) {
  return "tensor " + quote_name(t.name) + " has dtype " + t.dtype_name +
         ", which kiln cannot load (it reads BOOL, I32, I64, BF16, F32 and F64)";
}

/// An in-memory file, with the interface of input_file.
struct memory_source {
  std::span<const std::byte> bytes;
  std::string label;
  std::uint64_t size() const { return bytes.size(); }
  const std::string& name() const { return label; }
  void read(std::uint64_t offset, void* dst, std::size_t n) const {
    if (offset > bytes.size() || n > bytes.size() - offset)  // validation makes this unreachable
      throw format_error(label, "read past the end of the buffer");
    if (n) std::memcpy(dst, bytes.data() + offset, n);
  }
};

/// Reads and checks one tensor entry of the header and fills `t` (name already set). Unknown
/// fields are checked as JSON and skipped, never built.
KILN_RUNTIME void parse_entry(json::reader& r, tensor_info& t, const std::string& file);

inline std::string offsets(const tensor_info& t) {
  std::string s = "[";  // appended piecewise: "[" + std::string warns falsely in g++ 12 (PR105651)
  s += std::to_string(t.begin);
  s += ", ";
  s += std::to_string(t.end);
  return s += ']';
}

/// Parses and validates a header (the N bytes after the length), given how many bytes of data
/// follow it.
KILN_RUNTIME safetensors_header parse_header(std::string_view text, std::uint64_t data_size, const std::string& file);

template <class Source>
safetensors_header read_header(const Source& src) {
  const std::string& file = src.name();
  const std::uint64_t size = src.size();
  if (size < 8)
    throw format_error(file, "the file has " + std::to_string(size) +
                                 " bytes, fewer than the 8 that hold the header length (truncated?)");
  unsigned char len[8];
  src.read(0, len, 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > safetensors_max_header)
    throw format_error(file, "header length " + std::to_string(n) + " exceeds the limit of " +
                                 std::to_string(safetensors_max_header) + " bytes (corrupted or not safetensors?)");
  if (n > size - 8)
    throw format_error(file, "header points outside the file: its length is " + std::to_string(n) +
                                 " bytes but only " + std::to_string(size - 8) + " follow (truncated?)");
  std::string text(static_cast<std::size_t>(n), '\0');
  src.read(8, text.data(), text.size());
  return parse_header(text, size - 8 - n, file);
}

/// Reads one tensor's bytes into a new tensor (the header has been validated).
template <class Source>
any_tensor read_tensor(const Source& src, const safetensors_header& h, const tensor_info& t) {
  if (!t.dt) throw format_error(src.name(), cannot_load(t));
  any_tensor out(*t.dt, t.shape);
  const auto n = static_cast<std::size_t>(t.end - t.begin);
  if (n) src.read(h.data_start + t.begin, out.bytes(), n);
  if (*t.dt == dtype::boolean) {
    // Read as bytes: a bool object holding anything but 0 or 1 is undefined behaviour.
    const auto* p = reinterpret_cast<const unsigned char*>(out.bytes());
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] > 1)
        throw format_error(src.name(), "tensor " + quote_name(t.name) + " (BOOL) has byte value " +
                                           std::to_string(p[i]) + " at element " + std::to_string(i) +
                                           "; BOOL elements must be 0 or 1");
  }
  return out;
}

template <class Source>
safetensors_file load_all(const Source& src) {
  safetensors_header h = read_header(src);
  for (const tensor_info& t : h.tensors)  // before reading anything
    if (!t.dt) throw format_error(src.name(), cannot_load(t));
  safetensors_file out;
  for (const tensor_info& t : h.tensors) out.tensors.emplace(t.name, read_tensor(src, h, t));
  out.metadata = std::move(h.metadata);
  return out;
}

/// Copies src's elements into dst bit for bit (same dtype and shape, no aliasing), through
/// both views' strides. any_tensor::copy_from converts through compute types, and bf16 -> float
/// -> bf16 quiets signalling NaNs: a checkpoint must keep every bit.
KILN_RUNTIME void copy_bits(const any_tensor& dst, const any_tensor& src);

inline std::string describe(std::string_view dt, const dims& shape) {
  return std::string(dt) + " " + to_string(shape);
}

template <class Source>
metadata_map load_into(const Source& src, const tensor_map& dst, const load_options& opt) {
  for (const auto& [name, t] : dst)
    if (!t.defined())
      throw std::invalid_argument("kiln: load_into: the destination for " + quote_name(name) +
                                  " is an undefined tensor (allocate it with its dtype and shape first)");
  const std::string& file = src.name();
  safetensors_header h = read_header(src);
  std::map<std::string_view, const tensor_info*> in_file;
  for (const tensor_info& t : h.tensors) in_file.emplace(t.name, &t);

  std::vector<std::pair<const any_tensor*, const tensor_info*>> jobs;
  jobs.reserve(dst.size());
  for (const auto& [name, t] : dst) {
    const auto it = in_file.find(name);
    if (it == in_file.end()) {
      std::string have;
      std::size_t shown = 0;
      for (const tensor_info& x : h.tensors) {
        if (shown == 8) {
          have += ", ...";
          break;
        }
        have += (shown++ ? ", " : "") + quote_name(x.name);
      }
      throw format_error(file, "has no tensor " + quote_name(name) + " (it has " +
                                   std::to_string(h.tensors.size()) + (h.tensors.empty() ? "" : ": ") + have + ")");
    }
    const tensor_info& info = *it->second;
    if (!info.dt) throw format_error(file, cannot_load(info));
    if (*info.dt != t.dt() || !(info.shape == t.shape()))
      throw format_error(file, "tensor " + quote_name(name) + " is " + describe(info.dtype_name, info.shape) +
                                   " in the file but the destination is " + describe(st_name(t.dt()), t.shape()));
    jobs.emplace_back(&t, &info);
  }
  if (!opt.allow_extra)
    for (const tensor_info& x : h.tensors)
      if (!dst.count(x.name))
        throw format_error(file, "has tensor " + quote_name(x.name) +
                                     ", which was not asked for (load_options::allow_extra ignores it)");

  // Everything is read before anything is written, so a failure leaves every destination as
  // it was. Copying cannot fail then: dtypes and shapes match, and sources are fresh storage.
  std::vector<any_tensor> loaded;
  loaded.reserve(jobs.size());
  for (const auto& [d, info] : jobs) loaded.push_back(read_tensor(src, h, *info));
  if (opt.accept) opt.accept(h.metadata);
  for (std::size_t i = 0; i < jobs.size(); ++i) copy_bits(*jobs[i].first, loaded[i]);
  return std::move(h.metadata);
}

/// A header and the order of the tensors, ready to write.
struct prepared {
  std::string header;  // padded to a multiple of 8
  std::vector<std::pair<const std::string*, const any_tensor*>> order;
};

/// The header and order of the tensors of a file; throws std::invalid_argument for what
/// save_safetensors refuses.
KILN_RUNTIME prepared prepare(const tensor_map& tensors, const metadata_map& metadata);

/// Writes the whole file through sink(const void*, size_t).
template <class Sink>
void write_file(const prepared& p, Sink&& sink) {
  unsigned char len[8];
  std::uint64_t n = p.header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
  sink(len, 8);
  sink(p.header.data(), p.header.size());
  for (const auto& [name, t] : p.order) {
    any_tensor c = *t;
    if (!c.is_contiguous()) {  // one tensor at a time: at most one copy in memory
      c = any_tensor(t->dt(), t->shape());
      copy_bits(c, *t);
    }
    const auto bytes = static_cast<std::size_t>(c.numel()) * size_of(c.dt());
    if (bytes) sink(c.bytes(), bytes);
  }
}

}  // namespace detail

// ---- reading ---------------------------------------------------------------------------------

/// Reads and validates a file's header only (no tensor data): names, dtypes, shapes, metadata.
KILN_RUNTIME safetensors_header read_safetensors_header(const std::filesystem::path& path);

/// Loads every tensor and the metadata. Throws format_error if the file is malformed or holds
/// a dtype kiln cannot load.
KILN_RUNTIME safetensors_file load_safetensors_file(const std::filesystem::path& path);

/// Loads every tensor (see load_safetensors_file).
KILN_RUNTIME tensor_map load_safetensors(const std::filesystem::path& path);

/// Reads the file's tensors into existing tensors (typed tensors convert: {{"w1", w1}, ...}),
/// through their views: every destination must be in the file with the same dtype and shape,
/// and the file must hold nothing else unless opt.allow_extra. Destinations are written only
/// after the whole file has been read and checked. Returns the file's metadata.
KILN_RUNTIME metadata_map load_into(const std::filesystem::path& path, const tensor_map& dst,
                                    const load_options& opt = {});

/// The same from a buffer holding a whole file; `name` labels errors.
KILN_RUNTIME safetensors_file parse_safetensors(std::span<const std::byte> bytes, std::string name = "<memory>");
KILN_RUNTIME safetensors_header parse_safetensors_header(std::span<const std::byte> bytes,
                                                      std::string name = "<memory>");
KILN_RUNTIME metadata_map parse_into(std::span<const std::byte> bytes, const tensor_map& dst,
                                     const load_options& opt = {}, std::string name = "<memory>");

// ---- writing ---------------------------------------------------------------------------------

/// The bytes of a safetensors file holding `tensors` (views are written contiguously).
/// Throws std::invalid_argument for an undefined tensor, a name that is not UTF-8, or the
/// reserved name "__metadata__".
KILN_RUNTIME std::vector<std::byte> serialize_safetensors(const tensor_map& tensors, const metadata_map& metadata = {});

/// Writes `tensors` to `path` atomically: a temporary file in the same directory, fsync'd,
/// then renamed over `path`. On any failure the temporary file is removed and `path` is left
/// as it was. OS failures throw std::filesystem::filesystem_error.
KILN_RUNTIME void save_safetensors(const std::filesystem::path& path, const tensor_map& tensors,
                                   const metadata_map& metadata = {});

#if KILN_DEFINE_RUNTIME
namespace detail {

KILN_RUNTIME void parse_entry(json::reader& r, tensor_info& t, const std::string& file) {
  const std::string who = "tensor " + quote_name(t.name);
  if (r.next() != json::kind::object)
    throw format_error(file, who + ": its header entry must be an object with dtype, shape and data_offsets");
  const auto array_of_unsigned = [&](const char* field, std::size_t most, auto&& each) {
    const std::string bad = who + ": \"" + field + "\" must be an array of " +
                            (most == 2 ? "two non-negative integers" : "non-negative integers");
    if (r.next() != json::kind::array) throw format_error(file, bad);
    r.begin_array();
    std::size_t n = 0;
    for (; r.next_item(); ++n) {
      if (n >= most) {  // counted to the end, for the message, but not kept
        r.skip();
        continue;
      }
      const json::value e = r.read_scalar();
      if (!e.is_unsigned()) throw format_error(file, bad);
      each(n, e.magnitude);
    }
    return n;
  };
  // Unknown fields are ignored, as the reference implementation's serde derive does.
  std::vector<std::string> keys;
  std::string key;
  bool has_d = false, has_s = false, has_o = false;
  std::size_t n_offsets = 0;
  r.begin_object();
  while (r.next_key(key)) {
    if (key == "dtype") {
      has_d = true;
      if (r.next() != json::kind::string) throw format_error(file, who + ": \"dtype\" must be a string");
      t.dtype_name = r.read_string();
    } else if (key == "shape") {
      has_s = true;
      // The product of the non-zero extents is bounded as every run-time shape is (countable(),
      // kiln::max_elements), so that no product kiln forms from it (element and byte counts,
      // strides) can overflow; a zero extent makes the byte count 0.
      constexpr auto limit = static_cast<std::uint64_t>(max_elements);
      std::uint64_t nonzero = 1;
      const std::size_t rank = array_of_unsigned("shape", max_rank, [&](std::size_t i, std::uint64_t x) {
        if (x > limit || (x != 0 && nonzero > limit / x))
          throw format_error(file, who + " has a shape too large for kiln (more than 2^59 elements)");
        if (x) nonzero *= x;
        t.shape.e[i] = static_cast<index_t>(x);
      });
      if (rank > static_cast<std::size_t>(max_rank))
        throw format_error(file, who + " has rank " + std::to_string(rank) + "; kiln supports at most " +
                                     std::to_string(max_rank));
      t.shape.rank = static_cast<int>(rank);
    } else if (key == "data_offsets") {
      has_o = true;
      n_offsets = array_of_unsigned("data_offsets", 2, [&](std::size_t i, std::uint64_t x) { (i ? t.end : t.begin) = x; });
      if (n_offsets != 2)
        throw format_error(file, who + ": \"data_offsets\" must be an array of two non-negative integers");
    } else {
      r.skip();
    }
    keys.push_back(std::move(key));
  }
  r.check_unique({keys.begin(), keys.end()});
  if (!has_d || !has_s || !has_o)
    throw format_error(file, who + ": its header entry has no \"" +
                                 std::string(!has_d ? "dtype" : !has_s ? "shape" : "data_offsets") + "\"");
  const st_dtype* sd = find_st_dtype(t.dtype_name);
  if (!sd) throw format_error(file, who + " has an unknown dtype " + quote_name(t.dtype_name));
  if (sd->bytes == 0) throw format_error(file, cannot_load(t));
  if (sd->loadable) t.dt = sd->dt;
}

KILN_RUNTIME safetensors_header parse_header(std::string_view text, std::uint64_t data_size, const std::string& file) {
  if (text.empty() || text.front() != '{')
    throw format_error(file, "the header must be a JSON object and start with '{'");
  if (const std::size_t bad = json::first_invalid_utf8(text); bad != text.size())
    throw format_error(file, "the header is not valid UTF-8 (byte " + std::to_string(bad) + " of the header)");
  // Read as a stream of the fields kiln keeps: memory in proportion to the tensors and
  // metadata, not to the JSON values a header may hold besides.
  safetensors_header h;
  h.data_start = 8 + text.size();
  try {
    json::reader r(text);
    std::string key;
    bool metadata = false;
    r.begin_object();
    while (r.next_key(key)) {
      if (key == "__metadata__") {
        if (metadata) r.fail("duplicate key \"__metadata__\" in an object");
        metadata = true;
        if (r.next() == json::kind::null) {
          r.skip();
          continue;
        }
        if (r.next() != json::kind::object) throw format_error(file, "\"__metadata__\" must be an object of strings");
        r.begin_object();
        std::string k;
        while (r.next_key(k)) {
          if (r.next() != json::kind::string)
            throw format_error(file, "\"__metadata__\" must be an object of strings; the value of " + quote_name(k) +
                                         " is not a string");
          std::string v = r.read_string();
          if (h.metadata.count(k)) r.fail("duplicate key \"" + k + "\" in an object");
          h.metadata.emplace(std::move(k), std::move(v));
        }
        continue;
      }
      tensor_info t;
      t.name = std::move(key);
      parse_entry(r, t, file);
      h.tensors.push_back(std::move(t));
    }
    r.finish();
    std::vector<std::string_view> names;
    names.reserve(h.tensors.size());
    for (const tensor_info& t : h.tensors) names.push_back(t.name);
    r.check_unique(std::move(names));
  } catch (const json::parse_error& e) {
    throw format_error(file, std::string("the header is not valid JSON: ") + e.what());
  }
  // As the reference implementation: order by offsets, then they must tile [0, data_size).
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const tensor_info& a, const tensor_info& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const tensor_info& t = h.tensors[i];
    const std::string who = "tensor " + quote_name(t.name);
    if (t.end < t.begin)
      throw format_error(file, who + " has data_offsets " + offsets(t) + " that end before they start");
    if (t.end > data_size)
      throw format_error(file, "header points outside the file: " + who + " has data_offsets " + offsets(t) +
                                   " but the file holds " + std::to_string(data_size) + " bytes of tensor data");
    const std::uint64_t count = static_cast<std::uint64_t>(t.shape.numel());
    const std::uint64_t size = find_st_dtype(t.dtype_name)->bytes;
    const bool fits = count <= std::numeric_limits<std::uint64_t>::max() / size;
    if (!fits || count * size != t.end - t.begin)
      throw format_error(file, who + " has " + std::to_string(t.end - t.begin) + " bytes, shape " +
                                   to_string(t.shape) + " of " + t.dtype_name + " needs " +
                                   (fits ? std::to_string(count * size) : std::string("more than 2^64")));
    if (t.begin < at)
      throw format_error(file, who + " (data_offsets " + offsets(t) + ") overlaps tensor " +
                                   quote_name(h.tensors[i - 1].name) + " (data_offsets " +
                                   offsets(h.tensors[i - 1]) + ")");
    if (t.begin > at)
      throw format_error(file, "bytes [" + std::to_string(at) + ", " + std::to_string(t.begin) +
                                   ") of the tensor data belong to no tensor (a gap before " + who + ")");
    at = t.end;
  }
  if (at != data_size)
    throw format_error(file, "the tensors cover " + std::to_string(at) + " bytes but the file holds " +
                                 std::to_string(data_size) +
                                 " bytes of tensor data (trailing bytes after the last tensor)");
  return h;
}

KILN_RUNTIME void copy_bits(const any_tensor& dst, const any_tensor& src) {
  const std::size_t size = size_of(src.dt());
  if (dst.is_contiguous() && src.is_contiguous()) {
    const auto n = static_cast<std::size_t>(src.numel()) * size;
    if (n) std::memcpy(dst.bytes(), src.bytes(), n);
    return;
  }
  const auto step = static_cast<index_t>(size);
  for_each_index(src.shape(), [&](const index_t* idx) {
    std::memcpy(dst.bytes() + dst.offset_of(idx) * step, src.bytes() + src.offset_of(idx) * step, size);
  });
}

KILN_RUNTIME prepared prepare(const tensor_map& tensors, const metadata_map& metadata) {
  const auto bad = [](const std::string& what) { return std::invalid_argument("kiln: save_safetensors: " + what); };
  prepared p;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw bad("\"__metadata__\" is reserved and cannot name a tensor");
    if (!json::valid_utf8(name)) throw bad("tensor name " + quote_name(name) + " is not valid UTF-8");
    if (!t.defined()) throw bad("tensor " + quote_name(name) + " is undefined");
    p.order.emplace_back(&name, &t);
  }
  for (const auto& [k, v] : metadata)
    if (!json::valid_utf8(k) || !json::valid_utf8(v))
      throw bad("metadata entry " + quote_name(k) + " is not valid UTF-8");
  // Largest elements first, then by name (the reference implementation's order): with the
  // header padded to 8 bytes, every tensor then starts at a multiple of its element size.
  std::stable_sort(p.order.begin(), p.order.end(), [](const auto& a, const auto& b) {
    const std::size_t sa = size_of(a.second->dt()), sb = size_of(b.second->dt());
    return sa != sb ? sa > sb : *a.first < *b.first;
  });
  std::string& h = p.header;
  h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      json::append_quoted(h, k);
      h += ':';
      json::append_quoted(h, v);
    }
    h += '}';
  }
  std::uint64_t at = 0;
  for (const auto& [name, t] : p.order) {
    if (h.size() > 1) h += ',';
    json::append_quoted(h, *name);
    h += ":{\"dtype\":\"";
    h += st_name(t->dt());
    h += "\",\"shape\":[";
    for (int i = 0; i < t->rank(); ++i) {
      if (i) h += ',';
      h += std::to_string(t->shape().e[i]);
    }
    const std::uint64_t n = static_cast<std::uint64_t>(t->numel()) * size_of(t->dt());
    h += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + n) + "]}";
    at += n;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > safetensors_max_header)
    throw bad("the header would be " + std::to_string(h.size()) + " bytes, more than readers accept (" +
              std::to_string(safetensors_max_header) + ")");
  return p;
}

}  // namespace detail

KILN_RUNTIME safetensors_header read_safetensors_header(const std::filesystem::path& path) {
  const detail::input_file f(path);
  return detail::read_header(f);
}

KILN_RUNTIME safetensors_file load_safetensors_file(const std::filesystem::path& path) {
  const detail::input_file f(path);
  return detail::load_all(f);
}

KILN_RUNTIME tensor_map load_safetensors(const std::filesystem::path& path) {
  return load_safetensors_file(path).tensors;
}

KILN_RUNTIME metadata_map load_into(const std::filesystem::path& path, const tensor_map& dst, const load_options& opt) {
  const detail::input_file f(path);
  return detail::load_into(f, dst, opt);
}

KILN_RUNTIME safetensors_file parse_safetensors(std::span<const std::byte> bytes, std::string name) {
  return detail::load_all(detail::memory_source{bytes, std::move(name)});
}

KILN_RUNTIME safetensors_header parse_safetensors_header(std::span<const std::byte> bytes, std::string name) {
  return detail::read_header(detail::memory_source{bytes, std::move(name)});
}

KILN_RUNTIME metadata_map parse_into(std::span<const std::byte> bytes, const tensor_map& dst, const load_options& opt,
                                     std::string name) {
  return detail::load_into(detail::memory_source{bytes, std::move(name)}, dst, opt);
}

KILN_RUNTIME std::vector<std::byte> serialize_safetensors(const tensor_map& tensors, const metadata_map& metadata) {
  const detail::prepared p = detail::prepare(tensors, metadata);
  std::vector<std::byte> out;
  detail::write_file(p, [&](const void* src, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(src);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

KILN_RUNTIME void save_safetensors(const std::filesystem::path& path, const tensor_map& tensors,
                                   const metadata_map& metadata) {
  const detail::prepared p = detail::prepare(tensors, metadata);  // argument errors before any I/O
  detail::atomic_output_file f(path);
  detail::write_file(p, [&](const void* src, std::size_t n) { f.write(src, n); });
  f.commit();
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::io
