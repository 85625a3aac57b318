// `kiln launch [options] -- COMMAND [ARGS...]`: starts instances of COMMAND at the same time, each
// pinned to its own cores (sched_setaffinity), with its thread counts set to those cores, optionally
// a wait policy for idle OpenMP threads and jemalloc preloaded. Each instance's output is forwarded
// line by line behind "[instance N] "; lines reporting a throughput (`kiln bench`'s text or JSON)
// are summed into the aggregate printed at the end. The exit code is the first failing instance's
// (128 + the signal for one killed by a signal), else 0. SIGINT and SIGTERM are passed on to the
// instances.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace kiln {
namespace {

// Where Debian's libjemalloc2 puts the library.
constexpr const char* kJemallocPaths[] = {"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                                          "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"};

std::vector<pid_t>& running_instances() {
  static std::vector<pid_t> pids;
  return pids;
}

void pass_signal_on(int signal_number) {
  for (pid_t pid : running_instances()) kill(pid, signal_number);
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  KILN_CHECK(sched_getaffinity(0, sizeof(set), &set) == 0, runtime,
             "cannot read this process's CPU affinity: ", std::strerror(errno));
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus) text += str_cat(text.empty() ? "" : ",", cpu);
  return text;
}

// The throughput a line of `kiln bench` output reports (text or JSON), if it reports one.
std::optional<double> reported_throughput(const std::string& line) {
  static const std::regex text(R"(^throughput: ([0-9.]+) samples/s)");
  static const std::regex json(R"("throughput_per_s": ([0-9.]+))");
  std::smatch match;
  if (std::regex_search(line, match, text) || std::regex_search(line, match, json))
    return std::stod(match[1]);
  return std::nullopt;
}

struct Instance {
  std::vector<int> cpus;
  pid_t pid = -1;
  int output = -1;      // read end of its stdout pipe (-1 once closed)
  std::string pending;  // a line not finished yet
  std::optional<double> throughput;
  int exit_code = 0;
};

// In the child: pins, sets the environment and execs; never returns.
[[noreturn]] void exec_instance(const Instance& instance, int index, const std::vector<std::string>& command,
                                const std::string& wait_policy, const std::string& preload, int write_end) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : instance.cpus) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "kiln launch: instance %d: cannot pin to cpus %s: %s\n", index,
                 cpu_list(instance.cpus).c_str(), std::strerror(errno));
    _exit(126);
  }
  const std::string threads = std::to_string(instance.cpus.size());
  for (const char* name : {"OMP_NUM_THREADS", "KILN_NUM_THREADS"}) setenv(name, threads.c_str(), 1);
  setenv("KILN_LAUNCH_INSTANCE", std::to_string(index).c_str(), 1);
  if (!wait_policy.empty()) {
    setenv("OMP_WAIT_POLICY", wait_policy.c_str(), 1);
    unsetenv("GOMP_SPINCOUNT");  // libgomp lets it override OMP_WAIT_POLICY; the option is the later word
  }
  if (!preload.empty()) {
    const char* existing = std::getenv("LD_PRELOAD");
    const std::string value = existing != nullptr && *existing != '\0' ? preload + ":" + existing : preload;
    setenv("LD_PRELOAD", value.c_str(), 1);
  }
  dup2(write_end, STDOUT_FILENO);
  close(write_end);
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "kiln launch: instance %d: cannot run '%s': %s\n", index, command[0].c_str(),
               std::strerror(errno));
  _exit(127);
}

// Forwards every complete line read from `instance`, prefixed; false at end of output.
bool forward_output(Instance& instance, int index) {
  char buffer[4096];
  const ssize_t count = read(instance.output, buffer, sizeof buffer);
  if (count < 0 && errno == EINTR) return true;
  const bool open = count > 0;
  if (open) instance.pending.append(buffer, static_cast<size_t>(count));
  size_t begin = 0;
  for (size_t end; (end = instance.pending.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const std::string line = instance.pending.substr(begin, end - begin);
    if (const std::optional<double> throughput = reported_throughput(line)) instance.throughput = throughput;
    std::printf("[instance %d] %s\n", index, line.c_str());
  }
  instance.pending.erase(0, begin);
  if (!open && !instance.pending.empty()) {
    std::printf("[instance %d] %s\n", index, instance.pending.c_str());
    instance.pending.clear();
  }
  std::fflush(stdout);
  return open;
}

}  // namespace

