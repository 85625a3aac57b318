// `kiln quantize MODEL OUTPUT --calibration-data DIR [...]`: the quantizer is kiln's Python module
// (kiln.quantization, which writes ONNX files with the onnx package), so this command runs
// `/usr/bin/python3 -m kiln quantize ...` in a child process: with the build tree's python/ folder
// first on its path when the binary sits in a build tree, else the installed module.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/commands.h"

namespace kiln {

int command_quantize(const std::vector<std::string>& args) {
  constexpr const char* kPython = "/usr/bin/python3";
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path build_module = binary.parent_path() / "python";
  std::string path = std::filesystem::exists(build_module / "kiln" / "__init__.py") ? build_module.string() : "";
  if (const char* existing = std::getenv("PYTHONPATH"); existing != nullptr && *existing != '\0')
    path = path.empty() ? existing : path + ":" + existing;

  std::vector<std::string> words = {kPython, "-m", "kiln", "quantize"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t child = fork();
  KILN_CHECK(child >= 0, runtime, "kiln quantize: cannot start ", kPython);
  if (child == 0) {
    if (!path.empty()) setenv("PYTHONPATH", path.c_str(), 1);
    execv(kPython, argv.data());
    std::fprintf(stderr, "kiln: error: kiln quantize runs kiln's Python module with %s, which cannot start\n",
                 kPython);
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    KILN_CHECK(errno == EINTR, runtime, "kiln quantize: lost its Python process");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace kiln
