// The CPU backend's GEMM against a plain triple loop in double: odd sizes around the vector
// width and the cache blocks, transposed and strided operands, batches with broadcast
// operands, epilogues (each element once, after its final sum), 1 vs 2 threads bitwise equal,
// and the double, bf16, int32 and int64 paths.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <doctest/doctest.h>
#include <kiln/backend/cpu/gemm.hpp>

#include "seed.hpp"

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#endif

// A fork()'s child leaks, by necessity, what the parent's worker threads held (their
// thread_local GEMM buffers: the threads are not in the child); the fork test turns
// LeakSanitizer's exit check off in its child only.
#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define KILN_TEST_LSAN 1
#endif
#endif
#ifdef KILN_TEST_LSAN
namespace {
bool leak_check_off = false;
}
extern "C" int __lsan_is_turned_off() { return leak_check_off ? 1 : 0; }
#endif

using namespace kiln;
using cpu::matrix_ref;

namespace {

// Fresh random inputs on every run; the seed is printed when a check fails.
using kt::rng;  // KILN_TEST_SEED replays it (seed.hpp)

template <class T> T random_value(double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  if constexpr (std::is_integral_v<T>) return static_cast<T>(std::floor(u(rng())));
  else return static_cast<T>(static_cast<float>(u(rng())));
}

// row-major, transposed, a strided sub-matrix, row-major with a row stride past the row's end,
// one row repeated (row stride 0, as a broadcast view [1, c] -> [r, c]; exactly one row stored)
enum class layout { rows, cols, strided, padded, repeated };

/// A batch of random matrices stored in one of the layouts, read back through `at`.
template <class T> struct operand {
  std::vector<T> store;
  matrix_ref<const T> ref{};
  index_t rows = 0, cols = 0;

  operand(index_t batch, index_t r, index_t c, layout l, bool broadcast, double lo = -2, double hi = 2)
      : rows(r), cols(c) {
    index_t rs = c, cs = 1, offset = 0;
    if (l == layout::cols) rs = 1, cs = r;
    if (l == layout::strided) rs = 2 * c + 3, cs = 2, offset = rs + 1;  // every other column of a bigger matrix
    if (l == layout::padded) rs = c + 5;
    if (l == layout::repeated) rs = 0;
    const index_t one = std::max<index_t>(offset + (r - 1) * rs + (c - 1) * cs + 1, 1);
    const index_t stored = broadcast ? 1 : batch;
    store.resize(static_cast<std::size_t>(one * std::max<index_t>(stored, 1)));
    for (auto& x : store) x = random_value<T>(lo, hi);
    ref = {store.data() + offset, broadcast ? 0 : one, rs, cs};
  }
  double at(index_t b, index_t i, index_t j) const {
    return static_cast<double>(ref.data[b * ref.batch_stride + i * ref.row_stride + j * ref.col_stride]);
  }
};

/// C with `pad` guard columns after each row, filled with a sentinel that must survive.
template <class T> struct output {
  std::vector<T> store;
  index_t batch, m, n, ld;
  static T sentinel() {
    if constexpr (std::is_integral_v<T>) return T(12345);
    else return T(-777.25f);
  }
  output(index_t b, index_t m_, index_t n_, index_t pad = 0) : batch(b), m(m_), n(n_), ld(n_ + pad) {
    store.assign(static_cast<std::size_t>(std::max<index_t>(b * m * ld, 1)), sentinel());
  }
  matrix_ref<T> ref() { return {store.data(), m * ld, ld, 1}; }
  double at(index_t b, index_t i, index_t j) const { return static_cast<double>(store[(b * m + i) * ld + j]); }
  bool guards_intact() const {
    for (index_t r = 0; r < batch * m; ++r)
      for (index_t j = n; j < ld; ++j)
        if (std::memcmp(&store[r * ld + j], &s_, sizeof(T)) != 0) return false;
    return true;
  }
  T s_ = sentinel();
};

/// The exact product in double, and the sum of |a*b| terms (the scale of the rounding error).
struct reference {
  std::vector<double> value, scale;
  index_t m, n;
  double v(index_t b, index_t i, index_t j) const { return value[(b * m + i) * n + j]; }
  double s(index_t b, index_t i, index_t j) const { return scale[(b * m + i) * n + j]; }
};
template <class T>
reference product(index_t batch, index_t m, index_t n, index_t k, const operand<T>& a, const operand<T>& b) {
  reference r{std::vector<double>(batch * m * n), std::vector<double>(batch * m * n), m, n};
  for (index_t bi = 0; bi < batch; ++bi)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double acc = 0, abs = 0;
        for (index_t p = 0; p < k; ++p) {
          const double t = a.at(bi, i, p) * b.at(bi, p, j);
          acc += t;
          abs += std::fabs(t);
        }
        r.value[(bi * m + i) * n + j] = acc;
        r.scale[(bi * m + i) * n + j] = abs;
      }
  return r;
}

template <class T> double tolerance() { return std::is_same_v<T, double> ? 1e-12 : 1e-4; }

