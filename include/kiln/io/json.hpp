// kiln/io/json.hpp: a small, strict JSON reader and string writer for file headers (safetensors).
//
// Files come from anywhere, so the reader trusts nothing: it accepts exactly RFC 8259 JSON
// (no comments, trailing commas, single quotes, NaN or leading zeros), rejects unpaired UTF-16
// surrogates in \u escapes as serde_json does, rejects duplicate keys, and bounds nesting depth
// so that a hostile header cannot exhaust the stack. Integers are kept exactly (64-bit magnitude
// and a sign); other numbers (fractions, exponents, huge values) are parsed for syntax only and
// kept as `number`, since no header field kiln reads is a float. Input must already be valid
// UTF-8 (check with valid_utf8 first); bytes above 0x7f inside strings are copied as they are.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../core/config.hpp"

namespace kiln::io::json {

enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };

struct value {
  kind k = kind::null;
  bool b = false;              // boolean
  bool negative = false;       // integer: sign ...
  std::uint64_t magnitude = 0; // ... and magnitude
  std::string s;               // string
  std::vector<std::string> keys;  // object: keys, in file order (items holds their values)
  std::vector<value> items;       // array elements, or object values

  /// The member named `key` of an object, or nullptr.
  const value* find(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &items[i];
    return nullptr;
  }
  bool is_unsigned() const { return k == kind::integer && (!negative || magnitude == 0); }
};

/// A syntax error at byte `offset` of the parsed text.
class parse_error : public std::runtime_error {
 public:
  KILN_RUNTIME parse_error(std::size_t offset, const std::string& what);
  std::size_t offset() const noexcept { return offset_; }

 private:
  std::size_t offset_;
};

/// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF),
/// as Rust's str::from_utf8 requires of a safetensors header. Returns the offset of the first bad
/// byte, or s.size() if all is well.
KILN_RUNTIME std::size_t first_invalid_utf8(std::string_view s);
inline bool valid_utf8(std::string_view s) { return first_invalid_utf8(s) == s.size(); }

/// A pull reader over one JSON document: the caller asks for the value it expects next, so a
/// reader of a known schema builds only the fields it keeps and skips the rest without building
/// it (what bounds a header reader's memory by its input: a DOM node costs about 130 bytes, a
/// skipped `0,` nothing). Every method throws parse_error at the first byte that is not JSON.
class reader {
 public:
  explicit reader(std::string_view in, int max_depth = 64) : in_(in), max_depth_(max_depth) {}

  /// The kind of the next value (a number is `integer` until read), skipping whitespace.
  kind next() {
    skip_ws();
    if (at_end()) fail("unexpected end of input, expected a value");
    switch (in_[pos_]) {
      case '{': return kind::object;
      case '[': return kind::array;
      case '"': return kind::string;
      case 't': case 'f': return kind::boolean;
      case 'n': return kind::null;
      default: break;
    }
    if (in_[pos_] == '-' || digit(in_[pos_])) return kind::integer;
    fail(std::string("unexpected character '") + printable(in_[pos_]) + "', expected a value");
  }

  /// Enters an object (the next value must be one); then next_key() until it returns false.
  void begin_object() { open('{'); }
  /// The next member's key (its value follows: read or skip it), or false at the object's end.
  bool next_key(std::string& key) {
    if (!next_in('}', "',' or '}' in an object")) return false;
    skip_ws();
    if (peek() != '"' || at_end()) fail("expected a string key");
    key = parse_string();
    skip_ws();
    if (peek() != ':' || at_end()) fail("expected ':' after an object key");
    ++pos_;
    return true;
  }
  /// Enters an array; then next_item() until it returns false, reading or skipping each value.
  void begin_array() { open('['); }
  bool next_item() { return next_in(']', "',' or ']' in an array"); }

  std::string read_string() {
    if (next() != kind::string) fail("expected a string");
    return parse_string();
  }
  /// A number (kind integer, or number when it has a fraction, an exponent or is too large),
  /// true, false or null.
  value read_scalar() {
    value v;
    const kind k = next();
    if (k == kind::integer) return parse_number();
    if (literal("true")) v.k = kind::boolean, v.b = true;
    else if (literal("false")) v.k = kind::boolean;
    else if (literal("null")) v.k = kind::null;
    else if (k == kind::string || k == kind::object || k == kind::array) fail("expected a number, true, false or null");
    else fail(std::string("unexpected character '") + printable(in_[pos_]) + "', expected a value");
    return v;
  }
  /// Checks the next value, of any kind, and builds nothing of it (but its objects' keys, to
  /// reject duplicates).
  void skip() {
    switch (next()) {
      case kind::object: {
        begin_object();
        std::vector<std::string> keys;
        std::string key;
        while (next_key(key)) {
          keys.push_back(std::move(key));
          skip();
        }
        check_unique({keys.begin(), keys.end()});
        return;
      }
      case kind::array:
        begin_array();
        while (next_item()) skip();
        return;
      case kind::string: parse_string(); return;
      default: read_scalar(); return;
    }
  }
  /// The end of the document: only whitespace may follow.
  void finish() {
    skip_ws();
    if (pos_ != in_.size()) fail("unexpected data after the JSON value");
  }

