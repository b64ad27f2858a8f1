// kiln/core/random.hpp: counter-based random numbers (Philox4x32-10, Salmon et al., SC'11, the
// generator PyTorch's CUDA backend and JAX use). A value is a pure function of (seed, stream,
// counter): initialisers, dropout masks and data shuffles are reproducible by seed, the same on
// every platform, backend and thread count, and need no generator state to checkpoint.
//
//   kiln::philox r(seed, stream);
//   double u = r.uniform(i);          // [0, 1), the i-th value of this stream
//   double z = r.normal(i);           // standard normal
//   float f = r.uniform24(i);         // [0, 1) in steps of 2^-24: the graph's rand op
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

namespace kiln {

/// A stream identifier from a name (64-bit FNV-1a): each parameter's initial values depend
/// on the seed and its own name only, not on which other parameters exist.
constexpr std::uint64_t stream_of(std::string_view name) {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

class philox {
 public:
  constexpr philox(std::uint64_t seed, std::uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  /// Four 32-bit words for counter c (the block c of this stream).
  constexpr std::array<std::uint32_t, 4> block(std::uint64_t c) const {
    std::array<std::uint32_t, 4> x{static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32),
                                   static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)};
    std::uint32_t k0 = static_cast<std::uint32_t>(seed_), k1 = static_cast<std::uint32_t>(seed_ >> 32);
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * x[0];
      const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * x[2];
      x = {static_cast<std::uint32_t>(p1 >> 32) ^ x[1] ^ k0, static_cast<std::uint32_t>(p1),
           static_cast<std::uint32_t>(p0 >> 32) ^ x[3] ^ k1, static_cast<std::uint32_t>(p0)};
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return x;
  }

  /// The i-th 32-bit word of the stream.
  constexpr std::uint32_t bits(std::uint64_t i) const { return block(i / 4)[i % 4]; }
  /// The i-th 64-bit word of the stream.
  constexpr std::uint64_t bits64(std::uint64_t i) const {
    const auto b = block(i / 2);
    const std::size_t j = (i % 2) * 2;
    return (std::uint64_t{b[j]} << 32) | b[j + 1];
  }
  /// A double uniform in [0, 1) with 53 random bits.
  constexpr double uniform(std::uint64_t i) const { return static_cast<double>(bits64(i) >> 11) * 0x1p-53; }
  /// A float uniform in [0, 1) from the top 24 bits of the i-th 32-bit word (exact in float).
  static constexpr float to_uniform24(std::uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }
  constexpr float uniform24(std::uint64_t i) const { return to_uniform24(bits(i)); }
  /// A standard normal (Box-Muller on the uniforms 2i and 2i+1).
  double normal(std::uint64_t i) const {
    const double u1 = 1.0 - uniform(2 * i);  // (0, 1]: log is finite
    const double u2 = uniform(2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  /// An integer uniform in [0, n) (n > 0), by Lemire's multiply-shift on 64 random bits (bias
  /// below 2^-32 for n < 2^32).
  constexpr std::uint64_t below(std::uint64_t i, std::uint64_t n) const { return mulhi(bits64(i), n); }
  /// The high 64 bits of the 128-bit product a b.
  static constexpr std::uint64_t mulhi(std::uint64_t a, std::uint64_t b) {
    const std::uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    const std::uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const std::uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  }

 private:
  std::uint64_t seed_, stream_;
};

}  // namespace kiln
