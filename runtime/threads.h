// How many threads kiln's intra-op work uses. Precedence, highest first:
//   1. set_num_threads(n) from the API (or the CLI's --threads),
//   2. the KILN_NUM_THREADS environment variable,
//   3. the OMP_NUM_THREADS environment variable (first entry of a nested list),
//   4. the number of cores this process may run on.
// Invalid values (zero, negative, not a number) are rejected with a kiln::Error naming their source.
#pragma once

#include <string>

namespace kiln {

void set_num_threads(int threads);
int get_num_threads();
// Forgets a set_num_threads value so the environment decides again (used by tests).
void reset_num_threads();
// Where get_num_threads() took its value from: "api", "KILN_NUM_THREADS", "OMP_NUM_THREADS", "cores".
std::string num_threads_source();
// Cores available to this process (its affinity mask).
int available_cores();

}  // namespace kiln
