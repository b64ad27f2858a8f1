// Concurrency: one compiled plan called from several threads at once, while another thread
// changes the thread count, gives the bits of a serial call. CI runs this test, with the
// threaded tests of test_gemm and test_tensor, under ThreadSanitizer (.ci/run).
#include "cpu_support.hpp"

#include <atomic>
#include <thread>

using namespace kiln;

TEST_CASE("one plan called from three threads at once, as the thread count changes, gives the serial bits") {
  using X = input<"x", f32, shape<dyn, 96>>;
  using W = input<"w", f32, shape<96, 40>>;
  // a threaded GEMM, row kernels (softmax) and a pointwise kernel with a reduction, on rows
  // enough to split among threads
  const auto f = compile(outputs(softmax(matmul(X{}, W{})), exp(X{}) * sum<1>(X{}, keepdim)));
  const tensor<float, 2> x = kt::random<float, 2>({1500, 96}), w = kt::random<float, 2>({96, 40});
  const int old = cpu::set_num_threads(3);
  const std::vector<any_tensor> want = f(X{} = x, W{} = w);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, calls{0};
  std::thread changer([&] {
    for (int n = 1; !done; n = n % 3 + 1) {
      cpu::set_num_threads(n);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&] {
      for (int call = 0; call < 8; ++call) {
        const std::vector<any_tensor> got = f(X{} = x, W{} = w);
        for (std::size_t q = 0; q < want.size(); ++q) bad += !kt::same_bits(got[q], want[q]);
        ++calls;
      }
    });
  for (std::thread& c : callers) c.join();
  done = true;
  changer.join();
  cpu::set_num_threads(old);
  CHECK(calls == 24);
  CHECK(bad == 0);
}

TEST_CASE("copies of over a megabyte, split among threads: concats of strided operands, a broadcast, outputs") {
  using X = input<"x", f32, shape<600, 700>>;
  using YT = input<"yt", f32, shape<300, 600>>;
  using C = input<"c", f32, shape<1, 700>>;
  // concat's halves: one contiguous, one a transposed view (strided rows); a row broadcast to
  // 600 rows; an output that is a strided slice of an input, copied out
  const auto e = outputs(concat<1>(X{}, transpose(YT{})), concat<0>(X{}, broadcast_to<600, 700>(C{})),
                         slice<1, 1, 700, 2>(X{}));
  const double worst = kt::cpu_vs_eager(e, {{"x", kt::random<float, 2>({600, 700}).any()},
                                            {"yt", kt::random<float, 2>({300, 600}).any()},
                                            {"c", kt::random<float, 2>({1, 700}).any()}});
  CHECK(worst == 0);
}
