// kiln/data/loader.hpp: batches of a dataset, as torch.utils.data.DataLoader gives them:
// shuffled by a seeded generator (epoch e's order depends on the seed and e alone, so a run
// resumed at an epoch sees the batches it would have seen), the last short batch kept or
// dropped, and the next batch gathered on a background thread while the caller trains on the
// current one, into storage reused from batch to batch.
//
//   auto images = io::read_idx(dir / "train-images-idx3-ubyte.gz", {...});     // [n, 28, 28]
//   auto labels = io::read_idx(dir / "train-labels-idx1-ubyte.gz", {...});     // [n]
//   data::loader batches(data::tensor_dataset({images.reshape(dims{dyn, 784}), labels}),
//                        {.batch = 64, .shuffle = true, .seed = 1});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     batches.begin_epoch(epoch);
//     while (auto b = batches.next()) step({{"x", (*b)[0]}, {"y", (*b)[1]}});
//   }
//
// A batch's tensors are views of the loader's storage, valid until the next call to next() or
// begin_epoch(): one the caller still holds then keeps its values (the loader gathers into new
// storage instead of that one). Datasets: tensor_dataset (rows of tensors along axis 0),
// token_windows (a corpus of token ids cut into windows, each with its next-token targets), or
// your own class derived from data::dataset.
#pragma once

#include <algorithm>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../core/random.hpp"
#include "../core/tensor.hpp"
#include "../debug/profiler.hpp"

namespace kiln::data {

/// Examples, each a row of every column (tensors that share their first extent).
class dataset {
 public:
  virtual ~dataset() = default;
  /// Number of examples.
  virtual index_t size() const = 0;
  /// Each column's dtype and its shape with the first extent the batch's (given).
  virtual std::vector<std::pair<dtype, dims>> columns(index_t batch) const = 0;
  /// Writes examples idx[0], idx[1], ... into rows 0, 1, ... of each column of `out` (contiguous,
  /// shaped as columns(idx.size()) says). Called from the loader's thread.
  virtual void gather(const std::vector<index_t>& idx, std::vector<any_tensor>& out) const = 0;
};

/// Rows of tensors along axis 0: example i is row i of each (torch.utils.data.TensorDataset).
class tensor_dataset : public dataset {
 public:
  /// Throws shape_error unless every tensor has rank >= 1 and the same first extent.
  KILN_RUNTIME explicit tensor_dataset(std::vector<any_tensor> tensors);
  index_t size() const override { return t_[0].shape().e[0]; }
  KILN_RUNTIME std::vector<std::pair<dtype, dims>> columns(index_t batch) const override;
  KILN_RUNTIME void gather(const std::vector<index_t>& idx, std::vector<any_tensor>& out) const override;

 private:
  std::vector<any_tensor> t_;
};

/// A corpus of token ids (a rank-1 integer tensor) cut into windows of `length` tokens every
/// `stride` tokens: example i is the input tokens[i stride, i stride + length) and the targets
/// tokens[i stride + 1, i stride + length + 1), both [length] of the corpus's dtype.
class token_windows : public dataset {
 public:
  KILN_RUNTIME token_windows(any_tensor tokens, index_t length, index_t stride);
  index_t size() const override {
    const index_t n = t_.numel();
    return n < length_ + 1 ? 0 : (n - length_ - 1) / stride_ + 1;
  }
  std::vector<std::pair<dtype, dims>> columns(index_t batch) const override {
    return {{t_.dt(), dims{batch, length_}}, {t_.dt(), dims{batch, length_}}};
  }
  KILN_RUNTIME void gather(const std::vector<index_t>& idx, std::vector<any_tensor>& out) const override;

