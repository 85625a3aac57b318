// A file mapped read-only into the process, for weights that should cost memory only while they
// are read. Its pages are clean copies of the file: the kernel reads them in when first touched and
// may drop them again (release_mapped_pages) at any time, reading them back from the page cache if
// they are touched later; processes mapping the same file share those pages.
//
// The file must not change in place while it is mapped (replace it by writing a new file and
// renaming it over the old one): a truncated file makes a later read of a dropped page fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

namespace kiln {

class MappedFile {
 public:
  // Maps `path`. The same file (device, inode, size and modification time) opened again while a
  // mapping of it lives gets that mapping. A file that cannot be opened is invalid_argument
  // "cannot open <what> '<path>': <reason>".
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path, std::string_view what);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

  struct Key {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t modified_ns = 0;
    bool operator==(const Key&) const = default;
  };

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size, Key key)
      : path_(std::move(path)), data_(data), size_(size), key_(key) {}

  std::filesystem::path path_;
  const uint8_t* data_;  // null for an empty file
  size_t size_;
  Key key_;
};

// Drops the resident pages that lie wholly inside [data, data + bytes) from the process when that
// range is in a live MappedFile; does nothing otherwise. Always safe: a dropped page is read back
// from the file when touched again.
void release_mapped_pages(const void* data, size_t bytes);

// Whether [data, data + bytes) lies in a live MappedFile.
bool is_mapped(const void* data, size_t bytes);

}  // namespace kiln
