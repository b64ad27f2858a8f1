// Owning tensors, 64-byte alignment, element access, views that share storage, copies.
#include "support.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

using namespace kiln;

TEST_CASE("a new tensor is zero-filled, contiguous and 64-byte aligned") {
  for (index_t n : {1, 7, 17, 1023}) {
    tensor<float, 2> t({n, 3});
    CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
    CHECK(t.numel() == n * 3);
    CHECK(t.is_contiguous());
    for (index_t i = 0; i < t.numel(); ++i) REQUIRE(t.data()[i] == 0.0f);
  }
  tensor<double, 3> d({2, 3, 4});
  CHECK(d.strides() == std::array<index_t, 3>{12, 4, 1});
  CHECK(d.shape() == std::array<index_t, 3>{2, 3, 4});
}

TEST_CASE("empty tensors and rank 0") {
  tensor<float, 2> e({0, 5});
  CHECK(e.numel() == 0);
  CHECK(e.defined());
  tensor<float, 0> s(std::array<index_t, 0>{});
  CHECK(s.numel() == 1);
  s() = 4.5f;
  CHECK(s() == 4.5f);
  tensor<float, 1> u;
  CHECK(!u.defined());
  tensor<float, 0> braced({});  // once ambiguous (copy, move, any_tensor and extents constructors)
  CHECK(braced.numel() == 1);
  CHECK(braced() == 0.0f);
  CHECK(tensor<double, 3>({2, 3, 4}).numel() == 24);
  const auto wrong_rank = [] { return tensor<float, 2>({6}); };
  CHECK_THROWS_WITH_AS(wrong_rank(), doctest::Contains("a shape of 1 extents for a tensor of rank 2"),
                       std::invalid_argument);
}