/// Largest error of c against the reference, relative to the magnitude of the summed terms.
template <class T> double worst_error(const output<T>& c, const reference& r) {
  double worst = 0;
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t i = 0; i < c.m; ++i)
      for (index_t j = 0; j < c.n; ++j) {
        const double got = c.at(b, i, j), want = r.v(b, i, j);
        const double e = std::isfinite(got) ? std::fabs(got - want) / (r.s(b, i, j) + 1e-30) : 1e30;
        worst = std::max(worst, e);
      }
  return worst;
}

struct threads_guard {  // sets the thread count for one test and restores it
  int old;
  explicit threads_guard(int n) : old(cpu::set_num_threads(n)) {}
  ~threads_guard() { cpu::set_num_threads(old); }
};

template <class T>
void check_product(index_t batch, index_t m, index_t n, index_t k, layout la, layout lb, bool bcast_a = false,
                   bool bcast_b = false, index_t pad = 0) {
  CAPTURE(batch);
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(static_cast<int>(la));
  CAPTURE(static_cast<int>(lb));
  CAPTURE(bcast_a);
  CAPTURE(bcast_b);
  const operand<T> a(batch, m, k, la, bcast_a), b(batch, k, n, lb, bcast_b);
  output<T> c(batch, m, n, pad);
  cpu::gemm<T>(batch, m, n, k, a.ref, b.ref, c.ref());
  const reference r = product(batch, m, n, k, a, b);
  CHECK(worst_error(c, r) <= tolerance<T>());
  CHECK(c.guards_intact());
}

using fcfg = cpu::detail::gemm_config<float>;
/// NC, the packed B block's columns (set at run time from the L2's size)
const index_t fnc = cpu::detail::gemm_block_cols<float, cpu::detail::gemm_arch>();

/// x's values stored again, contiguous, by rows or (by_rows false) by columns.
std::vector<float> laid_out(const operand<float>& x, bool by_rows) {
  std::vector<float> v(static_cast<std::size_t>(x.rows * x.cols));
  for (index_t i = 0; i < x.rows; ++i)
    for (index_t j = 0; j < x.cols; ++j)
      v[static_cast<std::size_t>(by_rows ? i * x.cols + j : j * x.rows + i)] = static_cast<float>(x.at(0, i, j));
  return v;
}

/// A * B with the operands as given and as a2, b2 (the same values, laid out otherwise): the
/// two products bitwise equal, and right.
void check_same_bits(index_t m, index_t n, index_t k, const operand<float>& a, const operand<float>& b,
                     matrix_ref<const float> a2, matrix_ref<const float> b2) {
  output<float> c(1, m, n), c2(1, m, n);
  cpu::gemm<float>(1, m, n, k, a.ref, b.ref, c.ref());
  cpu::gemm<float>(1, m, n, k, a2, b2, c2.ref());
  CHECK(std::memcmp(c.store.data(), c2.store.data(), c.store.size() * sizeof(float)) == 0);
  CHECK(worst_error(c, product(1, m, n, k, a, b)) <= 1e-4);
}

}  // namespace

TEST_CASE("gemm at hand-computed values") {
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  float c[4] = {};
  cpu::gemm<float>(1, 2, 2, 3, {a, 0, 3, 1}, {b, 0, 2, 1}, {c, 0, 2, 1});
  CHECK(c[0] == 58);
  CHECK(c[1] == 64);
  CHECK(c[2] == 139);
  CHECK(c[3] == 154);
}

TEST_CASE("the packed B block takes half of the L2, or KILN_GEMM_B_BLOCK_BYTES") {
  const std::int64_t l1 = cpu::detail::cache_bytes(1), l2 = cpu::detail::cache_bytes(2), last = cpu::detail::cache_bytes(0);
  CAPTURE(l1);
  CAPTURE(l2);
  CAPTURE(last);
  // sizes as sysfs or sysconf report them: a level above is at least as large, unknown is 0
  if (l1 > 0 && l2 > 0) CHECK(l1 <= l2);
  if (l2 > 0) CHECK(l2 <= last);
  CHECK(last >= 0);
  const index_t bytes = cpu::detail::gemm_b_block_bytes();
  if (const auto e = kiln::detail::env_integer("KILN_GEMM_B_BLOCK_BYTES", 1)) CHECK(bytes == *e);
  else CHECK(bytes == (l2 > 0 ? l2 / 2 : index_t{1} << 20));
  // NC: whole micro-panels, as many as fit (at least one); compared in bytes / (KC floats)
  const index_t panels = bytes / (fcfg::kc * index_t{sizeof(float)}) / fcfg::nr;
  CHECK(fnc == std::max<index_t>(1, panels) * fcfg::nr);
}

TEST_CASE("square sizes around the vector width and the blocks") {
  for (index_t s : {1, 2, 7, 17, 31, 64, 100, 1023}) check_product<float>(1, s, s, s, layout::rows, layout::rows);
}

