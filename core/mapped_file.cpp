#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace kiln {
namespace {

// Every live mapping, so a file opened twice shares one and page releases can check their range.
struct Registry {
  std::mutex mutex;
  std::vector<std::pair<MappedFile::Key, std::weak_ptr<const MappedFile>>> files;
};

Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: mappings may outlive static teardown
  return *instance;
}

// The live mapping holding [data, data + bytes), or null; the caller holds the registry's lock.
std::shared_ptr<const MappedFile> mapping_holding(Registry& files, const void* data, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(data);
  for (const auto& [key, weak] : files.files) {
    std::shared_ptr<const MappedFile> file = weak.lock();
    if (!file || file->bytes().empty()) continue;
    const std::span<const uint8_t> mapped = file->bytes();
    const uint8_t* end = mapped.data() + mapped.size();
    if (begin >= mapped.data() && begin <= end && bytes <= static_cast<size_t>(end - begin)) return file;
  }
  return nullptr;
}

struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path, std::string_view what) {
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    const int open_error = errno;
    fail(ErrorKind::invalid_argument, "cannot open ", what, " '", path.string(), "': ", std::strerror(open_error));
  }
  struct stat status {};
  KILN_CHECK(::fstat(file.fd, &status) == 0, runtime, "cannot read the size of ", what, " '", path.string(),
             "': ", std::strerror(errno));
  KILN_CHECK(!S_ISDIR(status.st_mode), invalid_argument, "cannot open ", what, " '", path.string(),
             "': it is a folder");
  KILN_CHECK(S_ISREG(status.st_mode), invalid_argument, "cannot map ", what, " '", path.string(),
             "': it is not a regular file");
  const Key key{static_cast<uint64_t>(status.st_dev), static_cast<uint64_t>(status.st_ino),
                static_cast<uint64_t>(status.st_size),
                static_cast<int64_t>(status.st_mtim.tv_sec) * 1'000'000'000 + status.st_mtim.tv_nsec};
  Registry& files = registry();
  std::lock_guard lock(files.mutex);
  std::erase_if(files.files, [](const auto& entry) { return entry.second.expired(); });
  for (const auto& [existing, weak] : files.files) {
    if (existing != key) continue;
    if (std::shared_ptr<const MappedFile> shared = weak.lock()) return shared;
  }
  const auto size = static_cast<size_t>(status.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
    KILN_CHECK(mapped != MAP_FAILED, runtime, "cannot map ", what, " '", path.string(), "' (", size,
               " bytes): ", std::strerror(errno));
    data = static_cast<const uint8_t*>(mapped);
  }
  std::shared_ptr<const MappedFile> mapped(new MappedFile(path, data, size, key));
  files.files.emplace_back(key, mapped);
  return mapped;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void release_mapped_pages(const void* data, size_t bytes) {
  Registry& files = registry();
  std::lock_guard lock(files.mutex);
  if (!mapping_holding(files, data, bytes)) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool is_mapped(const void* data, size_t bytes) {
  Registry& files = registry();
  std::lock_guard lock(files.mutex);
  return mapping_holding(files, data, bytes) != nullptr;
}

}  // namespace kiln
