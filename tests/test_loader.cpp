// The data loader (data/loader.hpp): every example once per epoch, in an order that depends on
// the seed and the epoch alone, the same with and without prefetch; storage reused unless the
// caller still holds a batch; token windows; errors.
#include <doctest/doctest.h>
#include <kiln/data/loader.hpp>

#include <algorithm>
#include <set>

#include "seed.hpp"

using namespace kiln;

namespace {

/// n examples: x row i = (i, -i, 2i) (f32), y = i (i64).
data::tensor_dataset numbered(index_t n) {
  any_tensor x(dtype::f32, dims{n, 3}), y(dtype::i64, dims{n});
  for (index_t i = 0; i < n; ++i) {
    x.data<float>()[i * 3] = static_cast<float>(i);
    x.data<float>()[i * 3 + 1] = static_cast<float>(-i);
    x.data<float>()[i * 3 + 2] = static_cast<float>(2 * i);
    y.data<std::int64_t>()[i] = i;
  }
  return data::tensor_dataset({x, y});
}

/// The labels of every batch of epoch e, batch by batch; checks each row's x against its label.
std::vector<std::vector<std::int64_t>> epoch(data::loader& l, std::uint64_t e) {
  std::vector<std::vector<std::int64_t>> out;
  l.begin_epoch(e);
  while (auto b = l.next()) {
    const any_tensor& x = (*b)[0];
    const any_tensor& y = (*b)[1];
    REQUIRE(x.shape().e[0] == y.shape().e[0]);
    std::vector<std::int64_t> labels;
    for (index_t r = 0; r < y.numel(); ++r) {
      const std::int64_t i = y.data<std::int64_t>()[r];
      CHECK(x.data<float>()[r * 3] == static_cast<float>(i));
      CHECK(x.data<float>()[r * 3 + 2] == static_cast<float>(2 * i));
      labels.push_back(i);
    }
    out.push_back(labels);
  }
  return out;
}

}  // namespace

TEST_CASE("every example once an epoch; the order depends on the seed and the epoch only") {
  const std::uint64_t seed = kt::rng()();
  for (const bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    data::loader a(numbered(103), {.batch = 10, .shuffle = true, .seed = seed, .prefetch = prefetch});
    CHECK(a.batches() == 11);
    const auto e0 = epoch(a, 0), e1 = epoch(a, 1);
    REQUIRE(e0.size() == 11);
    CHECK(e0.back().size() == 3);  // the short last batch
    std::multiset<std::int64_t> seen;
    for (const auto& b : e0) seen.insert(b.begin(), b.end());
    CHECK(seen.size() == 103);
    CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 103);
    CHECK(e0 != e1);  // epochs are shuffled anew
    // another loader (prefetching or not) sees the same batches for the same (seed, epoch),
    // whichever epochs came before (a run resumed at epoch 1)
    data::loader b(numbered(103), {.batch = 10, .shuffle = true, .seed = seed, .prefetch = !prefetch});
    CHECK(epoch(b, 1) == e1);
    CHECK(epoch(b, 0) == e0);
    data::loader c(numbered(103), {.batch = 10, .shuffle = true, .seed = seed + 1, .prefetch = prefetch});
    CHECK(epoch(c, 0) != e0);
  }
  data::loader in_order(numbered(25), {.batch = 10, .shuffle = false, .drop_last = true});
  CHECK(in_order.batches() == 2);
  const auto e = epoch(in_order, 7);
  REQUIRE(e.size() == 2);
  for (std::int64_t i = 0; i < 20; ++i) CHECK(e[static_cast<std::size_t>(i / 10)][static_cast<std::size_t>(i % 10)] == i);
}

