// kiln/backend/cpu/parallel.hpp: the CPU backend's threads. parallel_for splits [0, n) into
// contiguous chunks, a few per thread, that threads take as they come free; outside a team
// they run on OpenMP when the compiler has it on (-fopenmp defines _OPENMP; the kiln::kiln
// target adds it when OpenMP is found; KILN_NO_OPENMP keeps kiln off it), else on a small pool
// of std::threads that lives as long as the program; teams (with_team) run on that pool in
// every build. The thread count is settable and defaults to all cores
// (std::thread::hardware_concurrency, or KILN_NUM_THREADS from the environment).
// A compiled call big enough to thread runs its kernels with one team (with_team): the pool's
// workers spin on kiln's job slots between kernels instead of going back to OpenMP, which
// under OMP_WAIT_POLICY=passive would put them to sleep after each kernel, so that every kernel
// would pay for waking them; they keep spinning for pool::worker_spin after the call.
#pragma once

#include <atomic>
#include <cstdint>

#include "../../core/config.hpp"

// (KILN_HAVE_OPENMP, which the CMake target also defines, is no longer needed: -fopenmp alone
// gives OpenMP, as a user building without CMake expects)
#if defined(_OPENMP) && !defined(KILN_NO_OPENMP)
#define KILN_USE_OPENMP 1
#endif

namespace kiln::cpu {

namespace detail {
/// KILN_NUM_THREADS, else the hardware's thread count.
KILN_RUNTIME int default_threads();
/// The thread count that num_threads() reports and set_num_threads() sets: atomic, since one
/// thread may set it while another's call reads it (that call uses the old or the new count).
KILN_RUNTIME std::atomic<int>& thread_setting();
/// True while this thread runs a chunk of a parallel_for: a nested parallel_for then runs
/// serially (the pool runs one region at a time, so waiting for it there would deadlock).
inline bool& in_parallel_region() {
  thread_local bool inside = false;
  return inside;
}

/// The parallel_for calls this thread made that ran split among more than one thread (a team's,
/// the pool's or OpenMP's): what stats().threaded counts per kernel.
inline long& split_loops() {
  thread_local long n = 0;
  return n;
}

class team;
/// The team this thread runs a compiled call with, if any.
inline team*& current_team() {
  thread_local team* t = nullptr;
  return t;
}
}  // namespace detail

/// Threads used by the CPU backend's parallel loops.
inline int num_threads() { return detail::thread_setting().load(std::memory_order_relaxed); }
/// Sets the thread count (at least 1); returns the previous one.
inline int set_num_threads(int n) {
  return detail::thread_setting().exchange(n > 0 ? n : 1, std::memory_order_relaxed);
}

/// Chunks per thread of a parallel_for with enough work for them: threads take the next
/// chunk when done with one, so a thread that another process delays (a shared machine) or
/// that meets slower memory holds up the others by one chunk at most, not by half the work.
inline constexpr int chunks_per_thread = 8;

namespace detail {
/// A parallel_for or with_team body behind a pointer. The threads' code (the split, OpenMP's
/// regions, the pool's and a team's jobs) is run-time code compiled once, not once per lambda
/// that a kernel hands parallel_for (each instantiation would carry two outlined OpenMP regions
/// and the pool's fallback).
struct body_ref {
  void (*call)(void*, index_t, index_t);
  void* ctx;
};
KILN_RUNTIME void parallel_for_ref(index_t n, index_t grain, body_ref fn, int per_thread);
KILN_RUNTIME void with_team_ref(body_ref body);
/// fn(begin, end), or with Nullary fn(), behind a body_ref.
template <bool Nullary, class Fn>
body_ref body_of(Fn& fn) {
  return {[](void* c, index_t b, index_t e) {
            if constexpr (Nullary) (*static_cast<Fn*>(c))();
            else (*static_cast<Fn*>(c))(b, e);
          },
          const_cast<void*>(static_cast<const void*>(&fn))};
}
}  // namespace detail

/// Calls fn(begin, end) on contiguous chunks that cover [0, n), in parallel when there are at
/// least 2 * grain items and more than one thread: up to per_thread chunks per thread (each
/// of at least `grain` items), as equal as possible, taken in order by whichever thread is
/// free; with per_thread = 1, one chunk for each thread. Each call sees a non-empty range. fn
/// must not throw.
template <class F>
void parallel_for(index_t n, index_t grain, F&& fn, int per_thread = chunks_per_thread) {
  detail::parallel_for_ref(n, grain, detail::body_of<false>(fn), per_thread);
}

/// Runs body() on the calling thread with a team of num_threads() threads (more than one, not
/// already inside kiln's or the program's parallel region): the other threads serve the
/// parallel_for calls of body (detail::team), spinning between them, so a compiled call wakes
/// its threads at most once rather than once per threaded kernel. The team's other threads are
/// kiln's pool, whose workers spin for pool::worker_spin after a job before they sleep, so calls
/// in quick succession find them awake; an OpenMP region's threads would be asleep again after
/// every call under OMP_WAIT_POLICY=passive (the bench's setting), and waking them would cost
/// every call of a small product a noticeable share of its time. Where another thread's call
/// holds the pool, the team is an OpenMP region (OpenMP builds) or there is none (body's
/// parallel_for calls then run on the calling thread while the pool is held). The caller does
/// not wait for pool workers that have not woken up by the end of body. An exception from
/// body() ends the team and is rethrown here.
template <class F>
void with_team(F&& body) {
  detail::with_team_ref(detail::body_of<true>(body));
}
}  // namespace kiln::cpu

