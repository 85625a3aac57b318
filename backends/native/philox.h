// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw ("Parallel Random
// Numbers: As Easy as 1, 2, 3", SC 2011; Random123's philox4x32 with 10 rounds): four 32-bit words
// from a 128-bit counter and a 64-bit key. A block depends only on (key, counter), so the random
// kernels give element i the words of counter i whatever thread computes it: a seeded draw is the
// same on any thread count, and no generator state is shared or mutated.
#pragma once

#include <array>
#include <cstdint>

namespace kiln::native {

using PhiloxBlock = std::array<uint32_t, 4>;

inline PhiloxBlock philox4x32_10(PhiloxBlock counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53;
  constexpr uint32_t kMultiplier1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9;  // the key's increments per round
  constexpr uint32_t kWeyl1 = 0xBB67AE85;
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t product0 = uint64_t{kMultiplier0} * counter[0];
    const uint64_t product1 = uint64_t{kMultiplier1} * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(product0)};
  }
  return counter;
}

// Block `index` of the stream a 64-bit key names.
inline PhiloxBlock philox_block(uint64_t key, uint64_t index) {
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
                       {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
}

// A double in [0, 1) from two words: their top 53 bits over 2^53, every value equally likely.
inline double unit_interval(uint32_t high, uint32_t low) {
  const uint64_t bits = (uint64_t{high} << 32) | low;
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// SplitMix64's finaliser (Steele, Lea and Flood, 2014): spreads a seed or counter over all 64 bits.
inline uint64_t mix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace kiln::native
