#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "tools/npy.h"

namespace kiln {
namespace {

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("kiln_npy_test_" + std::to_string(::getpid()) + "_" + name);
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  const Tensor tensors[] = {
      Tensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3}),
      Tensor::from_vector<int64_t>({7}, {}),
      Tensor::from_vector<int32_t>({1, 2, 3}, {3}),
      Tensor::from_vector<bool>({true, false}, {2, 1}),
      Tensor::from_vector<uint8_t>({}, {0, 4}),
  };
  for (const Tensor& tensor : tensors) {
    const auto path = temp_file("round_trip.npy");
    write_npy(path, tensor);
    Tensor back = read_npy(path);
    std::filesystem::remove(path);
    EXPECT_EQ(back.dtype(), tensor.dtype());
    EXPECT_EQ(back.shape(), tensor.shape());
    ASSERT_EQ(back.nbytes(), tensor.nbytes());
    EXPECT_EQ(std::memcmp(back.raw_data(), tensor.raw_data(), tensor.nbytes()), 0);
  }
}

TEST(Npy, RejectsMalformedFilesNamingThem) {
  const auto path = temp_file("bad.npy");
  {
    std::ofstream file(path, std::ios::binary);
    file << "not numpy at all";
  }
  try {
    read_npy(path);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos);
  }
  // A valid header whose data is shorter than its shape.
  write_npy(path, Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_THROW(read_npy(path), Error);
  std::filesystem::remove(path);
  EXPECT_THROW(read_npy(temp_file("missing.npy")), Error);
}

}  // namespace
}  // namespace kiln
