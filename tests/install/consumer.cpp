// Runs a model through the installed C++ API: `consumer MODEL` prints the first output's hash as
// `kiln run` does for the input pattern below, after checking that a cancelled run, a run_async and
// a bad input behave as documented. Exit code 0 only if all of it held.
#include <kiln/kiln.hpp>

#include <cinttypes>
#include <cstdio>
#include <vector>

namespace {

// FNV-1a over the bytes, `kiln run`'s hash.
uint32_t fingerprint(const kiln::Tensor& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.raw_data());
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < tensor.byte_size(); ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

int fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: consumer MODEL");
  try {
    kiln::Session session(argv[1], kiln::Settings().set("threads", "2"));
    kiln::ValueInfo input_info = session.inputs().at(0);
    int64_t count = 1;
    for (int64_t& dim : input_info.dims) {
      if (dim < 0) dim = 1;  // a symbolic dim (the batch), as `kiln run` sizes it
      count *= dim;
    }
    std::vector<float> pixels(static_cast<size_t>(count));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
    kiln::Tensor input = kiln::Tensor::wrap(pixels.data(), input_info.dims);

    std::vector<kiln::Tensor> outputs = session.run({{input_info.name, input}});
    std::vector<kiln::Tensor> async = session.run_async({{input_info.name, input}}).get();
    if (fingerprint(async.at(0)) != fingerprint(outputs.at(0))) return fail("run_async gave other bytes");

    kiln::RunOptions cancelled;
    cancelled.cancel();
    try {
      session.run({{input_info.name, input}}, &cancelled);
      return fail("a cancelled run ran");
    } catch (const kiln::Error& error) {
      if (error.code() != KILN_CANCELLED) return fail("a cancelled run did not say so");
    }
    try {
      session.run({{"no such input", input}});
      return fail("an unknown input was accepted");
    } catch (const kiln::Error& error) {
      if (error.code() != KILN_INVALID_ARGUMENT) return fail("an unknown input was not an invalid argument");
    }

    std::printf("kiln %s: %s hash=%08" PRIx32 "\n", kiln::version().c_str(), session.outputs().at(0).name.c_str(),
                fingerprint(outputs.at(0)));
    return 0;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "consumer: kiln error %d: %s\n", static_cast<int>(error.code()), error.what());
    return 1;
  }
}