int command_launch(const std::vector<std::string>& args) {
  const auto separator = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> options(args.begin(), separator);
  const std::vector<std::string> command(separator == args.end() ? separator : separator + 1, args.end());
  const std::vector<OptionSpec> specs = {
      {"instances", true, "N: instances to start (default: 1, or one per core with --throughput)"},
      {"cores-per-instance", true, "C: cores each instance is pinned to (default: the cores / N)"},
      {"throughput", false, "one single-core instance per core"},
      {"latency", false, "one instance on every core (the default)"},
      {"wait-policy", true,
       "passive|active: OMP_WAIT_POLICY for the instances, GOMP_SPINCOUNT unset (default: the environment's, "
       "else libgomp's own)"},
      {"jemalloc", false, "preload jemalloc (Debian's libjemalloc2) into the instances"},
      {"help", false, "show this help"},
  };
  const ParsedArgs parsed = parse_args("launch", options, specs);
  if (parsed.has("help")) {
    std::printf(
        "usage: kiln launch [options] -- COMMAND [ARGS...]\n\nStarts instances of COMMAND at once, each "
        "pinned "
        "to its own cores with OMP_NUM_THREADS and KILN_NUM_THREADS set to their count and "
        "KILN_LAUNCH_INSTANCE to its index; prints each instance's output behind its index, and the "
        "throughput `kiln bench` reports per instance and in total.\n\n%s",
        options_help(specs).c_str());
    return 0;
  }
  KILN_CHECK(!command.empty(), invalid_argument,
             "kiln launch expects a command after '--' (e.g. kiln launch --throughput -- kiln bench MODEL)");
  KILN_CHECK(!(parsed.has("throughput") && parsed.has("latency")), invalid_argument,
             "kiln launch: --throughput and --latency contradict each other");
  const std::vector<int> cpus = allowed_cpus();
  const int available = static_cast<int>(cpus.size());
  const int default_instances = parsed.has("throughput") ? available : 1;
  const int instances = parsed.int_value("instances", default_instances, 1, available);
  const int per_instance =
      parsed.int_value("cores-per-instance", std::max(1, available / instances), 1, available);
  KILN_CHECK(instances * per_instance <= available, invalid_argument, "kiln launch: ", instances,
             " instances x ", per_instance, " cores need ", instances * per_instance,
             " cores; this process may use ", available, " (cpus ", cpu_list(cpus), ")");
  const std::string wait_policy = parsed.value("wait-policy");
  KILN_CHECK(wait_policy.empty() || wait_policy == "passive" || wait_policy == "active", invalid_argument,
             "--wait-policy expects 'passive' or 'active', got '", wait_policy, "'");
  std::string preload;
  if (parsed.has("jemalloc")) {
    for (const char* path : kJemallocPaths) {
      if (access(path, R_OK) == 0) preload = path;
    }
    KILN_CHECK(!preload.empty(), invalid_argument,
               "--jemalloc: libjemalloc.so.2 not found (install Debian's libjemalloc2)");
  }

  std::vector<Instance> launched(static_cast<size_t>(instances));
  std::fflush(stdout);
  for (int i = 0; i < instances; ++i) {
    Instance& instance = launched[i];
    instance.cpus.assign(cpus.begin() + i * per_instance, cpus.begin() + (i + 1) * per_instance);
    int pipe_ends[2];
    KILN_CHECK(pipe(pipe_ends) == 0, runtime, "kiln launch: cannot create a pipe: ", std::strerror(errno));
    instance.pid = fork();
    KILN_CHECK(instance.pid >= 0, runtime, "kiln launch: cannot start instance ", i, ": ",
               std::strerror(errno));
    if (instance.pid == 0) {
      close(pipe_ends[0]);
      exec_instance(instance, i, command, wait_policy, preload, pipe_ends[1]);
    }
    close(pipe_ends[1]);
    instance.output = pipe_ends[0];
    running_instances().push_back(instance.pid);
    std::printf("kiln launch: instance %d (pid %d) on cpus %s%s%s\n", i, static_cast<int>(instance.pid),
                cpu_list(instance.cpus).c_str(),
                wait_policy.empty() ? "" : str_cat(", OMP_WAIT_POLICY=", wait_policy).c_str(),
                preload.empty() ? "" : ", jemalloc");
  }
  struct sigaction pass_on {};
  pass_on.sa_handler = pass_signal_on;
  sigaction(SIGINT, &pass_on, nullptr);
  sigaction(SIGTERM, &pass_on, nullptr);

  for (;;) {
    std::vector<pollfd> open;
    std::vector<int> owners;
    for (int i = 0; i < instances; ++i) {
      if (launched[i].output < 0) continue;
      open.push_back({launched[i].output, POLLIN, 0});
      owners.push_back(i);
    }
    if (open.empty()) break;
    if (poll(open.data(), open.size(), -1) < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::runtime, "kiln launch: poll failed: ", std::strerror(errno));
    }
    for (size_t k = 0; k < open.size(); ++k) {
      if (open[k].revents == 0) continue;
      Instance& instance = launched[owners[k]];
      if (!forward_output(instance, owners[k])) {
        close(instance.output);
        instance.output = -1;
      }
    }
  }
  int exit_code = 0;
  double total = 0;
  bool every_throughput = true;
  for (int i = 0; i < instances; ++i) {
    Instance& instance = launched[i];
    int status = 0;
    while (waitpid(instance.pid, &status, 0) < 0 && errno == EINTR) {
    }
    instance.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (exit_code == 0) exit_code = instance.exit_code;
    std::printf("kiln launch: instance %d on cpus %s exited with %d", i, cpu_list(instance.cpus).c_str(),
                instance.exit_code);
    if (instance.throughput) {
      std::printf("; throughput %.2f samples/s", *instance.throughput);
      total += *instance.throughput;
    } else {
      every_throughput = false;
    }
    std::printf("\n");
  }
  running_instances().clear();
  if (every_throughput)
    std::printf("kiln launch: aggregate throughput %.2f samples/s over %d instances\n", total, instances);
  return exit_code;
}

}  // namespace kiln
