// Where verbose lines go: standard output (the default), a file, or a callback. A sink may be
// written from several threads at once; each line arrives whole. Every sink starts with kiln's
// header line (write_line), once, before any other line.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>

namespace kiln {

class VerboseSink {
 public:
  virtual ~VerboseSink() = default;
  // `line` has no trailing newline.
  virtual void write(std::string_view line) = 0;

  // Writes `line`, preceded by `header()` if this is the sink's first line.
  template <typename Header>
  void write_line(std::string_view line, const Header& header) {
    std::call_once(header_once_, [&] { write(header()); });
    write(line);
  }

 private:
  std::once_flag header_once_;
};

std::shared_ptr<VerboseSink> stdout_verbose_sink();
// Appends to `path`; throws kiln::Error (runtime) naming the file when it cannot be opened.
std::shared_ptr<VerboseSink> file_verbose_sink(const std::filesystem::path& path);
std::shared_ptr<VerboseSink> callback_verbose_sink(std::function<void(std::string_view line)> callback);

}  // namespace kiln
