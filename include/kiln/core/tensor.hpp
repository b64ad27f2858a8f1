// kiln/core/tensor.hpp: owning tensors with 64-byte-aligned storage, and strided views.
//
// A tensor is a handle, like torch::Tensor: copying a tensor shares its storage, views (slice,
// transpose, permute, reshape) share it too, and clone() makes a deep copy. `any_tensor` is the
// dtype-erased, rank-erased form that backends work on; `tensor<T, R>` is the typed form users
// hold, with its element type and rank known at compile time so expressions can be traced.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "config.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "expr_fwd.hpp"
#include "shape.hpp"
#include "shape_rules.hpp"
#include "storage.hpp"

namespace kiln {

/// Calls f(idx) for every multi-index of `shape` in row-major order (idx is an index_t array
/// of length shape.rank). Does nothing for a shape with a zero extent.
template <class F>
void for_each_index(const dims& shape, F&& f) {
  if (shape.numel() == 0) return;
  std::array<index_t, max_rank> idx{};
  const int r = shape.rank;
  for (;;) {
    f(static_cast<const index_t*>(idx.data()));
    int d = r - 1;
    while (d >= 0 && ++idx[d] == shape.e[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

/// Tag of allocations that skip zero-filling: any_tensor(dt, shape, uninitialized).
struct uninitialized_t {
  explicit constexpr uninitialized_t() = default;
};
inline constexpr uninitialized_t uninitialized{};

namespace detail {
/// The shape `to` of a reshape of run-time shape `from`, its one dyn extent (if any) inferred;
/// checked: no negative extent, at most 2^59 elements, as many elements as `from`.
KILN_RUNTIME dims reshape_shape(const dims& from, dims to);
}  // namespace detail

class any_tensor {
 public:
  any_tensor() = default;

  /// A new contiguous tensor, zero-filled.
  KILN_RUNTIME any_tensor(dtype dt, const dims& shape);
  /// A new contiguous tensor whose elements are not initialised: for results that a kernel
  /// writes in full (zero-filling first would cost as much memory traffic again).
  KILN_RUNTIME any_tensor(dtype dt, const dims& shape, uninitialized_t);

  /// A tensor over memory kiln does not own, without a copy (a caller's buffer: a NumPy array,
  /// a C array; like torch::from_blob or Eigen::Map), usable as a feed and as an out=
  /// destination. `strides` are in elements (nullptr: contiguous) and must not be negative; a
  /// destination's elements must not overlap. `release(data, context)`, if given, is called once
  /// the last tensor or view of it is gone. Throws std::invalid_argument if `data` is null (with
  /// elements) or not aligned to the element size (kiln reads elements through typed pointers:
  /// copy such memory into a new tensor with std::memcpy first), and shape_error if the shape or
  /// the strides reach past 2^59 elements.
  KILN_RUNTIME static any_tensor from_blob(dtype dt, void* data, const dims& shape, const dims* strides = nullptr,
                                           void (*release)(void* data, void* context) = nullptr,
                                           void* context = nullptr);

  bool defined() const { return mem_ != nullptr; }
  dtype dt() const { return dt_; }
  int rank() const { return shape_.rank; }
  const dims& shape() const { return shape_; }
  const dims& strides() const { return strides_; }
  index_t offset() const { return offset_; }
  index_t numel() const { return shape_.numel(); }
  index_t size(int axis) const { return shape_.e[wrap_axis("size", axis)]; }

  bool is_contiguous() const {
    index_t expect = 1;
    for (int i = shape_.rank - 1; i >= 0; --i) {
      if (shape_.e[i] != 1 && strides_.e[i] != expect) return false;
      expect *= shape_.e[i];
    }
    return true;
  }
  /// Whether both tensors view the same allocation (possible aliasing).
  bool shares_storage(const any_tensor& o) const { return mem_ && mem_ == o.mem_; }
  /// How many tensors and views hold this one's allocation (1: this one alone; 0: none).
  long use_count() const { return mem_.use_count(); }

  /// Address of the first element (the view's origin).
  std::byte* bytes() const { return mem_.get() + offset_ * static_cast<index_t>(size_of(dt_)); }
  template <class T>
  T* data() const {
    if (dtype_of<T> != dt_) throw dtype_error("data", dtype_of<T>, dt_);
    return reinterpret_cast<T*>(bytes());
  }
  /// Element offset (from data()) of a multi-index.
  index_t offset_of(const index_t* idx) const {
    index_t o = 0;
    for (int i = 0; i < shape_.rank; ++i) o += idx[i] * strides_.e[i];
    return o;
  }

  // ---- views: share storage -------------------------------------------------------------

  /// A view of [begin, end) with a stride of `step` along one axis. Negative begin/end count
  /// from the end, `to_end` means the extent; then 0 <= begin <= end <= extent must hold.
  KILN_RUNTIME any_tensor slice(int axis, index_t begin, index_t end, index_t step = 1) const;

  /// Reorders axes: result axis i is this tensor's axis perm[i].
  KILN_RUNTIME any_tensor permute(const int* perm, int n) const;
  any_tensor permute(std::initializer_list<int> perm) const {
    return permute(perm.begin(), static_cast<int>(perm.size()));
  }

  KILN_RUNTIME any_tensor transpose(int a, int b) const;

  /// A view with a new shape; one extent may be `dyn` and is inferred. The tensor must be
  /// contiguous (call contiguous() first otherwise), so a reshape never copies silently.
  KILN_RUNTIME any_tensor reshape(dims to) const;

  // ---- copies --------------------------------------------------------------------------

  /// A deep copy, contiguous.
  KILN_RUNTIME any_tensor clone() const;
  /// This tensor if contiguous, else a contiguous copy.
  any_tensor contiguous() const { return is_contiguous() ? *this : clone(); }

  /// Copies src's elements into this tensor's elements (through both views' strides),
  /// converting the dtype (same dtype: the bits as they are, so a bf16 signalling NaN stays
  /// one). Shapes must be equal. Safe when src and *this overlap.
  KILN_RUNTIME void copy_from(const any_tensor& src) const;

  /// Converts one stored element to dtype D's storage type (through compute types). Floating
  /// point to integer truncates toward zero, saturates out of range and maps NaN to 0 (where
  /// C++ leaves the behaviour undefined).
  template <dtype D, class From>
  static storage_t<D> convert(From x) {
    using To = storage_t<D>;
    if constexpr (std::is_same_v<From, bfloat16>) {
      return convert<D>(static_cast<float>(x));
    } else if constexpr (D == dtype::boolean) {
      return x != From{};
    } else if constexpr (D == dtype::bf16) {
      return bfloat16(static_cast<float>(x));
    } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
      if (x != x) return 0;
      if (x <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
      if (x >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
      return static_cast<To>(x);
    } else {
      return static_cast<To>(x);
    }
  }

 private:
  /// Bytes of the allocation: the elements rounded up to the alignment (at least one unit).
  std::size_t padded_bytes() const {
    const std::size_t bytes = static_cast<std::size_t>(shape_.numel()) * size_of(dt_);
    const std::size_t padded = (bytes + storage_alignment - 1) / storage_alignment * storage_alignment;
    return padded ? padded : storage_alignment;
  }
  KILN_RUNTIME int wrap_axis(const char* op, int axis) const;
  /// The shape of a new tensor, checked before anything is computed from it (strides, bytes).
  KILN_RUNTIME static const dims& allocatable(const dims& shape);

  dtype dt_ = dtype::f32;
  std::shared_ptr<std::byte> mem_;
  dims shape_{}, strides_{};
  index_t offset_ = 0;  // in elements
};

/// A typed tensor handle of rank R with element type T (see the top of this file).
template <class T, int R>
class tensor {
  static_assert(is_element_v<T>, "kiln::tensor: element type must be bool, int32_t, int64_t, bfloat16, float or double");
  static_assert(R >= 0 && R <= max_rank, "kiln::tensor: rank must be in [0, kiln::max_rank]");

 public:
  using value_type = T;
  static constexpr int rank = R;
  static constexpr dtype dt = dtype_of<T>;
  using extents = std::array<index_t, R>;

  /// An undefined tensor (no storage); assigning an expression to it allocates.
  tensor() = default;
  /// A new zero-filled tensor.
  explicit tensor(const extents& shape) : t_(dt, dims(shape)) {}
  /// The same from a braced list, `tensor<float, 2> t({2, 3})` or `tensor<float, 0> s({})` (an
  /// exact match, so `{}` does not also fit the copy, move and any_tensor constructors).
  explicit tensor(std::initializer_list<index_t> shape) : t_(dt, extents_of(shape)) {}
  /// A new tensor with the given values in row-major order.
  tensor(const extents& shape, std::initializer_list<T> values) : t_(dt, dims(shape)) {
    if (static_cast<index_t>(values.size()) != t_.numel())
      throw shape_error("tensor", dims(shape), dims{static_cast<index_t>(values.size())},
                        "disagree: the values do not fill the shape");
    std::copy(values.begin(), values.end(), data());
  }
  /// Wraps a dtype-erased tensor, checking its dtype and rank.
  template <class A>
    requires std::same_as<std::remove_cvref_t<A>, any_tensor>  // (deduced: `{}` cannot pick it)
  explicit tensor(A&& t) : t_(std::forward<A>(t)) {
    if (t_.dt() != dt) throw dtype_error("tensor", dt, t_.dt());
    if (t_.rank() != R) throw shape_error("tensor", t_.shape(), "does not have rank " + std::to_string(R));
  }
  /// Evaluates an expression into a new tensor.
  template <expression E>
  tensor(const E& e) {  // NOLINT: implicit, `tensor c = a + b;`
    evaluator<E>::into(checked(e), t_);
  }

  tensor(const tensor&) = default;
  tensor(tensor&&) noexcept = default;
  /// Assigning a tensor to a named tensor rebinds the handle (as in libtorch) ...
  tensor& operator=(const tensor&) & = default;
  tensor& operator=(tensor&&) & noexcept = default;
  /// ... while assigning to a temporary view writes elements: `a.slice(0, 0, 2) = b;`.
  tensor& operator=(const tensor& o) && {
    t_.copy_from(o.t_);
    return *this;
  }
  /// Evaluates an expression into this tensor's elements (shapes must match exactly), or into
  /// new storage if this tensor is undefined; the kernels write the destination directly (it
  /// may be a strided view). Reading and writing the same storage is safe: `a = transpose(a) +
  /// a` is computed into fresh memory before it is written.
  template <expression E>
  tensor& operator=(const E& e) & {
    evaluator<E>::into(checked(e), t_);
    return *this;
  }
  template <expression E>
  tensor& operator=(const E& e) && {
    evaluator<E>::into(checked(e), t_);
    return *this;
  }

  bool defined() const { return t_.defined(); }
  const any_tensor& any() const { return t_; }
  operator const any_tensor&() const { return t_; }  // NOLINT: binds where any_tensor is wanted

  index_t size(int axis) const { return t_.size(axis); }
  extents shape() const { return to_extents(t_.shape()); }
  extents strides() const { return to_extents(t_.strides()); }
  index_t numel() const { return t_.numel(); }
  bool is_contiguous() const { return t_.is_contiguous(); }
  T* data() const { return reinterpret_cast<T*>(t_.bytes()); }

  /// Unchecked element access (a handle's constness does not make its elements const).
  template <class... I>
    requires(sizeof...(I) == R && (std::is_integral_v<I> && ...))
  T& operator()(I... i) const {
    const index_t idx[R > 0 ? R : 1]{static_cast<index_t>(i)...};
    return data()[t_.offset_of(idx)];
  }
  /// Bounds-checked element access; throws std::out_of_range.
  template <class... I>
    requires(sizeof...(I) == R && (std::is_integral_v<I> && ...))
  T& at(I... i) const {
    const index_t idx[R > 0 ? R : 1]{static_cast<index_t>(i)...};
    for (int d = 0; d < R; ++d)
      if (idx[d] < 0 || idx[d] >= t_.shape().e[d])
        throw std::out_of_range("kiln: at: index " + std::to_string(idx[d]) + " out of range for axis " +
                                std::to_string(d) + " of shape " + to_string(t_.shape()));
    return data()[t_.offset_of(idx)];
  }

  tensor slice(int axis, index_t begin, index_t end, index_t step = 1) const {
    return tensor(t_.slice(axis, begin, end, step));
  }
  tensor transpose(int a = R - 2, int b = R - 1) const { return tensor(t_.transpose(a, b)); }
  tensor permute(const std::array<int, R>& p) const { return tensor(t_.permute(p.data(), R)); }
  template <int R2>
  tensor<T, R2> reshape(const std::array<index_t, R2>& to) const {
    return tensor<T, R2>(t_.reshape(dims(to)));
  }
  tensor contiguous() const { return tensor(t_.contiguous()); }
  tensor clone() const { return tensor(t_.clone()); }

  /// Copies (converting dtype) src's elements into this tensor, or adopts src if this tensor is
  /// undefined. Throws shape_error if the shapes differ.
  void assign(const any_tensor& src) {
    if (!t_.defined()) {
      *this = tensor(src.dt() == dt ? src : convert_copy(src));
      return;
    }
    t_.copy_from(src);
  }

 private:
  static dims extents_of(std::initializer_list<index_t> shape) {
    if (static_cast<int>(shape.size()) != R)
      throw std::invalid_argument("kiln: tensor: a shape of " + std::to_string(shape.size()) +
                                  " extents for a tensor of rank " + std::to_string(R));
    return dims(shape);
  }
  static extents to_extents(const dims& d) {
    extents e{};
    for (int i = 0; i < R; ++i) e[i] = d.e[i];
    return e;
  }
  /// Compile-time checks of an expression assigned to this tensor type.
  template <class E>
  static const E& checked(const E& e) {
    static_assert(E::shape.rank < 0 || E::shape.rank == R,
                  "kiln: tensor<T, R> = expression: the expression's rank is not R");
    static_assert(E::shape.rank < 0 || E::dt == dt,
                  "kiln: tensor<T, R> = expression: the expression's dtype is not T's; use kiln::cast<dtype>(...)");
    return e;
  }
  static any_tensor convert_copy(const any_tensor& src) {
    any_tensor r(dt, src.shape());
    r.copy_from(src);
    return r;
  }

  any_tensor t_;
};

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME any_tensor::any_tensor(dtype dt, const dims& shape) : any_tensor(dt, shape, uninitialized) {
  std::memset(mem_.get(), 0, padded_bytes());
}

KILN_RUNTIME any_tensor::any_tensor(dtype dt, const dims& shape, uninitialized_t)
    : dt_(dt), shape_(allocatable(shape)), strides_(contiguous_strides(shape)) {
  // storage from kiln's cache of large freed blocks (core/storage.hpp)
  auto& cache = detail::storage_cache::get();
  const std::size_t size = detail::storage_cache::rounded_size(padded_bytes());
  // (if making the control block throws, shared_ptr calls the deleter itself)
  mem_ = std::shared_ptr<std::byte>(cache.allocate(size),
                                    [size](std::byte* q) { detail::storage_cache::get().release(q, size); });
}

KILN_RUNTIME any_tensor any_tensor::from_blob(dtype dt, void* data, const dims& shape, const dims* strides,
                                              void (*release)(void*, void*), void* context) {
  any_tensor t;
  t.dt_ = dt;
  t.shape_ = allocatable(shape);
  t.strides_ = strides ? *strides : contiguous_strides(shape);
  if (t.strides_.rank != shape.rank)
    throw shape_error("from_blob", shape, t.strides_, "differ in rank (shape, strides)");
  // the farthest element's offset, checked as a shape's element count is (2^59)
  index_t last = 0;
  bool empty = false;
  for (int i = 0; i < shape.rank; ++i) {
    if (t.strides_.e[i] < 0) throw shape_error("from_blob", shape, t.strides_, "need strides that are not negative");
    empty = empty || shape.e[i] == 0;
    if (shape.e[i] > 1 && (t.strides_.e[i] > max_elements / (shape.e[i] - 1) ||
                           last > max_elements - (shape.e[i] - 1) * t.strides_.e[i]))
      throw shape_error("from_blob", shape, t.strides_, "reach past 2^59 elements (shape, strides)");
    if (shape.e[i] > 1) last += (shape.e[i] - 1) * t.strides_.e[i];
  }
  const std::size_t size = size_of(dt);
  if (!data && !empty) throw std::invalid_argument("kiln: from_blob: null data for a tensor of shape " + to_string(shape));
  if (reinterpret_cast<std::uintptr_t>(data) % size != 0)
    throw std::invalid_argument("kiln: from_blob: data is not aligned to " + std::to_string(size) + " bytes (" +
                                std::string(name(dt)) + "): copy it into a new tensor first");
  // (a tensor without elements may have no data: it still needs an address to be defined)
  alignas(storage_alignment) static std::byte nothing[storage_alignment];
  std::byte* p = data ? static_cast<std::byte*>(data) : nothing;
  if (release) t.mem_ = std::shared_ptr<std::byte>(p, [release, context, data](std::byte*) { release(data, context); });
  else t.mem_ = std::shared_ptr<std::byte>(p, [](std::byte*) {});
  return t;
}

KILN_RUNTIME any_tensor any_tensor::slice(int axis, index_t begin, index_t end, index_t step) const {
  const int a = wrap_axis("slice", axis);
  const slice_bounds s = resolve_slice(shape_.e[a], begin, end, step);
  if (!s.ok)
    throw shape_error("slice", shape_,
                      "cannot be sliced on axis " + std::to_string(axis) + " from " + std::to_string(begin) + " to " +
                          (end == to_end ? std::string("end") : std::to_string(end)) + " by " + std::to_string(step));
  any_tensor v = *this;
  v.shape_.e[a] = slice_extent(s.begin, s.end, step);
  v.offset_ += s.begin * strides_.e[a];
  // with one element or none the stride never steps (a step beyond the extent would overflow it);
  // with more, stride * step is at most stride * extent, an offset within the storage
  if (v.shape_.e[a] > 1) v.strides_.e[a] *= step;
  return v;
}

KILN_RUNTIME any_tensor any_tensor::permute(const int* perm, int n) const {
  if (n != shape_.rank) throw shape_error("permute", shape_, "needs one entry per axis in the permutation");
  any_tensor v = *this;
  bool seen[max_rank]{};
  for (int i = 0; i < n; ++i) {
    const int p = wrap_axis("permute", perm[i]);
    if (seen[p]) throw shape_error("permute", shape_, "got a permutation that repeats an axis");
    seen[p] = true;
    v.shape_.e[i] = shape_.e[p];
    v.strides_.e[i] = strides_.e[p];
  }
  return v;
}

KILN_RUNTIME any_tensor any_tensor::transpose(int a, int b) const {
  a = wrap_axis("transpose", a);
  b = wrap_axis("transpose", b);
  any_tensor v = *this;
  std::swap(v.shape_.e[a], v.shape_.e[b]);
  std::swap(v.strides_.e[a], v.strides_.e[b]);
  return v;
}

KILN_RUNTIME any_tensor any_tensor::reshape(dims to) const {
  to = detail::reshape_shape(shape_, to);
  if (!is_contiguous()) throw shape_error("reshape", shape_, to, "need a contiguous source: call contiguous() first");
  any_tensor v = *this;
  v.shape_ = to;
  v.strides_ = contiguous_strides(to);
  return v;
}

KILN_RUNTIME dims detail::reshape_shape(const dims& from, dims to) {
  int infer = -1;
  bool zero = false;
  index_t known = 1;  // the product of the given non-zero extents, bounded as countable() bounds it
  for (int i = 0; i < to.rank; ++i) {
    const index_t x = to.e[i];
    if (x == dyn) {
      if (infer >= 0) throw shape_error("reshape", from, to, "are incompatible: more than one inferred extent");
      infer = i;
    } else if (x < 0) {
      throw shape_error("reshape", from, to, "are incompatible: negative extent");
    } else if (x == 0) {
      zero = true;
    } else if (known > max_elements / x) {
      throw shape_error("reshape", from, to, "are incompatible: the target has more than 2^59 elements");
    } else {
      known *= x;
    }
  }
  const index_t n = from.numel();  // a run-time shape: countable
  if (infer >= 0) {
    if (zero || n % known != 0) throw shape_error("reshape", from, to, "are incompatible: cannot infer the dynamic extent");
    to.e[infer] = n / known;
  }
  if (to.numel() != n) throw shape_error("reshape", from, to, "have different element counts");
  return to;
}

KILN_RUNTIME any_tensor any_tensor::clone() const {
  any_tensor r(dt_, shape_);
  r.copy_from(*this);
  return r;
}

KILN_RUNTIME void any_tensor::copy_from(const any_tensor& src) const {
  if (!(src.shape_ == shape_)) throw shape_error("assign", shape_, src.shape_, "differ");
  const bool same_view = src.bytes() == bytes() && src.strides_ == strides_;
  const any_tensor s = src.shares_storage(*this) && !same_view ? src.clone() : src;
  visit(dt_, [&]<dtype D>() {
    visit(s.dt_, [&]<dtype S>() {
      auto* out = reinterpret_cast<storage_t<D>*>(bytes());
      const auto* in = reinterpret_cast<const storage_t<S>*>(s.bytes());
      for_each_index(shape_, [&](const index_t* idx) {
        if constexpr (D == S) out[offset_of(idx)] = in[s.offset_of(idx)];  // bits as they are
        else out[offset_of(idx)] = convert<D>(in[s.offset_of(idx)]);
      });
    });
  });
}

KILN_RUNTIME const dims& any_tensor::allocatable(const dims& shape) {
  for (int i = 0; i < shape.rank; ++i)
    if (shape.e[i] < 0) throw shape_error("tensor", shape, "has a negative or dynamic extent");
  if (!countable(shape)) throw shape_error("tensor", shape, "has more than 2^59 elements");
  return shape;
}

KILN_RUNTIME int any_tensor::wrap_axis(const char* op, int axis) const {
  const int a = axis < 0 ? axis + shape_.rank : axis;
  if (a < 0 || a >= shape_.rank) throw shape_error(op, shape_, "has no axis " + std::to_string(axis));
  return a;
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
