#include "core/content_hash.h"

#include <cstring>

namespace kiln {
namespace {

// Four independent lanes keep the multiplies' latency off the critical path (several GB/s); each
// lane is a multiply-xorshift mix of 8-byte words, as in xxHash and wyhash.
constexpr uint64_t kPrimes[4] = {0x9e3779b185ebca87u, 0xc2b2ae3d27d4eb4fu, 0x165667b19e3779f9u,
                                 0x85ebca77c2b2ae63u};

uint64_t mix(uint64_t lane, uint64_t word, uint64_t prime) {
  lane ^= word * prime;
  lane = (lane << 31) | (lane >> 33);
  return lane * kPrimes[0];
}

uint64_t finish(uint64_t value) {
  value ^= value >> 33;
  value *= 0xff51afd7ed558ccdu;
  value ^= value >> 33;
  value *= 0xc4ceb9fe1a85ec53u;
  return value ^ (value >> 33);
}

}  // namespace

ContentHash content_hash(const void* data, size_t bytes) {
  const auto* bytes_in = static_cast<const unsigned char*>(data);
  uint64_t lanes[4] = {kPrimes[0] ^ bytes, kPrimes[1], kPrimes[2], kPrimes[3] + bytes};
  size_t position = 0;
  for (; position + 32 <= bytes; position += 32) {
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t word;
      std::memcpy(&word, bytes_in + position + 8 * lane, sizeof word);
      lanes[lane] = mix(lanes[lane], word, kPrimes[(lane + 1) % 4]);
    }
  }
  for (int lane = 0; position < bytes; ++position, lane = (lane + 1) % 4)
    lanes[lane] = mix(lanes[lane], bytes_in[position], kPrimes[(lane + 2) % 4]);
  return {finish(lanes[0] ^ finish(lanes[1])), finish(lanes[2] ^ finish(lanes[3] + 1))};
}

}  // namespace kiln