TEST_CASE("mixed shapes, k = 0 and k = 1, and sizes that cross MC, NC and KC") {
  const std::vector<std::tuple<index_t, index_t, index_t>> shapes = {
      {1, 40, 1},   {13, 1, 7},    {33, 65, 1},    {100, 3, 500}, {3, 100, 500}, {257, 129, 385},
      {50, 700, 20}, {1, 1, 2000}, {fcfg::mr + 1, fcfg::nr - 1, fcfg::kc + 1},
      {5, fnc + 3, 9},         {fcfg::mc + 7, 9, 5},           {37, 2 * fcfg::nr + 5, 3 * fcfg::kc + 2}};
  for (auto [m, n, k] : shapes) check_product<float>(1, m, n, k, layout::rows, layout::rows);
}

TEST_CASE("transposed and strided operands need no copies and give the same products") {
  for (layout la : {layout::rows, layout::cols, layout::strided, layout::padded})
    for (layout lb : {layout::rows, layout::cols, layout::strided, layout::padded}) {
      check_product<float>(1, 29, 45, 70, la, lb);
      check_product<float>(1, 70, 37, 2 * fcfg::kc + 3, la, lb, false, false, 5);  // C a sub-matrix too
    }
}

TEST_CASE("A by rows is read in place: bitwise what packed A (by columns) gives") {
  // The micro-kernel reads full row tiles of a row-major float A where they are and packs only
  // a last, partial one; A by columns is packed throughout. Same sums in the same order.
  for (int threads : {1, 2}) {
    threads_guard t(threads);
    for (index_t m : {1, 5, 6, 7, 70, 97})
      for (index_t n : {index_t{3}, index_t{fcfg::nr}, index_t{2 * fcfg::nr + 5}})
        for (index_t k : {index_t{1}, index_t{9}, fcfg::kc + 5}) {
          CAPTURE(threads);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          const operand<float> a(1, m, k, layout::padded, false), b(1, k, n, layout::rows, false);
          const std::vector<float> a_cols = laid_out(a, false);
          check_same_bits(m, n, k, a, b, {a_cols.data(), 0, 1, m}, b.ref);
        }
  }
}

TEST_CASE("A broadcast along its rows (row stride 0) is packed, not read in place, and is right") {
  // a broadcast view ([1, k] to [m, k]) has row stride 0; the in-place path would take it for
  // a packed micro-panel and read past the row
  for (int threads : {1, 2}) {
    threads_guard t(threads);
    for (index_t m : {6, 13, 64})
      for (index_t k : {index_t{5}, fcfg::kc + 3}) {
        CAPTURE(threads);
        check_product<float>(1, m, 2 * fcfg::nr + 3, k, layout::repeated, layout::rows);  // one row stored: ASan sees an overrun
      }
  }
}

TEST_CASE("B by columns (x W^T) packs by 8 x 8 transposes: bitwise what B by rows gives") {
  // k around the 8-step transposes (tails of 1-7) and across k blocks; n with an edge panel;
  // more rows than the dot products take (next test)
  static_assert(cpu::detail::gemm_dot_rows < 9);
  for (int threads : {1, 2}) {
    threads_guard t(threads);
    for (index_t m : {9, 70})
      for (index_t n : {index_t{1}, index_t{fcfg::nr}, index_t{3 * fcfg::nr + 5}})
        for (index_t k : {index_t{1}, index_t{7}, index_t{8}, index_t{9}, index_t{17}, fcfg::kc + 5, 2 * fcfg::kc + 3}) {
          CAPTURE(threads);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          const operand<float> a(1, m, k, layout::rows, false), b(1, k, n, layout::cols, false);
          const std::vector<float> b_rows = laid_out(b, true);
          check_same_bits(m, n, k, a, b, a.ref, {b_rows.data(), 0, n, 1});
        }
  }
}

TEST_CASE("batches, with A or B broadcast (batch stride 0)") {
  check_product<float>(3, 19, 33, 41, layout::rows, layout::rows);
  check_product<float>(4, 19, 33, 41, layout::rows, layout::cols, true, false);
  check_product<float>(3, 70, 90, 130, layout::cols, layout::rows, false, true, 2);
  check_product<float>(5, 7, 100, 300, layout::strided, layout::rows, false, true);
  {
    threads_guard t(2);
    check_product<float>(3, 150, 70, 200, layout::rows, layout::rows, true, false);
    check_product<float>(2, 1, 300, 1000, layout::rows, layout::cols, false, true);
  }
}

