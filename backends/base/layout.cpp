#include "backends/base/layout.h"

#include "core/error.h"

namespace kiln {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::plain:
      return "plain";
    case Layout::nhwc:
      return "nhwc";
    case Layout::plain_bf16:
      return "plain_bf16";
    case Layout::nhwc_bf16:
      return "nhwc_bf16";
  }
  return "?";
}

bool is_channels_last(Layout layout) {
  return layout == Layout::nhwc || layout == Layout::nhwc_bf16;
}

bool is_bf16(Layout layout) {
  return layout == Layout::plain_bf16 || layout == Layout::nhwc_bf16;
}

Shape stored_shape(const Shape& shape, Layout layout) {
  if (!is_channels_last(layout)) return shape;
  KILN_ASSERT(shape.size() == 4);  // channels-last storage is only chosen for 4-D values
  return {shape[0], shape[2], shape[3], shape[1]};
}

DType stored_dtype(DType dtype, Layout layout) {
  return is_bf16(layout) ? DType::bf16 : dtype;
}

}  // namespace kiln
