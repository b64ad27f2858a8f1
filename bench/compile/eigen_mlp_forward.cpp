// Build cost: an MLP's forward pass (784-256-10, relu), evaluated once.
#include <unsupported/Eigen/CXX11/Tensor>
using T2 = Eigen::Tensor<float, 2, Eigen::RowMajor>;
using T1 = Eigen::Tensor<float, 1, Eigen::RowMajor>;
static T2 linear(const T2& x, const T2& w, const T1& b) {  // x w^T + b, as torch.nn.Linear
  const Eigen::array<Eigen::IndexPair<int>, 1> k{Eigen::IndexPair<int>(1, 1)};
  const Eigen::array<Eigen::Index, 2> row{1, b.dimension(0)}, rows{x.dimension(0), 1};
  return x.contract(w, k) + b.reshape(row).broadcast(rows);
}
int main() {
  T2 x(64, 784), w0(256, 784), w1(10, 256);
  T1 b0(256), b1(10);
  x.setRandom(); w0.setRandom(); w1.setRandom(); b0.setRandom(); b1.setRandom();
  T2 h = linear(x, w0, b0).cwiseMax(0.0f);
  T2 out = linear(h, w1, b1);
  return out.dimension(1) == 10 ? 0 : 1;
}