// The pool, teams and the threads' code: run-time code only (a unit that only declares it
// does not parse <thread>, <condition_variable> and the rest).
#if KILN_DEFINE_RUNTIME
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/env.hpp"
#if defined(KILN_USE_OPENMP)
#include <omp.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

namespace kiln::cpu::detail {

/// Waits until done() holds: spins (yielding the core to any thread that wants it) for up to
/// `spin`, then returns false if it still does not hold.
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds spin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::yield();
    }
  }
}

/// Runs chunk c of a job. A chunk must not throw (parallel_for's contract; with_team catches
/// body's exceptions): one that does ends the program here, loudly, rather than leaving the
/// pool or a team with a job that never finishes.
inline void run_chunk(const std::function<void(int)>& fn, int c) noexcept { fn(c); }

/// A fixed pool of workers that run one parallel_for (or one with_team call, for its whole
/// length) at a time, with the calling thread.
/// Between jobs a worker spins for a while before it sleeps, and the caller spins for the
/// workers' last chunks before it sleeps: a sleeping thread that is woken up may be placed on
/// a busy core (the waker's, when the other cores run other programs) and start a scheduler
/// slice late, which on a shared machine halved the speed of kernels of a millisecond or two.
class pool {
 public:
  /// The process's pool. In the child of a fork() it is a new one, made by the child handler
  /// (pthread_atfork): the child has only the thread that forked, not the parent pool's workers,
  /// and the parent pool's mutexes may be held, and its condition variables waited on, by
  /// threads that are not there. That pool is left alone (never destroyed: its destructor
  /// would join threads that do not exist, and hang the child's exit).
  KILN_RUNTIME static pool& get();
  /// Runs fn(0) ... fn(chunks - 1) on the calling thread and threads - 1 workers, each taking
  /// the next chunk when it is done with one (chunks == threads: exactly one each, unless
  /// caller_takes_rest: the caller then takes, after chunk 0, every chunk that no worker has
  /// started, rather than wait for workers to wake up for them).
  /// The calling thread runs chunk 0 (with_team relies on it).
  KILN_RUNTIME void run(int chunks, int threads, const std::function<void(int)>& fn, bool caller_takes_rest = false);
  /// As run, if no other thread's region holds the pool; else false, having run nothing.
  KILN_RUNTIME bool try_run(int chunks, int threads, const std::function<void(int)>& fn,
                            bool caller_takes_rest = false);
  KILN_RUNTIME ~pool();

 private:
  static constexpr std::chrono::microseconds worker_spin{200}, caller_spin{2000};

  /// Whether each worker takes one chunk (and the caller chunk 0) rather than chunks as it
  /// comes free.
  bool one_each() const { return chunks_ == helpers_total_ + 1; }

  KILN_RUNTIME void run_locked(int chunks, int threads, const std::function<void(int)>& fn, bool caller_takes_rest);
  KILN_RUNTIME void grow(int n);
  KILN_RUNTIME void loop();
  /// Runs chunks of the current job until none is left, or, with just_one, after one (l is
  /// held on entry and exit).
  KILN_RUNTIME void take(std::unique_lock<std::mutex>& l, bool just_one);
  std::mutex call_mutex_, m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0, next_ = 0, pending_ = 0, helpers_ = 0, helpers_total_ = 0;
  unsigned generation_ = 0;
  std::atomic<unsigned> generation_seen_{0};  ///< generation_, for spinning workers
  std::atomic<int> pending_seen_{0};          ///< pending_, for the spinning caller
  bool stop_ = false;
  pool* before_fork_ = nullptr;  ///< in a fork()'s child: the parent's pool (see get)
  friend struct pool_owner;
};

