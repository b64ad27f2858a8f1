// Build cost: an MLP's training step (784-256-10, relu, cross-entropy, SGD), run once, with the
// backward pass written by hand.
#include <unsupported/Eigen/CXX11/Tensor>
#include <cmath>
using T2 = Eigen::Tensor<float, 2, Eigen::RowMajor>;
using T1 = Eigen::Tensor<float, 1, Eigen::RowMajor>;
using pairs = Eigen::array<Eigen::IndexPair<int>, 1>;
static T2 linear(const T2& x, const T2& w, const T1& b) {
  const pairs k{Eigen::IndexPair<int>(1, 1)};
  const Eigen::array<Eigen::Index, 2> row{1, b.dimension(0)}, rows{x.dimension(0), 1};
  return x.contract(w, k) + b.reshape(row).broadcast(rows);
}
int main() {
  const int n = 64;
  T2 x(n, 784), w0(256, 784), w1(10, 256);
  T1 b0(256), b1(10);
  x.setRandom(); w0.setRandom(); w1.setRandom(); b0.setRandom(); b1.setRandom();
  Eigen::Tensor<long, 1, Eigen::RowMajor> y(n);
  for (int i = 0; i < n; ++i) y(i) = i % 10;
  // forward
  T2 z0 = linear(x, w0, b0);
  T2 h = z0.cwiseMax(0.0f);
  T2 logits = linear(h, w1, b1);
  const Eigen::array<Eigen::Index, 1> cols{1};
  const Eigen::array<Eigen::Index, 2> col{n, 1}, across{1, 10};
  T1 m = logits.maximum(cols);
  T2 e = (logits - m.reshape(col).broadcast(across)).exp();
  T1 s = e.sum(cols);
  T2 p = e / s.reshape(col).broadcast(across);
  double loss = 0;
  for (int i = 0; i < n; ++i) loss -= std::log(p(i, y(i))) / n;
  // backward
  T2 dlogits = p / static_cast<float>(n);
  for (int i = 0; i < n; ++i) dlogits(i, y(i)) -= 1.0f / n;
  const pairs rows0{Eigen::IndexPair<int>(0, 0)}, inner{Eigen::IndexPair<int>(1, 0)};
  const Eigen::array<Eigen::Index, 1> batch{0};
  T2 dw1 = dlogits.contract(h, rows0);
  T1 db1 = dlogits.sum(batch);
  T2 dh = dlogits.contract(w1, inner);
  T2 dz0 = dh * (z0 > 0.0f).cast<float>();
  T2 dw0 = dz0.contract(x, rows0);
  T1 db0 = dz0.sum(batch);
  // SGD
  const float lr = 0.1f;
  w0 -= dw0 * lr; b0 -= db0 * lr; w1 -= dw1 * lr; b1 -= db1 * lr;
  return std::isfinite(loss) ? 0 : 1;
}
