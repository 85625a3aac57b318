// Reading and writing numpy's .npy files (format versions 1.0 to 3.0, little-endian, C order), so
// `kiln run` exchanges tensors with Python without any other dependency.
#pragma once

#include <filesystem>

#include "core/tensor.h"

namespace kiln {

// Throws kiln::Error naming the file for anything malformed, Fortran-ordered or of a dtype kiln
// lacks.
Tensor read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace kiln