 private:
  any_tensor t_;
  index_t length_, stride_;
};

struct loader_options {
  index_t batch = 64;
  bool shuffle = true;
  bool drop_last = false;  ///< leave out the last batch of an epoch if it is short
  std::uint64_t seed = 0;  ///< epoch e's order: a shuffle by (seed, e)
  bool prefetch = true;    ///< gather the next batch on a background thread
};

/// Batches of a dataset, epoch by epoch (see the top of this file).
class loader {
 public:
  KILN_RUNTIME loader(std::shared_ptr<const dataset> d, loader_options o);
  template <class D>
    requires std::derived_from<D, dataset>
  loader(D d, loader_options o) : loader(std::make_shared<const D>(std::move(d)), o) {}
  KILN_RUNTIME ~loader();
  loader(const loader&) = delete;
  loader& operator=(const loader&) = delete;

  const dataset& data() const { return *d_; }
  /// Batches in an epoch.
  index_t batches() const {
    const index_t n = d_->size();
    return o_.drop_last ? n / o_.batch : (n + o_.batch - 1) / o_.batch;
  }

  /// Starts epoch e (from its first batch).
  KILN_RUNTIME void begin_epoch(std::uint64_t e);

  /// The epoch's next batch (each column [b, ...]), or nothing at its end.
  KILN_RUNTIME std::optional<std::vector<any_tensor>> next();

  /// Seconds next() has waited for batches not yet gathered (prefetch keeps it near 0).
  double waited() const { return waited_; }

 private:
  index_t rows(index_t k) const { return std::min(o_.batch, d_->size() - k * o_.batch); }

  /// Gathers batch k into slot s (new storage where the caller still holds the slot's).
  KILN_RUNTIME void fill(int s, index_t k);
  KILN_RUNTIME void start_worker();
  KILN_RUNTIME void stop_worker();

  std::shared_ptr<const dataset> d_;
  loader_options o_;
  std::vector<index_t> order_;
  index_t next_ = 0, handed_ = -1;
  std::vector<any_tensor> slot_[2];
  std::thread worker_;
  std::mutex m_;
  std::condition_variable cv_;
  index_t ready_[2] = {-1, -1};
  bool quit_ = false, started_ = false;
  std::exception_ptr error_;
  double waited_ = 0;
};

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME tensor_dataset::tensor_dataset(std::vector<any_tensor> tensors) : t_(std::move(tensors)) {
  if (t_.empty()) throw std::invalid_argument("kiln::data::tensor_dataset: no tensors");
  for (any_tensor& t : t_) {
    if (t.rank() < 1 || t.shape().e[0] != t_[0].shape().e[0])
      throw shape_error("tensor_dataset", t_[0].shape(), t.shape(), "need one first extent (rows)");
    t = t.contiguous();
  }
}
KILN_RUNTIME std::vector<std::pair<dtype, dims>> tensor_dataset::columns(index_t batch) const {
  std::vector<std::pair<dtype, dims>> c;
  for (const any_tensor& t : t_) {
    dims d = t.shape();
    d.e[0] = batch;
    c.push_back({t.dt(), d});
  }
  return c;
}
KILN_RUNTIME void tensor_dataset::gather(const std::vector<index_t>& idx, std::vector<any_tensor>& out) const {
  for (std::size_t c = 0; c < t_.size(); ++c) {
    const std::size_t row = static_cast<std::size_t>(t_[c].numel() / std::max<index_t>(size(), 1)) * size_of(t_[c].dt());
    for (std::size_t r = 0; r < idx.size(); ++r)
      std::memcpy(out[c].bytes() + r * row, t_[c].bytes() + static_cast<std::size_t>(idx[r]) * row, row);
  }
}

KILN_RUNTIME token_windows::token_windows(any_tensor tokens, index_t length, index_t stride)
    : t_(tokens.contiguous()), length_(length), stride_(stride) {
  if (t_.rank() != 1 || !is_integral(t_.dt()) || t_.dt() == dtype::boolean)
    throw std::invalid_argument("kiln::data::token_windows: the corpus must be a vector of integer token ids");
  if (length < 1 || stride < 1)
    throw std::invalid_argument("kiln::data::token_windows: length and stride must be positive");
}
KILN_RUNTIME void token_windows::gather(const std::vector<index_t>& idx, std::vector<any_tensor>& out) const {
  const std::size_t e = size_of(t_.dt()), row = static_cast<std::size_t>(length_) * e;
  for (std::size_t r = 0; r < idx.size(); ++r) {
    const std::size_t at = static_cast<std::size_t>(idx[r] * stride_) * e;
    std::memcpy(out[0].bytes() + r * row, t_.bytes() + at, row);
    std::memcpy(out[1].bytes() + r * row, t_.bytes() + at + e, row);
  }
}

KILN_RUNTIME loader::loader(std::shared_ptr<const dataset> d, loader_options o) : d_(std::move(d)), o_(o) {
  if (!d_) throw std::invalid_argument("kiln::data::loader: no dataset");
  if (o_.batch < 1) throw std::invalid_argument("kiln::data::loader: the batch must be positive");
}
KILN_RUNTIME loader::~loader() { stop_worker(); }

KILN_RUNTIME void loader::begin_epoch(std::uint64_t e) {
  stop_worker();
  const index_t n = d_->size();
  order_.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) order_[static_cast<std::size_t>(i)] = i;
  if (o_.shuffle) {  // Fisher-Yates with philox (core/random.hpp): the same order on every machine
    const philox rng(o_.seed, 0x6c6f61646572ULL ^ e);
    for (index_t i = n - 1; i > 0; --i) {
      const std::uint64_t j = rng.below(static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i + 1));
      std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
    }
  }
  next_ = 0;
  handed_ = -1;
  started_ = true;
  if (o_.prefetch && batches() > 0) start_worker();
}