TEST_CASE("empty products write nothing; k = 0 gives zeros and still runs the epilogue") {
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {9, 9, 9, 9};
  int calls = 0;
  auto ep = [&](index_t, index_t, index_t, index_t, float*) { ++calls; };
  cpu::gemm<float>(1, 0, 2, 2, {a, 0, 2, 1}, {b, 0, 2, 1}, {c, 0, 2, 1}, ep);
  cpu::gemm<float>(1, 2, 0, 2, {a, 0, 2, 1}, {b, 0, 2, 1}, {c, 0, 2, 1}, ep);
  cpu::gemm<float>(0, 2, 2, 2, {a, 0, 2, 1}, {b, 0, 2, 1}, {c, 0, 2, 1}, ep);
  CHECK(calls == 0);
  CHECK(c[0] == 9);
  CHECK(c[3] == 9);

  output<float> z(2, 3, 5, 1);
  std::vector<int> seen(2 * 3 * 5, 0);
  cpu::gemm<float>(2, 3, 5, 0, {a, 0, 0, 1}, {b, 0, 5, 1}, z.ref(),
                   [&](index_t bi, index_t i, index_t j0, index_t count, float* row) {
                     for (index_t j = 0; j < count; ++j) {
                       seen[(bi * 3 + i) * 5 + j0 + j] += row[j] == 0.0f ? 1 : 100;
                       row[j] = 1.5f;
                     }
                   });
  for (int s : seen) CHECK(s == 1);
  CHECK(z.at(1, 2, 4) == 1.5);
  CHECK(z.guards_intact());
}

TEST_CASE("few rows times B by columns are dot products: right, each row's bits its own, any threads") {
  using cpu::detail::gemm_dot_applies;
  using arch = cpu::detail::gemm_arch;
  const index_t w = fcfg::width;
  for (index_t m = 1; m <= cpu::detail::gemm_dot_rows; ++m)
    for (index_t n : {index_t{1}, index_t{7}, index_t{8 * 3 + 5}, index_t{300}})
      for (index_t k : {2 * m * w, 2 * m * w + 5, index_t{1000}}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        const operand<float> a(1, m, k, layout::padded, false), b(1, k, n, layout::cols, false);
        REQUIRE(gemm_dot_applies<float, arch>(m, k, a.ref, b.ref));  // the path under test
        output<float> c1(1, m, n, 3), c2(1, m, n, 3);
        std::set<std::thread::id> ids;
        std::mutex ids_mutex;
        std::vector<int> visits(static_cast<std::size_t>(m * n), 0);
        bool final_value = true;
        {
          threads_guard t(1);
          cpu::gemm<float>(1, m, n, k, a.ref, b.ref, c1.ref());
        }
        {
          threads_guard t(2);
          cpu::gemm<float>(1, m, n, k, a.ref, b.ref, c2.ref(), [&](index_t, index_t i, index_t j0, index_t count, float* row) {
            std::lock_guard<std::mutex> l(ids_mutex);
            ids.insert(std::this_thread::get_id());
            for (index_t j = 0; j < count; ++j) {
              ++visits[static_cast<std::size_t>(i * n + j0 + j)];
              final_value = final_value && row[j] == static_cast<float>(c2.at(0, i, j0 + j));
            }
          });
        }
        CHECK(worst_error(c1, product(1, m, n, k, a, b)) <= 1e-4);
        CHECK(c1.guards_intact());
        CHECK(c2.guards_intact());
        CHECK(std::memcmp(c1.store.data(), c2.store.data(), c1.store.size() * sizeof(float)) == 0);
        CHECK(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
        CHECK(final_value);
        if (n * k * 4 >= 256000) CHECK(ids.size() == 2);  // big enough to split among the threads
        // row i alone (a product of one row, also dot products) gives row i's bits
        for (index_t i = 0; i < m; ++i) {
          output<float> one(1, 1, n);
          const matrix_ref<const float> ai{a.ref.data + i * a.ref.row_stride, 0, a.ref.row_stride, 1};
          cpu::gemm<float>(1, 1, n, k, ai, b.ref, one.ref());
          CHECK(std::memcmp(one.store.data(), c1.store.data() + i * c1.ld, static_cast<std::size_t>(n) * sizeof(float)) == 0);
        }
      }
  // batches, A broadcast over them; below the rule's k, or with more rows, packing takes them
  check_product<float>(3, 2, 40, 300, layout::rows, layout::cols, true, false, 1);
  check_product<float>(2, 5, 33, 1000, layout::repeated, layout::cols);
  CHECK_FALSE(gemm_dot_applies<float, arch>(4, 2 * 4 * w - 1, operand<float>(1, 4, 1, layout::rows, false).ref,
                                            operand<float>(1, 1, 1, layout::cols, false).ref));
  CHECK_FALSE(gemm_dot_applies<float, arch>(cpu::detail::gemm_dot_rows + 1, 1000, operand<float>(1, 1, 1, layout::rows, false).ref,
                                            operand<float>(1, 1, 1, layout::cols, false).ref));
  check_product<double>(1, 3, 50, 500, layout::rows, layout::cols);
}

TEST_CASE("the epilogue sees every element once, after its final sum") {
  // B by columns is packed; B by rows, with these few rows, is read in place, a column panel
  // for all row tiles in turn, over two column blocks (n > NC)
  for (const layout lb : {layout::cols, layout::rows})
  for (int threads : {1, 2}) {
    threads_guard t(threads);
    const index_t batch = 2, m = 4 * fcfg::mr + 5, k = 3 * fcfg::kc + 11;
    const index_t n = lb == layout::rows ? fnc + 5 * fcfg::nr + 7 : 5 * fcfg::nr + 7;
    CAPTURE(threads);
    CAPTURE(static_cast<int>(lb));
    const operand<float> a(batch, m, k, layout::rows, false), b(batch, k, n, lb, false);
    output<float> c(batch, m, n, 3);
    std::vector<int> visits(batch * m * n, 0);
    std::vector<float> seen(batch * m * n, 0);
    std::set<std::thread::id> ids;
    std::mutex ids_mutex;
    cpu::gemm<float>(batch, m, n, k, a.ref, b.ref, c.ref(),
                     [&](index_t bi, index_t i, index_t j0, index_t count, float* row) {
                       {
                         std::lock_guard<std::mutex> l(ids_mutex);
                         ids.insert(std::this_thread::get_id());
                       }
                       for (index_t j = 0; j < count; ++j) {
                         ++visits[(bi * m + i) * n + j0 + j];
                         seen[(bi * m + i) * n + j0 + j] = row[j];
                       }
                     });
    const reference r = product(batch, m, n, k, a, b);
    bool once = true, final_value = true;
    double worst = 0;
    for (index_t bi = 0; bi < batch; ++bi)
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
          const index_t x = (bi * m + i) * n + j;
          once = once && visits[x] == 1;
          final_value = final_value && seen[x] == static_cast<float>(c.at(bi, i, j));
          worst = std::max(worst, std::fabs(seen[x] - r.v(bi, i, j)) / (r.s(bi, i, j) + 1e-30));
        }
    CHECK(once);
    CHECK(final_value);
    CHECK(worst <= 1e-4);
    CHECK(ids.size() == static_cast<std::size_t>(threads));  // the product really ran on `threads` threads
  }
}

