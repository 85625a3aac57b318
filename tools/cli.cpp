// kiln's command-line face: `kiln info|run|bench|explain|profile|tidy|conformance|launch`. A thin layer over
// the library; every failure is one line on stderr starting with "kiln: error:" and a non-zero exit code. The
// `kiln` executable and `python3 -m kiln` both call run_cli.
#include "tools/cli.h"

#include <cstdio>
#include <exception>
#include <string_view>

#include "core/error.h"
#include "core/version.h"
#include "tools/commands.h"

namespace kiln {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Command {
  std::string_view name;
  int (*run)(const std::vector<std::string>& args);
  std::string_view summary;
};

constexpr Command kCommands[] = {
    {"info", command_info, "version, build configuration, backends, CPU capability, threads"},
    {"run", command_run, "run a model once: kiln run MODEL [--input NAME=FILE.npy ...] [--output-dir DIR]"},
    {"bench", command_bench,
     "time a model: kiln bench MODEL [--batch B] [--threads N] [--warmup W] [--iters N]"},
    {"explain", command_explain,
     "print the plan: kiln explain MODEL [--batch B] [--threads N] [--profile N]"},
    {"profile", command_profile,
     "record runs and show where the time went: kiln profile MODEL [--runs N] [--trace FILE] [--group-by "
     "op]; or read a PyTorch or kiln trace: kiln profile --load TRACE"},
    {"tidy", command_tidy,
     "report anti-patterns in a PyTorch or kiln trace, with source lines: kiln tidy TRACE [--json] "
     "[--torchtidy-json DIR]"},
    {"compare", command_compare,
     "where two runs part, value by value: kiln compare A.onnx [B.onnx] [--a NAME=VALUE] [--b NAME=VALUE]"},
    {"quantize", command_quantize,
     "write a QDQ int8 model: kiln quantize MODEL OUTPUT --calibration-data DIR [--per-channel] (runs kiln's "
     "Python module)"},
    {"conformance", command_conformance, "run ONNX's operator test suite: kiln conformance [DIR]"},
    {"serve", command_serve,
     "serve a model repository over the Open Inference Protocol (KServe v2) HTTP API: kiln serve "
     "--model-repository DIR [--http-port N] [--metrics-port N]"},
    {"launch", command_launch,
     "start pinned instances of a command: kiln launch [--throughput|--latency] [--instances N] -- COMMAND"},
};

void print_usage(std::FILE* stream) {
  std::fprintf(stream, "usage: kiln COMMAND [ARGS]\n       kiln --version\n\ncommands:\n");
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

int run_cli(const std::vector<std::string>& arguments) {
  if (arguments.empty()) {
    print_usage(stderr);
    return kExitUsage;
  }
  const std::string& name = arguments[0];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "-V") {
    std::printf("kiln %.*s\n", static_cast<int>(kiln_version().size()), kiln_version().data());
    return 0;
  }
  const std::vector<std::string> args(arguments.begin() + 1, arguments.end());
  for (const Command& command : kCommands) {
    if (command.name != name) continue;
    try {
      return command.run(args);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "kiln: error: %s\n", one_line(error.what()).c_str());
      return kExitFailure;
    }
  }
  // Derived from the table, so a new command is never missing from the message.
  std::string known;
  for (size_t i = 0; i < std::size(kCommands); ++i) {
    known += str_cat(i == 0 ? "" : i + 1 == std::size(kCommands) ? " or " : ", ", kCommands[i].name);
  }
  std::fprintf(stderr, "kiln: error: unknown command '%s' (expected %s)\n", name.c_str(), known.c_str());
  return kExitUsage;
}

}  // namespace kiln