TEST_CASE("storage is reused from batch to batch, except what the caller still holds") {
  for (const bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    data::loader l(numbered(100), {.batch = 10, .seed = 3, .prefetch = prefetch});
    l.begin_epoch(0);
    const std::byte* first = nullptr;
    std::vector<any_tensor> kept;
    std::vector<float> kept_values;
    for (int k = 0; k < 10; ++k) {
      auto b = l.next();
      REQUIRE(b);
      if (k == 0) first = (*b)[0].bytes();
      if (k == 2) CHECK((*b)[0].bytes() == first);  // batch 0's slot, dropped: reused
      if (k == 4) {  // held by the caller from here on
        kept = *b;
        kept_values.assign(kept[0].data<float>(), kept[0].data<float>() + kept[0].numel());
      }
      if (k == 6) CHECK((*b)[0].bytes() != kept[0].bytes());  // batch 4's slot is still held: new storage
    }
    CHECK(!l.next());
    CHECK(std::equal(kept_values.begin(), kept_values.end(), kept[0].data<float>()));
    CHECK(l.waited() >= 0);
  }
}

TEST_CASE("token windows: each input and its next-token targets") {
  any_tensor tokens(dtype::i64, dims{100});
  for (index_t i = 0; i < 100; ++i) tokens.data<std::int64_t>()[i] = 1000 + i;
  const data::token_windows w(tokens, 8, 4);
  CHECK(w.size() == 23);  // windows start at 0, 4, ..., 88 (the target of the last is token 96)
  data::loader l(w, {.batch = 5, .shuffle = true, .seed = 9});
  l.begin_epoch(0);
  std::set<std::int64_t> starts;
  while (auto b = l.next()) {
    const any_tensor& x = (*b)[0];
    const any_tensor& y = (*b)[1];
    CHECK(x.shape() == y.shape());
    for (index_t r = 0; r < x.shape().e[0]; ++r) {
      const std::int64_t s = x.data<std::int64_t>()[r * 8];
      starts.insert(s);
      CHECK((s - 1000) % 4 == 0);
      for (index_t j = 0; j < 8; ++j) {
        CHECK(x.data<std::int64_t>()[r * 8 + j] == s + j);
        CHECK(y.data<std::int64_t>()[r * 8 + j] == s + j + 1);
      }
    }
  }
  CHECK(starts.size() == 23);
  CHECK_THROWS_AS(data::token_windows(any_tensor(dtype::f32, dims{10}), 4, 1), std::invalid_argument);
  CHECK(data::token_windows(tokens, 99, 1).size() == 1);
  CHECK(data::token_windows(tokens, 100, 1).size() == 0);
}

namespace {
struct failing : data::dataset {
  index_t size() const override { return 30; }
  std::vector<std::pair<dtype, dims>> columns(index_t b) const override { return {{dtype::f32, dims{b}}}; }
  void gather(const std::vector<index_t>& idx, std::vector<any_tensor>&) const override {
    if (std::find(idx.begin(), idx.end(), 17) != idx.end()) throw std::runtime_error("example 17 is unreadable");
  }
};
}  // namespace

TEST_CASE("mistakes: rows that differ, a zero batch, next() before an epoch, a dataset that throws") {
  CHECK_THROWS_AS(data::tensor_dataset({any_tensor(dtype::f32, dims{3, 2}), any_tensor(dtype::f32, dims{4})}),
                  shape_error);
  CHECK_THROWS_AS(data::loader(numbered(5), {.batch = 0}), std::invalid_argument);
  data::loader l(numbered(5), {.batch = 2});
  CHECK_THROWS_AS(l.next(), std::logic_error);
  for (const bool prefetch : {true, false}) {
    data::loader f(failing{}, {.batch = 4, .shuffle = false, .prefetch = prefetch});
    f.begin_epoch(0);
    int good = 0;
    bool threw = false;
    try {
      while (f.next()) ++good;
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()) == "example 17 is unreadable";
    }
    CHECK(threw);
    CHECK(good == 4);  // batches 0-3 (examples 0-15); batch 4 holds example 17
    f.begin_epoch(1);  // a new epoch after the failure starts over
    CHECK(f.next());
  }
}
