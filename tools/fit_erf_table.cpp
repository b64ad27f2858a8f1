// tools/fit_erf_table.cpp: fits the table of kiln's AVX-512 f32 erf (simd::fn::erf_table in
// include/kiln/backend/cpu/simd.hpp) and prints it as C++.
//
//   g++ -O2 -std=c++20 tools/fit_erf_table.cpp -o /tmp/fit && /tmp/fit
//
// erf(z) for 0 <= z <= 3.92 (past which erf rounds to 1 in f32) is split into 16 intervals
// centred on i w, w = 3.92 / 15.5, each with a degree-5 polynomial in v = z / w - i, |v| <= 1/2
// (interval 0: 0 <= v <= 1/2, and an odd polynomial, so that erf keeps its relative accuracy
// near 0). Each polynomial interpolates erf (long double) at the Chebyshev nodes of its
// interval, close to minimax at this degree. The last interval's constant is then raised
// until the polynomial at the clamp (the largest z the kernel evaluates) gives exactly 1 in
// f32, so that erf(z) = 1 for every z >= 3.92, as std::erf rounds it. The program also
// reports the largest error over every float in [0, 4.5], evaluated as the kernel does (f32,
// one FMA a step); tests/test_cpu_unary.cpp checks the kernel itself.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

using LD = long double;
constexpr int NI = 16, D = 5;

// Gaussian elimination with partial pivoting on an n x (n+1) augmented matrix.
static void solve(int n, LD a[D + 1][D + 2], LD* x) {
  for (int p = 0; p < n; ++p) {
    int m = p;
    for (int r = p + 1; r < n; ++r)
      if (fabsl(a[r][p]) > fabsl(a[m][p])) m = r;
    for (int j = 0; j <= n; ++j) std::swap(a[p][j], a[m][j]);
    for (int r = 0; r < n; ++r)
      if (r != p) {
        const LD f = a[r][p] / a[p][p];
        for (int j = p; j <= n; ++j) a[r][j] -= f * a[p][j];
      }
  }
  for (int j = 0; j < n; ++j) x[j] = a[j][n] / a[j][j];
}

static float c[D + 1][NI];  // c[j][i]: the coefficient of v^j on interval i
static float sc, tc;         // the scale (1 / w) and the clamp, as the kernel holds them

// A float literal that reads back as x.
static void print_float(float x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  std::printf(std::strpbrk(b, ".e") ? "%sf" : "%s.0f", b);
}

// The kernel's evaluation, in f32 (std::fma rounds once, as the FMA instructions).
static float eval(float z) {
  const float t = std::fmin(std::fabs(z), tc), magic = 12582912.0f;  // 1.5 * 2^23
  const float k = std::fma(t, sc, magic), v = std::fma(t, sc, -(k - magic));
  std::uint32_t kb;
  std::memcpy(&kb, &k, sizeof kb);
  const int i = static_cast<int>(kb & (NI - 1));
  float r = c[D][i];
  for (int j = D - 1; j >= 0; --j) r = std::fma(r, v, c[j][i]);
  return std::fmin(r, 1.0f);
}

int main() {
  const LD top = 3.92L, pi = acosl(-1), w = top / (NI - 0.5L);
  sc = static_cast<float>(1 / w);
  tc = std::nextafter(3.92f, 0.0f);
  if (!(static_cast<double>(tc) * sc < NI - 0.5)) {  // exact in double; simd.hpp asserts it too
    std::fprintf(stderr, "the clamp would round to interval %d\n", NI);
    return 1;
  }
  for (int i = 0; i < NI; ++i) {
    LD a[D + 1][D + 2], x[D + 1];
    if (i == 0) {  // erf(w v) = v (x0 + x1 v^2 + x2 v^4), nodes in (0, 1/2]
      constexpr int n = (D + 1) / 2;
      for (int k = 0; k < n; ++k) {
        const LD v = 0.25L + 0.25L * cosl((2 * k + 1) * pi / (2 * n));
        LD p = 1;
        for (int j = 0; j < n; ++j) a[k][j] = p, p *= v * v;
        a[k][n] = erfl(w * v) / v;
      }
      solve(n, a, x);
      for (int j = 0; j < n; ++j) c[2 * j + 1][0] = static_cast<float>(x[j]);
    } else {
      constexpr int n = D + 1;
      for (int k = 0; k < n; ++k) {
        const LD v = 0.5L * cosl((2 * k + 1) * pi / (2 * n));
        LD p = 1;
        for (int j = 0; j < n; ++j) a[k][j] = p, p *= v;
        a[k][n] = erfl((i + v) * w);
      }
      solve(n, a, x);
      for (int j = 0; j <= D; ++j) c[j][i] = static_cast<float>(x[j]);
    }
  }
  while (eval(tc) < 1.0f) c[0][NI - 1] = std::nextafter(c[0][NI - 1], 2.0f);

  double worst = 0, at = 0;
  for (std::uint32_t b = 0;; ++b) {
    float z;
    std::memcpy(&z, &b, sizeof z);
    if (z > 4.5f) break;
    const LD want = erfl(static_cast<LD>(z));
    const float f = std::fabs(static_cast<float>(want));
    const double ulp = f < 1e-38f ? std::ldexp(1.0, -149) : std::nextafter(f, 2.0f) - f;
    const double e = static_cast<double>(fabsl(eval(z) - want)) / (f == 1.0f ? ulp / 2 : ulp);
    if (e > worst) worst = e, at = z;
  }
  std::fprintf(stderr, "largest error %.3f ulp (at %.9g); erf(clamp) = %.9g\n", worst, at, eval(tc));
  std::printf("inline constexpr float scale = "), print_float(sc), std::printf(", clamp = "), print_float(tc), std::printf(";\n");
  std::printf("alignas(64) inline constexpr float c[%d][%d] = {\n", D + 1, NI);
  for (int j = 0; j <= D; ++j) {
    std::printf("    {");
    for (int i = 0; i < NI; ++i) print_float(c[j][i]), std::printf(i + 1 < NI ? ", " : "}");
    std::printf("%s\n", j < D ? "," : "};");
  }
}