/// Whether this process is the child of a fork() made after kiln's first threaded call (see
/// watch_fork).
inline bool& forked_child() {
  static bool forked = false;
  return forked;
}
/// The child of a fork() has only the thread that forked. kiln's pool is renewed (pool::get),
/// and OpenMP is not used again: GNU libgomp's next parallel region in the child waits for
/// the parent's threads, which are not there (seen with g++ 12, the parent having run a
/// region), so parallel_for runs on kiln's pool instead.
KILN_RUNTIME void after_fork_in_child();
/// Has after_fork_in_child run in the child of each later fork() (called before any threads
/// start: by parallel_for and by the pool's owner). A fork() from inside a kiln
/// call (a with_team body, a parallel_for chunk) is not supported: the child's copy of that
/// call waits for threads that are not there.
KILN_RUNTIME void watch_fork();

/// Owns the process's pool; in a fork()'s child, a new one (see pool::get).
struct pool_owner {
  pool* p = new pool;
  KILN_RUNTIME pool_owner();
  /// Deletes the pool; in a fork()'s child the parent's stays, still reachable from here (leak
  /// checkers run after this): deleting it would join threads that are not there.
  KILN_RUNTIME ~pool_owner();
  /// In a fork()'s child: a fresh pool; the parent's is kept (see ~pool_owner).
  KILN_RUNTIME void renew();
  /// The owner once made (null before, and while another thread makes it: a fork() then
  /// leaves the child to make its own).
  static std::atomic<pool_owner*>& live() {
    static std::atomic<pool_owner*> o{nullptr};
    return o;
  }
  pool_owner(const pool_owner&) = delete;
  pool_owner& operator=(const pool_owner&) = delete;
  KILN_RUNTIME static pool_owner& instance();
};

/// The threads of one compiled call (see with_team): the calling thread runs the plan and posts
/// each parallel_for to the others, which spin (yielding the core now and then) between jobs
/// instead of going back to OpenMP, where OMP_WAIT_POLICY=passive puts them to sleep after
/// every region and each later region must wake them (waking a sleeping thread, on a virtual
/// CPU above all, can take as long as a small kernel runs). Chunks are taken as threads come
/// free, whatever the team's size (OpenMP, the fallback, may give fewer threads than asked).
class team {
 public:
  /// Threads in the team, the caller's included (set by the caller, read only by it).
  int size() const { return size_; }
  void set_size(int n) { size_ = n; }
  /// The caller's side: runs fn(0) ... fn(chunks - 1) with the team; returns when all are done.
  KILN_RUNTIME void run(int chunks, const std::function<void(int)>& fn);
  /// The other threads' side: runs the jobs posted until close().
  KILN_RUNTIME void serve();
  /// Ends serve() once the last job is done (the caller's run has returned).
  void close() { closed_.store(true, std::memory_order_release); }

 private:
  /// Takes chunks of job g until none is left. The counter holds the job's number in its high
  /// half, so a thread still looking at an earlier job takes nothing of a later one. Job g's
  /// function and chunk count are in slot g % 2: the caller writes job g + 1's into the other
  /// slot while the counter still shows job g, all of whose chunks may be taken by then, so a
  /// thread that is late for job g reads job g's count and takes nothing. With one slot for
  /// both it could read job g + 1's larger count, take chunk c of job g + 1 under job g's
  /// number before the caller published job g + 1 (that chunk then ran twice), and its extra
  /// decrement of pending_ would leave the caller waiting forever (tests/test_gemm.cpp's stress
  /// test of many short jobs).
  KILN_RUNTIME void take(std::uint64_t g);
  struct slot {
    std::atomic<const std::function<void(int)>*> job{nullptr};
    std::atomic<int> chunks{0};
  };
  int size_ = 1;
  slot slots_[2];                       ///< job g's function and chunk count in slots_[g % 2]
  std::atomic<std::uint64_t> next_{0};  ///< job number << 32 | next chunk
  std::atomic<int> pending_{0};
  std::atomic<bool> closed_{false};
};

