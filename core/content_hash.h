// A 128-bit hash of a byte range, for recognizing the same weights wherever they lie: two sessions
// of one model, or a model loaded twice, pack their weights once (backends share packed copies
// keyed by it). Not cryptographic: it guards against accidental equality, not against a file
// crafted to collide.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

struct ContentHash {
  uint64_t low = 0, high = 0;
  bool operator==(const ContentHash&) const = default;
};

ContentHash content_hash(const void* data, size_t bytes);

}  // namespace kiln