  /// Throws parse_error if two of `keys` are equal (O(n log n): a header may hold a million).
  void check_unique(std::vector<std::string_view> sorted) const {
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) fail("duplicate key \"" + std::string(*dup) + "\" in an object");
  }
  [[noreturn]] void fail(const std::string& what) const { throw parse_error(pos_, what); }
  std::size_t offset() const { return pos_; }

 private:
  bool at_end() const { return pos_ >= in_.size(); }
  char peek() const { return at_end() ? '\0' : in_[pos_]; }

  void skip_ws() {
    while (!at_end() && (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r')) ++pos_;
  }

  void open(char c) {
    if (next() != (c == '{' ? kind::object : kind::array)) fail(c == '{' ? "expected an object" : "expected an array");
    if (static_cast<int>(first_.size()) >= max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
    ++pos_;
    first_.push_back(true);
  }
  // Past the comma before the next element of the innermost container: true if one follows,
  // false (and the container closed) at `close`.
  bool next_in(char close, const char* expected) {
    skip_ws();
    const bool first = first_.back();
    first_.back() = false;
    if (peek() == close && !at_end() && first) {
      ++pos_;
      first_.pop_back();
      return false;
    }
    if (first) return true;
    if (peek() == ',' && !at_end()) {
      ++pos_;
      return true;
    }
    if (peek() != close || at_end()) fail(std::string("expected ") + expected);
    ++pos_;
    first_.pop_back();
    return false;
  }

  bool literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  value parse_number() {
    value v;
    v.k = kind::integer;
    if (peek() == '-') {
      v.negative = true;
      ++pos_;
    }
    if (at_end() || !digit(in_[pos_])) fail("expected a digit");
    if (in_[pos_] == '0' && pos_ + 1 < in_.size() && digit(in_[pos_ + 1])) fail("leading zeros are not allowed");
    while (!at_end() && digit(in_[pos_])) {
      const unsigned d = static_cast<unsigned>(in_[pos_] - '0');
      if (v.magnitude > (UINT64_MAX - d) / 10) v.k = kind::number;  // too large to keep exactly
      else v.magnitude = v.magnitude * 10 + d;
      ++pos_;
    }
    if (peek() == '.' && !at_end()) {
      ++pos_;
      if (at_end() || !digit(in_[pos_])) fail("expected a digit after '.'");
      while (!at_end() && digit(in_[pos_])) ++pos_;
      v.k = kind::number;
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (at_end() || !digit(in_[pos_])) fail("expected a digit in the exponent");
      while (!at_end() && digit(in_[pos_])) ++pos_;
      v.k = kind::number;
    }
    if (v.k == kind::number) v.negative = false, v.magnitude = 0;
    return v;
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  unsigned hex4() {
    if (in_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = in_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9') u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = in_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (must be escaped)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape");
      const char e = in_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("unpaired low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (in_.substr(pos_, 2) != "\\u") fail("unpaired high surrogate in a \\u escape");
            pos_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("unpaired high surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail(std::string("unknown escape '\\") + printable(e) + "'");
      }
    }
  }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    const char* hex = "0123456789abcdef";
    return std::string("\\x") + hex[u >> 4] + hex[u & 15];
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  int max_depth_;
  std::vector<bool> first_;  // per open container: no element read yet
};

/// Parses one JSON document (surrounding whitespace allowed) into a tree. Throws parse_error. For
/// input from outside, prefer a reader that skips what it does not keep: the tree costs about
/// 130 bytes per value, 65 times a document of `[0,0,...]`.
KILN_RUNTIME value parse(std::string_view text, int max_depth = 64);

/// Appends `s` to `out` as a JSON string literal. `s` must be valid UTF-8; control characters
/// are escaped, everything else above 0x7f is written as is (as serde_json does).
KILN_RUNTIME void append_quoted(std::string& out, std::string_view s);

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME parse_error::parse_error(std::size_t offset, const std::string& what)
    : std::runtime_error("byte " + std::to_string(offset) + ": " + what), offset_(offset) {}

KILN_RUNTIME std::size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) len = 3, lo = 0xa0;
    else if (c == 0xed) len = 3, hi = 0x9f;  // excludes surrogates U+D800..U+DFFF
    else if (c >= 0xe1 && c <= 0xef) len = 3;
    else if (c == 0xf0) len = 4, lo = 0x90;
    else if (c == 0xf4) len = 4, hi = 0x8f;  // nothing above U+10FFFF
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    else return i;
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return n;
}

namespace detail {
KILN_RUNTIME value read_value(reader& r) {
  value v;
  switch (r.next()) {
    case kind::object: {
      v.k = kind::object;
      r.begin_object();
      std::string key;
      while (r.next_key(key)) {
        v.keys.push_back(std::move(key));
        v.items.push_back(read_value(r));
      }
      r.check_unique({v.keys.begin(), v.keys.end()});
      return v;
    }
    case kind::array:
      v.k = kind::array;
      r.begin_array();
      while (r.next_item()) v.items.push_back(read_value(r));
      return v;
    case kind::string:
      v.k = kind::string;
      v.s = r.read_string();
      return v;
    default: return r.read_scalar();
  }
}
}  // namespace detail

KILN_RUNTIME value parse(std::string_view text, int max_depth) {
  reader r(text, max_depth);
  value v = detail::read_value(r);
  r.finish();
  return v;
}

KILN_RUNTIME void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[u >> 4];
          out += hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::io::json
