// How much memory planning lets one value, or one kernel's plan-time tables, take.
#pragma once

#include <cstdint>

namespace kiln {

// The machine's physical memory unless set lower (0: the system does not say, and nothing is
// refused). No allocation larger than the memory can succeed, so planning refuses those with a
// clear error (which names the machine's memory). The model fuzzer sets it below its own memory
// limit, so that a plan this machine could hold but the fuzzer cannot is refused the same way
// instead of reported as out-of-memory.
uint64_t planning_memory_limit_bytes();
// `bytes` above the machine's memory count as the memory; 0 restores it.
void set_planning_memory_limit(uint64_t bytes);

}  // namespace kiln