TEST_CASE("a bias + relu epilogue in place, and one that writes elsewhere") {
  threads_guard t(2);
  const index_t m = 77, n = 150, k = 260;
  const operand<float> a(1, m, k, layout::rows, false), b(1, k, n, layout::rows, false);
  std::vector<float> bias(n);
  for (auto& x : bias) x = random_value<float>();
  const reference r = product(1, m, n, k, a, b);

  output<float> c(1, m, n);
  cpu::gemm<float>(1, m, n, k, a.ref, b.ref, c.ref(), [&](index_t, index_t, index_t j0, index_t count, float* row) {
    for (index_t j = 0; j < count; ++j) row[j] = std::max(row[j] + bias[j0 + j], 0.0f);
  });
  double worst = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      worst = std::max(worst, std::fabs(c.at(0, i, j) - std::max(r.v(0, i, j) + bias[j], 0.0)) / (r.s(0, i, j) + 1));
  CHECK(worst <= 1e-4);

  // C as scratch, the result (2 * C) written to another array
  output<float> scratch(1, m, n);
  std::vector<float> twice(m * n, 0);
  cpu::gemm<float>(1, m, n, k, a.ref, b.ref, scratch.ref(), [&](index_t, index_t i, index_t j0, index_t count, float* row) {
    for (index_t j = 0; j < count; ++j) twice[i * n + j0 + j] = 2 * row[j];
  });
  worst = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      worst = std::max(worst, std::fabs(twice[i * n + j] - 2 * r.v(0, i, j)) / (2 * r.s(0, i, j) + 1e-30));
  CHECK(worst <= 1e-4);
}

TEST_CASE("1 and 2 threads give bitwise-identical results") {
  const std::vector<std::tuple<index_t, index_t, index_t, index_t>> shapes = {
      {1, 257, 301, 700}, {1, 1023, 64, 100}, {1, 20, 1000, 300}, {3, 65, 129, 385}, {4, 33, 17, 2000}};
  for (const auto& shape : shapes) {
    // plain variables: doctest's CAPTURE is a lambda, and clang 14 cannot capture structured bindings
    const index_t batch = std::get<0>(shape), m = std::get<1>(shape), n = std::get<2>(shape), k = std::get<3>(shape);
    CAPTURE(batch);
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const operand<float> a(batch, m, k, layout::rows, false), b(batch, k, n, layout::cols, false);
    output<float> one(batch, m, n), two(batch, m, n);
    {
      threads_guard t(1);
      cpu::gemm<float>(batch, m, n, k, a.ref, b.ref, one.ref());
    }
    std::set<std::thread::id> ids;
    std::mutex ids_mutex;
    {
      threads_guard t(2);
      cpu::gemm<float>(batch, m, n, k, a.ref, b.ref, two.ref(), [&](index_t, index_t, index_t, index_t, float*) {
        std::lock_guard<std::mutex> l(ids_mutex);
        ids.insert(std::this_thread::get_id());
      });
    }
    CHECK(ids.size() == 2);  // both threads worked, on parts of one matrix where batch is 1
    CHECK(std::memcmp(one.store.data(), two.store.data(), one.store.size() * sizeof(float)) == 0);
    CHECK(worst_error(two, product(batch, m, n, k, a, b)) <= 1e-4);
  }
}

