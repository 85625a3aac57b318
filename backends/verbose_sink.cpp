#include "backends/verbose_sink.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace kiln {
namespace {

class FileSink final : public VerboseSink {
 public:
  // `owned`: the sink opened the file and closes it.
  FileSink(std::FILE* file, bool owned) : file_(file), owned_(owned) {}
  ~FileSink() override {
    if (owned_) std::fclose(file_);
  }
  void write(std::string_view line) override {
    std::lock_guard lock(mutex_);
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fputc('\n', file_);
    std::fflush(file_);  // lines must survive a crash of what they describe
  }

 private:
  std::mutex mutex_;
  std::FILE* file_;
  bool owned_;
};

class CallbackSink final : public VerboseSink {
 public:
  explicit CallbackSink(std::function<void(std::string_view)> callback) : callback_(std::move(callback)) {}
  void write(std::string_view line) override {
    std::lock_guard lock(mutex_);
    callback_(line);
  }

 private:
  std::mutex mutex_;
  std::function<void(std::string_view)> callback_;
};

}  // namespace

std::shared_ptr<VerboseSink> stdout_verbose_sink() {
  static const std::shared_ptr<VerboseSink> sink = std::make_shared<FileSink>(stdout, false);
  return sink;
}

std::shared_ptr<VerboseSink> file_verbose_sink(const std::filesystem::path& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  KILN_CHECK(file != nullptr, runtime, "cannot open verbose file '", path.string(),
             "': ", std::strerror(errno));
  return std::make_shared<FileSink>(file, true);
}

std::shared_ptr<VerboseSink> callback_verbose_sink(std::function<void(std::string_view line)> callback) {
  KILN_CHECK(callback != nullptr, invalid_argument, "the verbose callback is empty");
  return std::make_shared<CallbackSink>(std::move(callback));
}

}  // namespace kiln