KILN_RUNTIME int default_threads() {
  // (at most 65536, which also keeps the count within an int)
  if (const auto n = kiln::detail::env_integer("KILN_NUM_THREADS", 1))
    return static_cast<int>(std::min<long long>(*n, 1 << 16));
  const unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

KILN_RUNTIME std::atomic<int>& thread_setting() {
  static std::atomic<int> n{default_threads()};
  return n;
}

KILN_RUNTIME void pool::run(int chunks, int threads, const std::function<void(int)>& fn, bool caller_takes_rest) {
  std::unique_lock<std::mutex> call(call_mutex_);  // one parallel region at a time
  run_locked(chunks, threads, fn, caller_takes_rest);
}

KILN_RUNTIME bool pool::try_run(int chunks, int threads, const std::function<void(int)>& fn, bool caller_takes_rest) {
  std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
  if (!call.owns_lock()) return false;
  run_locked(chunks, threads, fn, caller_takes_rest);
  return true;
}

KILN_RUNTIME pool::~pool() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
    generation_seen_.store(++generation_, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

KILN_RUNTIME void pool::run_locked(int chunks, int threads, const std::function<void(int)>& fn,
                                   bool caller_takes_rest) {
  grow(threads - 1);
  std::unique_lock<std::mutex> l(m_);
  job_ = &fn;
  chunks_ = chunks;
  next_ = 1;  // chunk 0 is the caller's
  pending_ = chunks;
  pending_seen_.store(chunks, std::memory_order_relaxed);
  helpers_ = helpers_total_ = threads - 1;
  generation_seen_.store(++generation_, std::memory_order_release);
  l.unlock();
  cv_.notify_all();  // the workers that sleep; spinning ones see generation_seen_
  run_chunk(fn, 0);
  l.lock();
  pending_seen_.store(--pending_, std::memory_order_release);
  if (caller_takes_rest || !one_each()) take(l, false);  // with one chunk each, the caller's was chunk 0
  if (pending_ != 0) {
    l.unlock();
    spin_until([&] { return pending_seen_.load(std::memory_order_acquire) == 0; }, caller_spin);
    l.lock();
    done_.wait(l, [&] { return pending_ == 0; });
  }
  job_ = nullptr;
}

KILN_RUNTIME void pool::grow(int n) {
  while (static_cast<int>(workers_.size()) < n) workers_.emplace_back([this] { loop(); });
}

KILN_RUNTIME void pool::loop() {
  unsigned seen = 0;
  std::unique_lock<std::mutex> l(m_);
  for (;;) {
    if (!(stop_ || generation_ != seen)) {
      l.unlock();
      spin_until([&] { return generation_seen_.load(std::memory_order_acquire) != seen; }, worker_spin);
      l.lock();
    }
    cv_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    // Nothing to do when the pool was grown for more threads than this region uses, or the
    // job's chunks are all taken (a with_team caller takes those of workers that woke late):
    // back to spinning, so that the next job finds this worker awake.
    if (helpers_ == 0 || next_ >= chunks_) continue;
    --helpers_;
    take(l, one_each());
  }
}

KILN_RUNTIME void pool::take(std::unique_lock<std::mutex>& l, bool just_one) {
  while (next_ < chunks_) {
    const int c = next_++;
    const std::function<void(int)>* job = job_;
    l.unlock();
    run_chunk(*job, c);
    l.lock();
    pending_seen_.store(--pending_, std::memory_order_release);
    if (pending_ == 0) done_.notify_one();
    if (just_one) break;
  }
}

KILN_RUNTIME void watch_fork() {
#if defined(__unix__) || defined(__APPLE__)
  static const bool watching = [] {
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    return true;
  }();
  (void)watching;
#endif
}

KILN_RUNTIME pool_owner::pool_owner() {
  watch_fork();
  live().store(this, std::memory_order_release);
}

KILN_RUNTIME pool_owner::~pool_owner() {
  live().store(nullptr, std::memory_order_release);
  pool* const parent = p->before_fork_;
  delete p;
  p = parent;
}

KILN_RUNTIME void pool_owner::renew() {
  pool* const fresh = new pool;
  fresh->before_fork_ = p;
  p = fresh;
}

KILN_RUNTIME pool_owner& pool_owner::instance() {
  static pool_owner o;
  return o;
}

KILN_RUNTIME pool& pool::get() { return *pool_owner::instance().p; }

KILN_RUNTIME void after_fork_in_child() {
  forked_child() = true;
  if (pool_owner* const o = pool_owner::live().load(std::memory_order_acquire)) o->renew();
}

KILN_RUNTIME void team::run(int chunks, const std::function<void(int)>& fn) {
  const std::uint64_t g = (next_.load(std::memory_order_relaxed) >> 32) + 1;
  slot& s = slots_[g & 1];
  s.job.store(&fn, std::memory_order_relaxed);
  s.chunks.store(chunks, std::memory_order_relaxed);
  pending_.store(chunks, std::memory_order_relaxed);
  next_.store(g << 32, std::memory_order_release);  // publishes the slot and pending_
  take(g);
  for (int i = 1; pending_.load(std::memory_order_acquire) != 0; ++i)
    if (i % 64 == 0) std::this_thread::yield();
}

KILN_RUNTIME void team::serve() {
  std::uint64_t seen = 0;
  for (int i = 1;; ++i) {
    const std::uint64_t g = next_.load(std::memory_order_acquire) >> 32;
    if (g != seen) {
      seen = g;
      take(g);
      i = 0;
    } else if (closed_.load(std::memory_order_acquire)) {
      return;
    } else if (i % 64 == 0) {
      std::this_thread::yield();
    }
  }
}

KILN_RUNTIME void team::take(std::uint64_t g) {
  const slot& s = slots_[g & 1];
  const std::function<void(int)>* job = s.job.load(std::memory_order_relaxed);
  const int chunks = s.chunks.load(std::memory_order_relaxed);
  std::uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    if ((v >> 32) != g || static_cast<int>(v & 0xffffffffu) >= chunks) return;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    run_chunk(*job, static_cast<int>(v & 0xffffffffu));
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    v = next_.load(std::memory_order_acquire);
  }
}

KILN_RUNTIME void parallel_for_ref(index_t n, index_t grain, body_ref fn, int per_thread) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const index_t by_grain = n / grain;
  team* const t = current_team();
  const int threads = static_cast<int>(std::min<index_t>(t ? t->size() : num_threads(), by_grain > 1 ? by_grain : 1));
  if (threads <= 1 || in_parallel_region()) {
    fn.call(fn.ctx, index_t{0}, n);
    return;
  }
  const int chunks = static_cast<int>(std::min<index_t>(index_t{threads} * std::max(1, per_thread), by_grain));
  auto chunk = [&](int c) {
    const index_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b >= e) return;
    in_parallel_region() = true;
    fn.call(fn.ctx, b, e);
    in_parallel_region() = false;
  };
  if (t) {
    const std::function<void(int)> job = chunk;
    t->run(chunks, job);
    ++split_loops();
    return;
  }
  watch_fork();
