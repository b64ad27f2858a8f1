// The op bodies (ops/bodies.hpp) compile as device code: a CUDA kernel instantiates them with
// the CUDA math library, as a CUDA backend will. Compiled (not run: no GPU here) by nvcc when
// the build finds it (tests/CMakeLists.txt).
#include <kiln/ops/bodies.hpp>

namespace {
struct device_math {
  template <class T> __host__ __device__ static T exp(T x) { return ::exp(x); }
  template <class T> __host__ __device__ static T log(T x) { return ::log(x); }
  template <class T> __host__ __device__ static T sqrt(T x) { return ::sqrt(x); }
  template <class T> __host__ __device__ static T tanh(T x) { return ::tanh(x); }
  template <class T> __host__ __device__ static T sin(T x) { return ::sin(x); }
  template <class T> __host__ __device__ static T cos(T x) { return ::cos(x); }
  template <class T> __host__ __device__ static T erf(T x) { return ::erf(x); }
  template <class T> __host__ __device__ static T abs(T x) { return ::fabs(x); }
  template <class T> __host__ __device__ static T pow(T a, T b) { return ::pow(a, b); }
  template <class T> __host__ __device__ static T floor(T x) { return ::floor(x); }
  template <class T> __host__ __device__ static T ceil(T x) { return ::ceil(x); }
  template <class T> __host__ __device__ static T rint(T x) { return ::rint(x); }
  template <class T> __host__ __device__ static T trunc(T x) { return ::trunc(x); }
  template <class T> __host__ __device__ static T atan(T x) { return ::atan(x); }
  template <class T> __host__ __device__ static T asin(T x) { return ::asin(x); }
  template <class T> __host__ __device__ static T acos(T x) { return ::acos(x); }
  template <class T> __host__ __device__ static T atan2(T a, T b) { return ::atan2(a, b); }
  template <class T> __host__ __device__ static T fmod(T a, T b) { return ::fmod(a, b); }
  template <class T> __host__ __device__ static bool isnan(T x) { return ::isnan(x); }
  template <class T> __host__ __device__ static T select(bool c, T a, T b) { return c ? a : b; }
};
}  // namespace

__global__ void bodies_kernel(const float* x, const double* d, const int* i, float* y, double* z, int* k, int n) {
  using kiln::op;
  using M = device_math;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  y[t] = kiln::ops::unary<op::gelu, M>(x[t]) + kiln::ops::binary<op::max, M>(x[t], 0.0f) +
         kiln::ops::unary<op::rsqrt, M>(x[t] * x[t] + 1.0f);
  z[t] = kiln::ops::unary<op::tanh, M>(d[t]) * kiln::ops::binary<op::pow, M>(d[t], 2.0) +
         kiln::ops::binary<op::atan2, M>(d[t], 1.5) + kiln::ops::binary<op::fmod, M>(d[t], 0.75) +
         kiln::ops::unary<op::round, M>(d[t]) + kiln::ops::unary<op::asin, M>(d[t] * 0.5);
  k[t] = kiln::ops::binary<op::mul, M>(i[t], 3) + (kiln::ops::compare<op::lt>(i[t], 0) ? 1 : 0);
}