TEST_CASE("values are stored row-major; at() checks bounds") {
  tensor<int, 2> t({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t(0, 0) == 1);
  CHECK(t(1, 2) == 6);
  CHECK(t.at(1, 0) == 4);
  CHECK_THROWS_AS(t.at(2, 0), std::out_of_range);
  CHECK_THROWS_AS(t.at(0, -1), std::out_of_range);
  CHECK_THROWS_AS((tensor<int, 2>({2, 3}, {1, 2, 3})), shape_error);
}

TEST_CASE("copies share storage like handles; clone() does not") {
  tensor<float, 1> a({3}, {1, 2, 3});
  tensor<float, 1> b = a;
  b(0) = 10;
  CHECK(a(0) == 10);
  tensor<float, 1> c = a.clone();
  c(1) = 20;
  CHECK(a(1) == 2);
  CHECK(!c.any().shares_storage(a.any()));
}

TEST_CASE("slice views: begin, end, step, negatives, and strict bounds") {
  tensor<int, 1> a({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto s = a.slice(0, 2, 9, 3);  // 2, 5, 8
  REQUIRE(s.size(0) == 3);
  CHECK(s(0) == 2);
  CHECK(s(1) == 5);
  CHECK(s(2) == 8);
  s(1) = 50;  // a view writes through
  CHECK(a(5) == 50);
  auto tail = a.slice(0, -3, to_end);
  CHECK(tail.size(0) == 3);
  CHECK(tail(0) == 7);
  CHECK(a.slice(0, 4, 4).size(0) == 0);
  CHECK_THROWS_AS(a.slice(0, 4, 11), shape_error);
  CHECK_THROWS_AS(a.slice(0, 5, 4), shape_error);
  CHECK_THROWS_AS(a.slice(0, 0, 4, 0), shape_error);
  CHECK_THROWS_AS(a.slice(1, 0, 1), shape_error);
}

TEST_CASE("transpose and permute are views with swapped strides") {
  tensor<float, 3> a = kt::random<float, 3>({2, 3, 4});
  auto p = a.permute({2, 0, 1});
  CHECK(p.shape() == std::array<index_t, 3>{4, 2, 3});
  CHECK(!p.is_contiguous());
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) REQUIRE(p(k, i, j) == a(i, j, k));
  auto t = a.transpose(0, 2);
  CHECK(t(3, 1, 0) == a(0, 1, 3));
  CHECK_THROWS_AS(a.permute({0, 0, 1}), shape_error);
  CHECK_THROWS_AS(a.transpose(0, 3), shape_error);
}

TEST_CASE("reshape works on contiguous tensors and infers one extent") {
  tensor<int, 2> a({2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto r = a.reshape<3>({3, 2, 2});
  CHECK(r(2, 1, 0) == 10);
  auto q = a.reshape<2>({dyn, 3});
  CHECK(q.shape() == std::array<index_t, 2>{4, 3});
  CHECK(q(3, 2) == 11);
  CHECK_THROWS_AS(a.reshape<2>({5, 2}), shape_error);
  CHECK_THROWS_AS(a.reshape<2>({dyn, 5}), shape_error);
  // a transposed view is not contiguous: reshape refuses instead of copying silently
  CHECK_THROWS_WITH_AS(a.transpose().reshape<1>({12}), doctest::Contains("contiguous"), shape_error);
  auto c = a.transpose().contiguous().reshape<1>({12});
  CHECK(c(1) == 6);
}

TEST_CASE("element counts are checked: a shape whose product overflows is refused, never wrapped") {
  constexpr index_t max = std::numeric_limits<index_t>::max();
  const any_tensor a(dtype::f32, dims{12});
  CHECK_THROWS_WITH_AS(a.reshape(dims{(index_t{1} << 62) + 3, 4}), doctest::Contains("2^59"), shape_error);  // 12 if wrapped
  CHECK_THROWS_AS(a.reshape(dims{max, max}), shape_error);
  CHECK_THROWS_AS(a.reshape(dims{dyn, max, 2}), shape_error);
  CHECK_THROWS_WITH_AS(any_tensor(dtype::f32, dims{(index_t{1} << 62) + 1, 4}), doctest::Contains("2^59"), shape_error);
  // empty, yet its strides would overflow
  CHECK_THROWS_AS(any_tensor(dtype::f32, dims{0, index_t{1} << 40, index_t{1} << 40}), shape_error);
  const any_tensor e(dtype::f32, dims{0, index_t{1} << 40});  // empty and addressable
  CHECK(e.numel() == 0);
  CHECK(e.reshape(dims{index_t{1} << 40, 0}).numel() == 0);
  // a step beyond the extent takes one element and leaves its stride alone (no overflow)
  const tensor<float, 1> t({5}, {1, 2, 3, 4, 5});
  const any_tensor v = t.any().slice(0, 1, to_end, index_t{1} << 62);
  CHECK(v.shape() == dims{1});
  CHECK(tensor<float, 1>(v.clone())(0) == 2);
  CHECK(tensor<float, 1>(t.any().slice(0, 0, to_end, max).clone())(0) == 1);
}

TEST_CASE("assigning a tensor to a temporary view copies elements; to a name rebinds") {
  tensor<float, 2> a({3, 3});
  tensor<float, 1> row({3}, {1, 2, 3});
  a.slice(0, 1, 2).reshape<1>({3}) = row;  // a temporary view: writes elements
  CHECK(a(1, 0) == 1);
  CHECK(a(1, 2) == 3);
  CHECK(a(0, 0) == 0);
  tensor<float, 1> named = a.slice(0, 0, 1).reshape<1>({3});
  named = row;  // a named handle: rebinds, a is untouched
  CHECK(a(0, 0) == 0);
  CHECK(named(2) == 3);
}

TEST_CASE("copy_from converts dtypes and handles overlapping views") {
  tensor<double, 1> d({3}, {1.5, -2.25, 3});
  tensor<int, 1> i({3});
  i.any().copy_from(d.any());
  CHECK(i(0) == 1);
  CHECK(i(1) == -2);
  tensor<bfloat16, 1> h({3});
  h.any().copy_from(d.any());
  CHECK(float(h(1)) == -2.25f);
  // shift a buffer by one through overlapping views: must read the old values
  tensor<int, 1> a({5}, {0, 1, 2, 3, 4});
  a.slice(0, 1, 5) = a.slice(0, 0, 4);
  CHECK(a(0) == 0);
  CHECK(a(1) == 0);
  CHECK(a(2) == 1);
  CHECK(a(4) == 3);
  CHECK_THROWS_AS(a.any().copy_from(d.any().slice(0, 0, 2)), shape_error);
}

TEST_CASE("clone and same-dtype copies keep every bit pattern, signalling NaNs included") {
  // All 65536 bf16 patterns: the conversion path would quiet the 127 signalling NaNs of each sign.
  tensor<bfloat16, 1> h({65536});
  for (int i = 0; i < 65536; ++i) h(i) = bfloat16::from_bits(static_cast<std::uint16_t>(i));
  const tensor<bfloat16, 1> hc = h.clone();
  tensor<bfloat16, 1> hs({65536});
  hs.any().copy_from(h.any());
  int differ = 0;
  for (int i = 0; i < 65536; ++i) differ += hc(i).bits != h(i).bits || hs(i).bits != h(i).bits;
  CHECK(differ == 0);
  // f32 and f64 signalling NaNs with a payload.
  tensor<float, 1> f({2}, {std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffa00005u)});
  tensor<double, 1> d({1}, {std::bit_cast<double>(0x7ff0000000000007ull)});
  CHECK(std::bit_cast<std::uint32_t>(f.clone()(0)) == 0x7f800001u);
  CHECK(std::bit_cast<std::uint32_t>(f.clone()(1)) == 0xffa00005u);
  CHECK(std::bit_cast<std::uint64_t>(d.clone()(0)) == 0x7ff0000000000007ull);
  // A conversion still goes through the value: a bf16 signalling NaN read into f32 is a NaN.
  tensor<float, 1> wide({1});
  wide.any().copy_from(h.slice(0, 0x7f81, 0x7f82).any());
  CHECK(std::isnan(wide(0)));
}

TEST_CASE("typed wrappers check dtype and rank of erased tensors") {
  any_tensor t(f64, dims{2, 2});
  CHECK_THROWS_AS((tensor<float, 2>(t)), dtype_error);
  CHECK_THROWS_AS((tensor<double, 3>(t)), shape_error);
  CHECK_NOTHROW((tensor<double, 2>(t)));
}

// ---- the storage cache (core/storage.hpp) ----

TEST_CASE("storage cache: a freed large block serves the next allocation of its size, zero-filled when asked") {
  kt::storage_cache_scope scope(std::size_t{64} << 20);
  const index_t n = 1 << 18;  // 1 MiB of floats
  const storage_cache_stats s0 = storage_cache_statistics();
  CHECK(s0.bytes == 0);
  const float* first = nullptr;
  {
    tensor<float, 1> t = kt::random<float, 1>({n}, 1, 2);
    first = t.data();
  }
  const storage_cache_stats s1 = storage_cache_statistics();
  CHECK(s1.blocks == 1);
#if defined(KILN_ASAN)
  CHECK(__asan_address_is_poisoned(first));  // held blocks are poisoned, handed-out ones not
  CHECK(__asan_address_is_poisoned(first + n - 1));
#endif
  CHECK(s1.bytes == static_cast<std::size_t>(n) * 4);
  {
    tensor<float, 1> z({n});  // same size: the same block, zero-filled again
    CHECK(z.data() == first);
#if defined(KILN_ASAN)
    CHECK(__asan_region_is_poisoned(z.data(), static_cast<std::size_t>(n) * 4) == nullptr);
#endif
    for (index_t i = 0; i < n; ++i) REQUIRE(z.data()[i] == 0.0f);
    CHECK(storage_cache_statistics().hits == s1.hits + 1);
    CHECK(storage_cache_statistics().bytes == 0);
  }
  {
    tensor<float, 1> near({n - 1000});  // rounds up to the same 4 KiB multiple
    CHECK(near.data() == first);
    tensor<float, 1> other({n + 1024});  // a size the cache does not hold
    CHECK(other.data() != first);
    CHECK(storage_cache_statistics().misses == s1.misses + 1);
  }
  CHECK(storage_cache_statistics().blocks == 2);
  {
    tensor<float, 2> small({7, 17});  // below storage_cache_min_bytes: never held
    (void)small;
  }
  CHECK(storage_cache_statistics().blocks == 2);
}

TEST_CASE("storage cache: the limit holds, the blocks freed longest ago go first, 0 turns it off") {
  kt::storage_cache_scope scope(std::size_t{3} << 20);
  const index_t n = 1 << 18;
  std::vector<const float*> freed;
  {
    std::vector<tensor<float, 1>> ts;
    for (int i = 0; i < 4; ++i) ts.emplace_back(std::array<index_t, 1>{n});
    for (auto& t : ts) freed.push_back(t.data());
    const std::uint64_t e0 = storage_cache_statistics().evictions;
    for (auto& t : ts) t = tensor<float, 1>();  // freed in order: the first goes to make room for the fourth
    CHECK(storage_cache_statistics().evictions == e0 + 1);
  }
  CHECK(storage_cache_statistics().bytes == std::size_t{3} << 20);
  {
    tensor<float, 1> a({n}), b({n}), c({n});  // the three newest, newest first
    CHECK(a.data() == freed[3]);
    CHECK(b.data() == freed[2]);
    CHECK(c.data() == freed[1]);
  }
  {
    tensor<float, 1> big({1 << 20});  // 4 MiB: larger than the limit, never held
    (void)big;
  }
  CHECK(storage_cache_statistics().bytes == std::size_t{3} << 20);
  CHECK(set_storage_cache_limit(std::size_t{1} << 20) == std::size_t{3} << 20);
  CHECK(storage_cache_statistics().bytes == std::size_t{1} << 20);
  set_storage_cache_limit(0);
  CHECK(storage_cache_statistics().bytes == 0);
  {
    tensor<float, 1> t({n});
    (void)t;
  }
  CHECK(storage_cache_statistics().blocks == 0);
  CHECK(storage_cache_limit() == 0);
}

TEST_CASE("storage cache: threads allocating and freeing at once never share a block") {
  kt::storage_cache_scope scope(std::size_t{8} << 20);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([w, &bad] {
      std::uint32_t r = 12345u + static_cast<std::uint32_t>(w);
      std::vector<any_tensor> mine;
      for (int i = 0; i < 3000; ++i) {
        r = r * 1664525u + 1013904223u;
        if (mine.size() < 3 && (r >> 30) != 0) {
          const index_t n = (index_t{1} << 15) << ((r >> 8) % 3);  // 128, 256 or 512 KiB
          any_tensor t(dtype::i32, dims{n}, uninitialized);
          auto* p = reinterpret_cast<std::int32_t*>(t.bytes());
          for (index_t j = 0; j < n; j += 1024) p[j] = w * 100000 + i;
          mine.push_back(std::move(t));
        } else if (!mine.empty()) {
          const any_tensor& t = mine.front();
          const auto* p = reinterpret_cast<const std::int32_t*>(t.bytes());
          const std::int32_t v = p[0];
          for (index_t j = 0; j < t.numel(); j += 1024)
            if (p[j] != v || v / 100000 != w) ++bad;  // another thread wrote into this block
          mine.erase(mine.begin());
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad.load() == 0);
  const storage_cache_stats s = storage_cache_statistics();
  CHECK(s.bytes <= std::size_t{8} << 20);
  CHECK(s.hits > 0);
}

TEST_CASE("settings from the environment: decimal integers at or above a minimum, anything else ignored") {
  constexpr const char* name = "KILN_TEST_ENV_INTEGER";
  auto read = [&](const char* value, long long least) {
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
    return kiln::detail::env_integer(name, least);
  };
  CHECK(read(nullptr, 0) == std::nullopt);
  CHECK(read("", 0) == std::nullopt);
  CHECK(read("0", 0) == 0LL);
  CHECK(read("268435456", 0) == 268435456LL);
  CHECK(read("3", 1) == 3LL);
  // each of these warns on stderr and leaves the default in force
  CHECK(read("0", 1) == std::nullopt);
  CHECK(read("-4", 0) == std::nullopt);
  CHECK(read("4x", 1) == std::nullopt);
  CHECK(read("256M", 0) == std::nullopt);
  CHECK(read("two", 1) == std::nullopt);
  CHECK(read(" 4", 1) == std::nullopt);
  CHECK(read("+4", 1) == std::nullopt);
  // too large for long long: its largest value (a huge threshold or limit still means "never")
  CHECK(read("99999999999999999999999", 0) == std::numeric_limits<long long>::max());
  ::unsetenv(name);
}
