// kiln/core/cvec.hpp: a growable array for code that runs in constant evaluation.
//
// The passes run inside the compiler, where clang stops a constant evaluation after 1,048,576
// steps (a step is about one statement) and g++ after 2^25 operations. libstdc++'s std::vector
// is written for run time: a push_back costs about 90 steps there, filling a vector of n ints
// about 20 steps an element. cvec does the same jobs in a few steps, which is what lets graphs
// of thousands of nodes through the pipeline with default limits. It works at run time too.
// Elements must be default-constructible and assignable.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>

namespace kiln {

template <class T>
class cvec {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;

  constexpr cvec() = default;
  constexpr cvec(std::size_t n, const T& v) { assign(n, v); }
  constexpr explicit cvec(std::size_t n) { assign(n, T{}); }
  constexpr cvec(std::initializer_list<T> l) { assign(l.begin(), l.end()); }
  template <class It>
  constexpr cvec(It first, It last) {
    assign(first, last);
  }
  constexpr cvec(const cvec& o) { assign(o.begin(), o.end()); }
  constexpr cvec(cvec&& o) noexcept : p_(o.p_), n_(o.n_), cap_(o.cap_) {
    o.p_ = nullptr;
    o.n_ = o.cap_ = 0;
  }
  // No `this != &o` tests: g++ with ASan rejects comparing addresses of distinct objects in
  // constant evaluation. Self-copy copies each element onto itself; self-move empties.
  constexpr cvec& operator=(const cvec& o) {
    assign(o.begin(), o.end());
    return *this;
  }
  constexpr cvec& operator=(cvec&& o) noexcept {
    T* old = p_;
    p_ = o.p_;
    n_ = o.n_;
    cap_ = o.cap_;
    o.p_ = nullptr;
    o.n_ = o.cap_ = 0;
    delete[] old;
    return *this;
  }
  constexpr cvec& operator=(std::initializer_list<T> l) {
    assign(l.begin(), l.end());
    return *this;
  }
  constexpr ~cvec() { delete[] p_; }

  constexpr void reserve(std::size_t c) {
    if (c <= cap_) return;
    T* q = new T[c];
    if constexpr (std::is_trivially_copyable_v<T>) {  // no std::move call per element (a step each)
      for (std::size_t i = 0; i < n_; ++i) q[i] = p_[i];
    } else {
      for (std::size_t i = 0; i < n_; ++i) q[i] = std::move(p_[i]);
    }
    delete[] p_;
    p_ = q;
    cap_ = c;
  }
  constexpr void assign(std::size_t n, const T& v) {
    n_ = 0;
    reserve(n);
    for (std::size_t i = 0; i < n; ++i) p_[i] = v;
    n_ = n;
  }
  template <class It>
  constexpr void assign(It first, It last) {
    n_ = 0;
    reserve(static_cast<std::size_t>(last - first));
    for (; first != last; ++first) p_[n_++] = *first;
  }
  constexpr void resize(std::size_t n) {
    reserve(n);
    for (std::size_t i = n_; i < n; ++i) p_[i] = T{};
    n_ = n;
  }
  constexpr void push_back(const T& v) {
    if (n_ == cap_) grow();
    p_[n_++] = v;
  }
  constexpr void push_back(T&& v) {
    if (n_ == cap_) grow();
    p_[n_++] = std::move(v);
  }
  template <class... A>
  constexpr T& emplace_back(A&&... a) {
    push_back(T{std::forward<A>(a)...});
    return p_[n_ - 1];
  }
  constexpr void pop_back() { --n_; }  // the element stays constructed until reused or freed
  constexpr void clear() { n_ = 0; }

  constexpr std::size_t size() const { return n_; }
  constexpr bool empty() const { return n_ == 0; }
  constexpr T& operator[](std::size_t i) { return p_[i]; }
  constexpr const T& operator[](std::size_t i) const { return p_[i]; }
  constexpr T& back() { return p_[n_ - 1]; }
  constexpr const T& back() const { return p_[n_ - 1]; }
  constexpr T* data() { return p_; }
  constexpr const T* data() const { return p_; }
  constexpr T* begin() { return p_; }
  constexpr T* end() { return p_ + n_; }
  constexpr const T* begin() const { return p_; }
  constexpr const T* end() const { return p_ + n_; }

 private:
  constexpr void grow() { reserve(cap_ ? 2 * cap_ : 8); }

  T* p_ = nullptr;
  std::size_t n_ = 0, cap_ = 0;
};

}  // namespace kiln
