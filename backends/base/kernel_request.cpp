#include "backends/base/kernel_request.h"

namespace kiln {

const char* precision_name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

}  // namespace kiln