#if defined(KILN_USE_OPENMP)
  if (!forked_child()) {
    if (chunks == threads) {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
      for (int c = 0; c < chunks; ++c) chunk(c);
    } else {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
      for (int c = 0; c < chunks; ++c) chunk(c);
    }
    ++split_loops();
    return;
  }
#endif
  // Another thread's region (a parallel_for, or a with_team call for its whole body) may hold
  // the pool: this loop then runs on the calling thread rather than wait for it (a body that
  // waits for this thread would never end).
  const std::function<void(int)> job = chunk;
  if (pool::get().try_run(chunks, threads, job)) ++split_loops();
  else fn.call(fn.ctx, index_t{0}, n);
}

KILN_RUNTIME void with_team_ref(body_ref body) {
  const int threads = num_threads();
  bool in_omp = false;
#if defined(KILN_USE_OPENMP)
  in_omp = omp_in_parallel();
#endif
  if (threads > 1 && !in_parallel_region() && !current_team() && !in_omp) {
    std::exception_ptr error;
    team t;
    auto lead = [&] {
      if (t.size() > 1) current_team() = &t;
      try {
        body.call(body.ctx, 0, 0);
      } catch (...) {
        error = std::current_exception();
      }
      current_team() = nullptr;
      t.close();
    };
    t.set_size(threads);
    const std::function<void(int)> job = [&](int c) {
      if (c == 0) lead();  // the pool runs chunk 0 on the calling thread
      else t.serve();
    };
    // The caller, done with body, takes the serve() chunks of workers that have not woken up
    // (they return at once, the team being closed) rather than wait for them to wake.
    if (pool::get().try_run(threads, threads, job, true)) {
      if (error) std::rethrow_exception(error);
      return;
    }
#if defined(KILN_USE_OPENMP)
    if (!forked_child()) {
#pragma omp parallel num_threads(threads)
      {
        if (omp_get_thread_num() != 0) {
          t.serve();
        } else {
          t.set_size(omp_get_num_threads());
          lead();
        }
      }
      if (error) std::rethrow_exception(error);
      return;
    }
#endif
  }
  body.call(body.ctx, 0, 0);
}

}  // namespace kiln::cpu::detail
#endif  // KILN_DEFINE_RUNTIME
