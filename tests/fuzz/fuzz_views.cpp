// libFuzzer target for tensor shapes and views: each input is a program of view operations
// (slice, transpose, permute, reshape, clone, contiguous, copy_from) with arguments that are
// often extreme (negative, 2^62, INT64_MIN), on a small tensor of any dtype. An operation may
// refuse its arguments with std::invalid_argument (shape_error) or std::out_of_range; anything
// else is a finding. After every accepted operation the view must stay inside its allocation
// (every element's offset checked), its element count must be its shape's, and copies must hold
// the view's elements.
#include <kiln/core/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

using namespace kiln;

namespace {

struct program {
  const std::uint8_t* p;
  std::size_t n, at = 0;
  std::uint8_t byte() { return at < n ? p[at++] : 0; }
  bool done() const { return at >= n; }
  /// An extent or index: mostly small, sometimes at or past the limits of index_t.
  index_t value() {
    const std::uint8_t b = byte();
    if (b < 160) return static_cast<index_t>(b % 12) - 3;  // -3 .. 8
    switch (b % 8) {
      case 0: return std::numeric_limits<index_t>::max();
      case 1: return std::numeric_limits<index_t>::min();
      case 2: return index_t{1} << 62;
      case 3: return (index_t{1} << 31) + byte();
      case 4: return max_elements + byte() - 128;
      case 5: return dyn;
      case 6: return to_end;
      default: {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
        return static_cast<index_t>(v);
      }
    }
  }
  int axis() { return static_cast<int>(static_cast<std::int8_t>(byte())) % 12; }
};

[[noreturn]] void finding() { __builtin_trap(); }

/// The element offsets of `v` (from the allocation's start) are all inside [0, total); calls
/// f(offset, flat index) for each, in row-major order.
template <class F>
void each_element(const any_tensor& v, const std::byte* base, index_t total, F&& f) {
  if (v.numel() == 0) return;
  const auto size = static_cast<index_t>(size_of(v.dt()));
  const index_t origin = (v.bytes() - base) / size;
  index_t idx[max_rank]{};
  for (index_t flat = 0;; ++flat) {
    const index_t at = origin + v.offset_of(idx);
    if (at < 0 || at >= total) finding();  // outside the allocation
    f(at, flat);
    int a = v.rank() - 1;
    for (; a >= 0; --a) {
      if (++idx[a] < v.shape().e[a]) break;
      idx[a] = 0;
    }
    if (a < 0) return;
  }
}

bool same_elements(const any_tensor& v, const std::byte* base, index_t total, const any_tensor& copy) {
  if (!(copy.shape() == v.shape()) || copy.dt() != v.dt() || !copy.is_contiguous()) return false;
  const std::size_t size = size_of(v.dt());
  bool same = true;
  each_element(v, base, total, [&](index_t at, index_t flat) {
    same = same && std::memcmp(base + at * static_cast<index_t>(size), copy.bytes() + flat * static_cast<index_t>(size), size) == 0;
  });
  return same;
}

void run(program& in) {
  const dtype types[] = {dtype::boolean, dtype::i32, dtype::i64, dtype::bf16, dtype::f32, dtype::f64};
  const dtype dt = types[in.byte() % 6];
  dims shape;
  shape.rank = in.byte() % (max_rank + 1);
  index_t count = 1;
  for (int i = 0; i < shape.rank; ++i) {
    shape.e[i] = in.byte() % 6;
    if (count * shape.e[i] > 1024) shape.e[i] = 1;  // small: every element is checked after each step
    count *= shape.e[i];
  }
  any_tensor root(dt, shape);
  const std::size_t size = size_of(dt);
  for (index_t i = 0; i < count; ++i)  // distinct bytes per element, valid for every dtype (bool: 0 or 1)
    for (std::size_t b = 0; b < size; ++b)
      root.bytes()[static_cast<std::size_t>(i) * size + b] = std::byte(dt == dtype::boolean ? i & 1 : (i * 7 + static_cast<index_t>(b)) & 0x7f);
  std::byte* base = root.bytes();
  index_t total = count;
  any_tensor v = root;
  for (int step = 0; step < 24 && !in.done(); ++step) {
    try {
      switch (in.byte() % 8) {
        case 0: {
          const int a = in.axis();
          const index_t b = in.value(), e = in.value(), s = in.value();
          v = v.slice(a, b, e, s);
          break;
        }
        case 1: {
          const int a = in.axis();
          v = v.transpose(a, in.axis());
          break;
        }
        case 2: {
          int perm[max_rank + 2];
          const int n = in.byte() % (max_rank + 2);
          for (int i = 0; i < n; ++i) perm[i] = in.axis();
          v = v.permute(perm, n);
          break;
        }
        case 3: {
          dims to;
          to.rank = in.byte() % (max_rank + 1);
          for (int i = 0; i < to.rank; ++i) to.e[i] = in.value();
          const any_tensor r = v.reshape(to);
          if (r.numel() != v.numel() || !r.is_contiguous()) finding();
          v = r;
          break;
        }
        case 4: case 5: {  // a copy, which becomes the allocation the next views are of
          const any_tensor c = in.byte() & 1 ? v.clone() : v.contiguous();
          if (!same_elements(v, base, total, c)) finding();
          v = c;
          base = v.bytes();
          total = v.numel();
          break;
        }
        case 6: {  // copy into a new tensor, from a view of the same allocation, of the same shape
          any_tensor w = v;
          if (v.rank() >= 2 && v.shape().e[0] == v.shape().e[1]) w = v.transpose(0, 1);
          const any_tensor want = w.clone();
          v.copy_from(w);  // may overlap itself
          if (!same_elements(v, base, total, want)) finding();
          break;
        }
        default: {  // a fresh tensor of the view's shape, and a copy into it of another dtype
          const dtype to = types[in.byte() % 6];
          if (v.numel() > 4096) break;
          any_tensor c(to, v.shape());
          c.copy_from(v);
          if (to == dt && !same_elements(v, base, total, c)) finding();
          break;
        }
      }
    } catch (const std::invalid_argument&) {  // shape_error, dtype_error: refused, nothing changed
    } catch (const std::out_of_range&) {
    }
    index_t n = 1;
    for (int i = 0; i < v.rank(); ++i) {
      if (v.shape().e[i] < 0) finding();
      n *= v.shape().e[i];
    }
    if (n != v.numel() || v.numel() > total) finding();
    each_element(v, base, total, [](index_t, index_t) {});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  program in{data, size};
  run(in);
  return 0;
}