TEST_CASE("a gemm inside a parallel_for (nested) runs serially and is right") {
  threads_guard t(2);
  const index_t m = 90, n = 110, k = 400;  // big enough that a gemm alone would use threads
  const operand<float> a(2, m, k, layout::rows, false), b(2, k, n, layout::rows, false);
  output<float> c(2, m, n);
  cpu::parallel_for(2, 1, [&](index_t b0, index_t b1) {
    for (index_t bi = b0; bi < b1; ++bi)
      cpu::gemm<float>(1, m, n, k, {a.ref.data + bi * a.ref.batch_stride, 0, a.ref.row_stride, a.ref.col_stride},
                       {b.ref.data + bi * b.ref.batch_stride, 0, b.ref.row_stride, b.ref.col_stride},
                       {c.store.data() + bi * m * n, 0, n, 1});
  });
  CHECK(worst_error(c, product(2, m, n, k, a, b)) <= 1e-4);
}

TEST_CASE("parallel_for covers [0, n) once, in non-empty contiguous chunks, with any thread count") {
  for (int threads : {1, 2, 3, 5}) {
    threads_guard t(threads);
    for (index_t n : {1, 2, 7, 64, 1000, 100003}) {
      for (index_t grain : {1, 3, 1000}) {
        INFO("threads " << threads << ", n " << n << ", grain " << grain);
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
        std::atomic<long> calls{0}, bad{0};
        cpu::parallel_for(n, grain, [&](index_t b, index_t e) {
          ++calls;
          if (!(0 <= b && b < e && e <= n)) ++bad;
          for (index_t i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
        });
        CHECK(bad == 0);
        bool once = true;
        for (auto& v : seen) once = once && v == 1;
        CHECK(once);
        // at most chunks_per_thread chunks per thread, each of at least `grain` items
        CHECK(calls <= std::max<long>(1, std::min<long>(long(threads) * cpu::chunks_per_thread, n / grain)));
      }
    }
  }
}

TEST_CASE("with_team: parallel_for inside covers [0, n) once per job, job after job; exceptions come out") {
  for (int threads : {1, 2, 3}) {
    threads_guard t(threads);
    INFO("threads " << threads);
    std::set<std::thread::id> ids;
    std::mutex ids_mutex;
    long bad = 0;
    cpu::with_team([&] {
      for (int job = 0; job < 300; ++job) {
        const index_t n = 1 + (job * 7919) % 5000;
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
        cpu::parallel_for(n, 16, [&](index_t b, index_t e) {
          for (index_t i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
          if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          std::lock_guard<std::mutex> l(ids_mutex);
          ids.insert(std::this_thread::get_id());
        }, job % 2 ? cpu::chunks_per_thread : 1);
        for (auto& v : seen) bad += v != 1;
        // a gemm in the team (one share of the product per thread)
        if (job % 100 == 0) {
          const index_t m = 90, n2 = 110, k = 400;  // big enough to thread
          const operand<float> a(1, m, k, layout::rows, false), b(1, k, n2, layout::cols, false);
          output<float> c(1, m, n2);
          cpu::gemm<float>(1, m, n2, k, a.ref, b.ref, {c.store.data(), 0, n2, 1});
          CHECK(worst_error(c, product(1, m, n2, k, a, b)) <= 1e-4);
        }
      }
      // The team's other threads take chunks. On a loaded machine (ctest -j2 beside compilers)
      // another thread may not be scheduled before the caller has run every chunk of a short
      // job, so here each chunk waits, up to 10 s, for a chunk to start on a second thread.
      if (threads > 1) cpu::parallel_for(2, 1, [&](index_t, index_t) {
        {
          std::lock_guard<std::mutex> l(ids_mutex);
          ids.insert(std::this_thread::get_id());
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
          {
            std::lock_guard<std::mutex> l(ids_mutex);
            if (ids.size() > 1) break;
          }
          if (std::chrono::steady_clock::now() > until) break;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }, 1);
    });
    CHECK(bad == 0);
    if (threads > 1) CHECK(ids.size() > 1);  // the team's other threads took chunks (see above)
    // one team for the whole body: threads - 1 of kiln's pool (which earlier tests may have
    // grown) serve every job, the same ones throughout
    CHECK(ids.size() <= static_cast<std::size_t>(threads));
    // an exception from the body (after some jobs) ends the team and comes out of with_team
    int after = 0;
    CHECK_THROWS_WITH_AS(cpu::with_team([&] {
      cpu::parallel_for(1000, 1, [](index_t, index_t) {});
      throw std::runtime_error("kernel failed");
    }), "kernel failed", std::runtime_error);
    cpu::with_team([&] { cpu::parallel_for(100, 1, [&](index_t b, index_t e) { std::lock_guard<std::mutex> l(ids_mutex); after += int(e - b); }); });
    CHECK(after == 100);
  }
}

TEST_CASE("with_team from two threads at once: one gets the pool, the other its fallback; both right") {
  threads_guard t(2);
  std::atomic<long> bad{0};
  auto calls = [&](int seed) {
    for (int call = 0; call < 200; ++call)
      cpu::with_team([&] {
        for (int job = 0; job < 3; ++job) {
          const index_t n = 1 + (seed * 131 + call * 7919 + job * 104729) % 3000;
          std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
          cpu::parallel_for(n, 16, [&](index_t b, index_t e) {
            for (index_t i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
          });
          for (auto& v : seen) bad += v != 1;
        }
      });
  };
  std::thread other(calls, 1);
  calls(2);
  other.join();
  CHECK(bad == 0);
}

TEST_CASE("a parallel_for while another thread's with_team holds the pool runs, rather than wait for it") {
  // Thread A's team holds kiln's pool (in every build) until its body ends, and its body waits
  // for thread B's parallel_for. In a build without OpenMP B's loop used to wait for the pool:
  // neither ended. B must run it (serially there); the wait is bounded, so a hang fails.
  threads_guard t(2);
  std::atomic<bool> b_done{false};
  bool a_saw_b = false;
  std::atomic<long> covered{0};
  std::thread a([&] {
    cpu::with_team([&] {
      cpu::parallel_for(1000, 1, [](index_t, index_t) {});  // the team is up
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!b_done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
      a_saw_b = b_done.load();
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // (usually) A holds the pool now
  cpu::parallel_for(5000, 16, [&](index_t b, index_t e) { covered += e - b; });
  b_done = true;
  a.join();
  CHECK(covered.load() == 5000);
  CHECK(a_saw_b);
}

#if defined(__SANITIZE_THREAD__)
#define KILN_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_TEST_TSAN 1
#endif
#endif

#if defined(__unix__) || defined(__APPLE__)
TEST_CASE("after fork(), the child's threaded calls and its exit work (a fresh pool)") {
#if KILN_TEST_TSAN
  MESSAGE("skipped under ThreadSanitizer, which cannot start threads after a multi-threaded fork");
  return;
#endif
  threads_guard t(2);
  auto work = [] {  // a team and a gemm in it, then a parallel_for outside any team
    long bad = 0;
    cpu::with_team([&] {
      const index_t m = 90, n = 110, k = 400;
      const operand<float> a(1, m, k, layout::rows, false), b(1, k, n, layout::cols, false);
      output<float> c(1, m, n);
      cpu::gemm<float>(1, m, n, k, a.ref, b.ref, {c.store.data(), 0, n, 1});
      bad += !(worst_error(c, product(1, m, n, k, a, b)) <= 1e-4);
    });
    std::vector<std::atomic<int>> seen(3000);
    cpu::parallel_for(3000, 16, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
    });
    for (auto& v : seen) bad += v != 1;
    return bad;
  };
  REQUIRE(work() == 0);  // the parent's pool has workers now
  std::fflush(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
#ifdef KILN_TEST_LSAN
    leak_check_off = true;
#endif
    alarm(60);  // a hang kills the child (SIGALRM), which fails the check below
    const long bad = work() + work();
    std::exit(bad == 0 ? 0 : 1);  // std::exit runs the destructors: the pool joins its workers
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  if (WIFEXITED(status)) CHECK(WEXITSTATUS(status) == 0);
  if (WIFSIGNALED(status)) MESSAGE("child killed by signal " << WTERMSIG(status));
  CHECK(work() == 0);  // the parent's pool is untouched
}
#endif

TEST_CASE("with_team: jobs of alternating chunk counts run each chunk once, and a late thread takes nothing") {
  // A thread late for job g must not take a chunk of job g + 1 while the caller is posting it
  // (see team::take): before the fix (2026-11-24) this test hung in 6 runs of 6 (after 341 to
  // 140k jobs). A hang fails the test by the watchdog instead of stalling the suite.
  for (int threads : {2, 3}) {
    threads_guard t(threads);
#if defined(KILN_USE_OPENMP)
    constexpr long jobs = 300000;
#else
    constexpr long jobs = 30000;  // kiln's own pool wakes a sleeping worker for many of these tiny jobs
#endif
    std::atomic<long> done{0};
    std::mutex m;
    std::condition_variable cv;
    bool finished = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> l(m);
      long last = -1;
      while (!cv.wait_for(l, std::chrono::seconds(10), [&] { return finished; })) {
        const long now = done.load();
        if (now == last) {
          std::fprintf(stderr, "with_team stress: no job finished in 10 s (after %ld of %ld, %d threads): hung\n", now, jobs, threads);
          std::_Exit(3);
        }
        last = now;
      }
    });
    long bad = 0;
    std::vector<std::atomic<int>> seen(64);
    cpu::with_team([&] {
      for (long j = 0; j < jobs; ++j) {
        const index_t n = j % 2 ? 64 : 2;
        for (index_t i = 0; i < n; ++i) seen[static_cast<std::size_t>(i)].store(0, std::memory_order_relaxed);
        cpu::parallel_for(n, 1, [&](index_t b, index_t e) {
          for (index_t i = b; i < e; ++i) seen[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        }, 64);
        for (index_t i = 0; i < n; ++i) bad += seen[static_cast<std::size_t>(i)].load() != 1;
        done.store(j + 1);
      }
    });
    {
      std::lock_guard<std::mutex> l(m);
      finished = true;
    }
    cv.notify_one();
    watchdog.join();
    CAPTURE(threads);
    CHECK(done.load() == jobs);
    CHECK(bad == 0);
  }
}

TEST_CASE("few rows read B in place; a narrow last panel computes only the vectors it needs") {
  using cfg = cpu::detail::gemm_config<float>;
  const index_t w = cfg::width, nr = cfg::nr;
  for (int threads : {1, 2}) {
    threads_guard t(threads);
    for (index_t m : {1, 5, 6, 7, 16, 63, 64, 65}) {
      for (index_t n : {index_t{1}, index_t{10}, w, w + 1, nr - 1, nr, nr + 10, index_t{1000}}) {
        for (index_t k : {index_t{1}, index_t{7}, cfg::kc + 5}) {
          if (k > 7 && (n == 1000 || !(m == 7 || m == 65))) continue;  // long k: a few shapes
          check_product<float>(1, m, n, k, layout::rows, layout::rows);
          check_product<float>(2, m, n, k, layout::cols, layout::rows, false, true, 3);
        }
      }
    }
  }
  check_product<double>(1, 16, 10, 300, layout::rows, layout::rows);
  check_product<double>(1, 30, 100, 9, layout::rows, layout::rows, false, false, 2);
}

TEST_CASE("double") {
  using dcfg = cpu::detail::gemm_config<double>;
  check_product<double>(1, 1, 1, 1, layout::rows, layout::rows);
  check_product<double>(1, 17, 31, 7, layout::rows, layout::cols);
  check_product<double>(2, dcfg::mr + 3, dcfg::nr * 3 + 1, dcfg::kc * 2 + 5, layout::strided, layout::rows, false, true, 1);
  threads_guard t(2);
  check_product<double>(1, 100, 101, 300, layout::cols, layout::strided);
}

TEST_CASE("bfloat16 accumulates in float and rounds once") {
  for (const auto& shape : std::vector<std::tuple<index_t, index_t, index_t>>{{1, 1, 1}, {7, 17, 31}, {40, 70, 900}}) {
    const index_t m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const operand<bfloat16> a(1, m, k, layout::rows, false), b(1, k, n, layout::cols, false);
    output<bfloat16> c(1, m, n, 2);
    cpu::gemm<bfloat16>(1, m, n, k, a.ref, b.ref, c.ref());
    const reference r = product(1, m, n, k, a, b);
    double worst = 0;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        // one bf16 rounding of the result (2^-8 relative) on top of float accumulation
        const double want = r.v(0, i, j);
        worst = std::max(worst, std::fabs(c.at(0, i, j) - want) / (std::fabs(want) * 0x1p-8 + r.s(0, i, j) * 1e-5));
      }
    CHECK(worst <= 1);
    CHECK(c.guards_intact());
  }
}

TEST_CASE_TEMPLATE("integers are exact and wrap on overflow", T, std::int32_t, std::int64_t) {
  using U = std::make_unsigned_t<T>;
  threads_guard t(2);
  for (const auto& shape : std::vector<std::tuple<index_t, index_t, index_t, bool>>{
           {1, 1, 1, false}, {7, 17, 31, false}, {60, 90, 300, false}, {13, 29, 70, true}}) {
    const index_t m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
    const bool big = std::get<3>(shape);
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const double range = big ? static_cast<double>(std::numeric_limits<T>::max()) / 4 : 100;
    const operand<T> a(1, m, k, layout::rows, false, -range, range), b(1, k, n, layout::strided, false, -range, range);
    output<T> c(1, m, n, 1);
    cpu::gemm<T>(1, m, n, k, a.ref, b.ref, c.ref());
    bool exact = true;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        U acc = 0;  // two's complement wrap-around, as the eager backend computes
        for (index_t p = 0; p < k; ++p)
          acc += static_cast<U>(a.ref.data[i * a.ref.row_stride + p * a.ref.col_stride]) *
                 static_cast<U>(b.ref.data[p * b.ref.row_stride + j * b.ref.col_stride]);
        exact = exact && c.store[i * c.ld + j] == static_cast<T>(acc);
      }
    CHECK(exact);
    CHECK(c.guards_intact());
  }
}

TEST_CASE("mistakes throw std::invalid_argument") {
  const float a[4] = {1, 2, 3, 4};
  float c[4] = {};
  CHECK_THROWS_AS(cpu::gemm<float>(1, -1, 2, 2, {a, 0, 2, 1}, {a, 0, 2, 1}, {c, 0, 2, 1}), std::invalid_argument);
  CHECK_THROWS_AS(cpu::gemm<float>(1, 2, 2, 2, {a, 0, 2, 1}, {a, 0, 2, 1}, {c, 0, 1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(cpu::gemm<float>(2, 2, 2, 2, {a, 0, 2, 1}, {a, 0, 2, 1}, {c, 0, 2, 1}), std::invalid_argument);
  CHECK(c[0] == 0);  // nothing written
}
