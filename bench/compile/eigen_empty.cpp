// Build cost: the header and an empty main.
#include <unsupported/Eigen/CXX11/Tensor>
int main() { return 0; }
