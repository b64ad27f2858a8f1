// Build cost: one eager expression, b broadcast over a's rows.
#include <unsupported/Eigen/CXX11/Tensor>
int main() {
  Eigen::Tensor<float, 2, Eigen::RowMajor> a(2, 3);
  a.setValues({{1, 2, 3}, {4, 5, 6}});
  Eigen::Tensor<float, 1, Eigen::RowMajor> b(3);
  b.setValues({10, 20, 30});
  const Eigen::array<Eigen::Index, 2> row{1, 3}, rows{2, 1};
  Eigen::Tensor<float, 2, Eigen::RowMajor> c = a + (b * 2.0f).reshape(row).broadcast(rows);
  return c(1, 2) == 66 ? 0 : 1;
}