KILN_RUNTIME std::optional<std::vector<any_tensor>> loader::next() {
  if (!started_) throw std::logic_error("kiln::data::loader: next() before begin_epoch()");
  if (next_ >= batches()) return std::nullopt;
  const index_t k = next_++;
  const int s = static_cast<int>(k % 2);
  if (!o_.prefetch) {
    fill(s, k);
  } else {
    std::unique_lock<std::mutex> l(m_);
    if (ready_[s] != k) {  // not gathered yet: the step waits for its data
      profiling::recorder* prof = profiling::active();
      const std::int64_t t0 = profiling::now();
      cv_.wait(l, [&] { return ready_[s] == k || error_; });
      const std::int64_t t1 = profiling::now();
      waited_ += static_cast<double>(t1 - t0) / 1e9;
      if (prof) prof->add("(waiting for data)", false, 0, t0, t1, 0, 0);
    }
    if (error_) std::rethrow_exception(error_);
    handed_ = k;  // the other slot, the previous batch's, may be filled now
    cv_.notify_all();
  }
  std::vector<any_tensor> out = slot_[s];
  if (out[0].shape().e[0] != rows(k))  // a short last batch: the first rows of the slot
    for (any_tensor& t : out) t = t.slice(0, 0, rows(k));
  return out;
}

KILN_RUNTIME void loader::fill(int s, index_t k) {
  std::vector<any_tensor>& slot = slot_[s];
  bool fresh = slot.empty();
  for (const any_tensor& t : slot) fresh = fresh || t.use_count() > 1;
  if (fresh) {
    slot.clear();
    for (const auto& [dt, shape] : d_->columns(o_.batch)) slot.emplace_back(dt, shape, uninitialized);
  }
  const index_t n = rows(k);
  const std::vector<index_t> idx(order_.begin() + k * o_.batch, order_.begin() + k * o_.batch + n);
  d_->gather(idx, slot);
}

KILN_RUNTIME void loader::start_worker() {
  ready_[0] = ready_[1] = -1;
  error_ = nullptr;
  quit_ = false;
  worker_ = std::thread([this] {
    for (index_t k = 0; k < batches(); ++k) {
      const int s = static_cast<int>(k % 2);
      {
        // slot s held batch k - 2: free once the caller has taken batch k - 1
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return quit_ || handed_ >= k - 1; });
        if (quit_) return;
      }
      try {
        fill(s, k);
      } catch (...) {
        std::lock_guard<std::mutex> l(m_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::lock_guard<std::mutex> l(m_);
      ready_[s] = k;
      cv_.notify_all();
    }
  });
}

KILN_RUNTIME void loader::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(m_);
    quit_ = true;
  }
  cv_.notify_all();
  worker_.join();
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::data
