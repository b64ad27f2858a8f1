// kiln/backend/cpu/parallel.hpp: the CPU backend's threads. parallel_for splits [0, n) into
// contiguous chunks, one per thread, and runs them on OpenMP when kiln is built with it
// (KILN_HAVE_OPENMP, set by the kiln::kiln target when OpenMP is found), else on a small pool of
// std::threads that lives as long as the program. The thread count is settable and defaults to
// all cores (std::thread::hardware_concurrency, or KILN_NUM_THREADS from the environment).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/config.hpp"

#if defined(KILN_HAVE_OPENMP) && defined(_OPENMP)
#include <omp.h>
#endif

namespace kiln::cpu {

namespace detail {
inline int default_threads() {
  if (const char* e = std::getenv("KILN_NUM_THREADS")) {
    const int n = std::atoi(e);
    if (n > 0) return n;
  }
  const unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}
inline int& thread_setting() {
  static int n = default_threads();
  return n;
}
/// True while this thread runs a chunk of a parallel_for: a nested parallel_for then runs
/// serially (the pool runs one region at a time, so waiting for it there would deadlock).
inline bool& in_parallel_region() {
  thread_local bool inside = false;
  return inside;
}

/// A fixed pool of workers that run one parallel_for at a time; the calling thread runs chunk 0.
class pool {
 public:
  static pool& get() {
    static pool p;
    return p;
  }
  void run(int chunks, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> call(call_mutex_);  // one parallel region at a time
    grow(chunks - 1);
    {
      std::lock_guard<std::mutex> l(m_);
      job_ = &fn;
      chunks_ = chunks;
      next_ = 1;
      pending_ = chunks - 1;
      ++generation_;
    }
    cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> l(m_);
    done_.wait(l, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
  ~pool() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void grow(int n) {
    while (static_cast<int>(workers_.size()) < n) workers_.emplace_back([this] { loop(); });
  }
  void loop() {
    unsigned seen = 0;
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || (generation_ != seen && next_ < chunks_); });
      if (stop_) return;
      seen = generation_;
      while (next_ < chunks_) {
        const int c = next_++;
        const std::function<void(int)>* job = job_;
        l.unlock();
        (*job)(c);
        l.lock();
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }
  std::mutex call_mutex_, m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0, next_ = 0, pending_ = 0;
  unsigned generation_ = 0;
  bool stop_ = false;
};
}  // namespace detail

/// Threads used by the CPU backend's parallel loops.
inline int num_threads() { return detail::thread_setting(); }
/// Sets the thread count (at least 1); returns the previous one.
inline int set_num_threads(int n) {
  const int old = detail::thread_setting();
  detail::thread_setting() = n > 0 ? n : 1;
  return old;
}

/// Calls fn(begin, end) on contiguous chunks that cover [0, n), in parallel when there are at
/// least 2 * grain items and more than one thread. Chunks are as equal as possible; each call
/// sees a non-empty range. fn must not throw.
template <class F>
void parallel_for(index_t n, index_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const index_t by_grain = n / grain;
  const int chunks = static_cast<int>(std::min<index_t>(num_threads(), by_grain > 1 ? by_grain : 1));
  if (chunks <= 1 || detail::in_parallel_region()) {
    fn(index_t{0}, n);
    return;
  }
  auto chunk = [&](int c) {
    const index_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b >= e) return;
    detail::in_parallel_region() = true;
    fn(b, e);
    detail::in_parallel_region() = false;
  };
#if defined(KILN_HAVE_OPENMP) && defined(_OPENMP)
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int c = 0; c < chunks; ++c) chunk(c);
#else
  const std::function<void(int)> job = chunk;
  detail::pool::get().run(chunks, job);
#endif
}

}  // namespace kiln::cpu
