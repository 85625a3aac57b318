// kiln's command-line face: `kiln info|run|bench|explain|conformance`. A thin layer over the library; every
// failure is one line on stderr starting with "kiln: error:" and a non-zero exit code.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tools/commands.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Command {
  std::string_view name;
  int (*run)(const std::vector<std::string>& args);
  std::string_view summary;
};

constexpr Command kCommands[] = {
    {"info", kiln::command_info, "version, build configuration, backends, CPU capability, threads"},
    {"run", kiln::command_run,
     "run a model once: kiln run MODEL [--input NAME=FILE.npy ...] [--output-dir DIR]"},
    {"bench", kiln::command_bench,
     "time a model: kiln bench MODEL [--batch B] [--threads N] [--warmup W] [--iters N]"},
    {"explain", kiln::command_explain,
     "print the plan: kiln explain MODEL [--batch B] [--threads N] [--profile N]"},
    {"conformance", kiln::command_conformance, "run ONNX's operator test suite: kiln conformance [DIR]"},
};

void print_usage(std::FILE* stream) {
  std::fprintf(stream, "usage: kiln COMMAND [ARGS]\n\ncommands:\n");
  for (const Command& command : kCommands) {
    std::fprintf(stream, "  %-13s %.*s\n", std::string(command.name).c_str(),
                 static_cast<int>(command.summary.size()), command.summary.data());
  }
  std::fprintf(stream, "\n`kiln COMMAND --help` describes a command's options.\n");
}

// One line: newlines inside a message would break scripts that read the first line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& command : kCommands) {
    if (command.name != name) continue;
    try {
      return command.run(args);
    } catch (const kiln::Error& error) {
      std::fprintf(stderr, "kiln: error: %s\n", one_line(error.what()).c_str());
      return kExitFailure;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "kiln: error: %s\n", one_line(error.what()).c_str());
      return kExitFailure;
    }
  }
  std::fprintf(stderr,
               "kiln: error: unknown command '%s' (expected info, run, bench, explain or conformance)\n",
               name.c_str());
  return kExitUsage;
}
