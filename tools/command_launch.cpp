// `kiln launch [options] -- COMMAND [ARGS...]`: starts instances of COMMAND at the same time, laid
// out over the machine's cores and NUMA nodes as PyTorch's run_cpu lays them out (tools/launch_plan.h):
// each pinned to its CPUs (sched_setaffinity), its memory bound to their nodes (set_mempolicy), its
// thread counts set to its cores, an allocator preloaded. Each instance's output is forwarded line by
// line behind "[instance N] " (stdout to stdout, stderr to stderr) and, with --log-path, written to its
// log file; lines reporting a throughput (`kiln bench`'s text or JSON) are summed into the aggregate
// printed at the end. The exit code is the first failing instance's (128 + the signal for one killed
// by a signal), else 0. SIGINT and SIGTERM are passed on to the instances.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/launch_plan.h"

namespace kiln {
namespace {

std::vector<pid_t>& running_instances() {
  static std::vector<pid_t> pids;
  return pids;
}

void pass_signal_on(int signal_number) {
  for (pid_t pid : running_instances()) kill(pid, signal_number);
}

// The throughput a line of `kiln bench` output reports, if it reports one: text
// ("throughput: 12.5 samples/s" at the start of the line) or JSON ("throughput_per_s": 12.5).
std::optional<double> reported_throughput(const std::string& line) {
  const auto number_at = [&](size_t begin) -> std::optional<std::pair<double, size_t>> {
    double value = 0;
    const auto [end, error] = std::from_chars(line.data() + begin, line.data() + line.size(), value);
    if (error != std::errc{}) return std::nullopt;
    return std::pair{value, static_cast<size_t>(end - line.data())};
  };
  constexpr std::string_view text = "throughput: ", json = "\"throughput_per_s\": ";
  if (line.rfind(text, 0) == 0) {
    const auto number = number_at(text.size());
    if (number && line.compare(number->second, 10, " samples/s") == 0) return number->first;
  }
  if (const size_t at = line.find(json); at != std::string::npos) {
    if (const auto number = number_at(at + json.size())) return number->first;
  }
  return std::nullopt;
}

// One of an instance's output streams: the read end of its pipe and a line not finished yet.
struct Stream {
  int fd = -1;  // -1 once closed
  std::string pending;
  FILE* console = nullptr;  // stdout or stderr
};

struct Instance {
  InstancePlan plan;
  pid_t pid = -1;
  Stream streams[2];
  FILE* log = nullptr;
  std::optional<double> throughput;
  int exit_code = 0;
};

// In the child: pins, binds memory, sets the environment and execs; never returns.
[[noreturn]] void exec_instance(const InstancePlan& plan, const std::vector<std::string>& command, int out, int err) {
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  close(out);
  close(err);
  if (plan.pinned) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : plan.cpus) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      std::fprintf(stderr, "kiln launch: instance %d: cannot pin to cpus %s: %s\n", plan.index,
                   format_cpu_list(plan.cpus).c_str(), std::strerror(errno));
      _exit(126);
    }
  }
  if (plan.bind_memory) {
    // What `numactl -m` does; allowed to fail (a container's seccomp profile may refuse it without
    // CAP_SYS_NICE): the instance then runs with the default policy, and says so.
    unsigned long nodes[16] = {};
    constexpr int kBits = 8 * sizeof(unsigned long);
    for (int node : plan.nodes) nodes[node / kBits] |= 1UL << (node % kBits);
    if (syscall(SYS_set_mempolicy, MPOL_BIND, nodes, sizeof(nodes) * 8 + 1) != 0) {
      std::fprintf(stderr, "kiln launch: instance %d: memory not bound to nodes %s: set_mempolicy: %s\n", plan.index,
                   format_cpu_list(plan.nodes).c_str(), std::strerror(errno));
    }
  }
  for (const auto& [name, value] : plan.environment) setenv(name.c_str(), value.c_str(), 1);
  for (const std::string& name : plan.unset) unsetenv(name.c_str());
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "kiln launch: instance %d: cannot run '%s': %s\n", plan.index, command[0].c_str(),
               std::strerror(errno));
  _exit(127);
}

void emit(Instance& instance, Stream& stream, const std::string& line) {
  if (&stream == &instance.streams[0]) {
    if (const std::optional<double> throughput = reported_throughput(line)) instance.throughput = throughput;
  }
  std::fprintf(stream.console, "[instance %d] %s\n", instance.plan.index, line.c_str());
  if (instance.log != nullptr) std::fprintf(instance.log, "%s\n", line.c_str());
}

// Forwards every complete line read from `stream`; false at end of output.
bool forward_output(Instance& instance, Stream& stream) {
  char buffer[4096];
  const ssize_t count = read(stream.fd, buffer, sizeof buffer);
  if (count < 0 && errno == EINTR) return true;
  const bool open = count > 0;
  if (open) stream.pending.append(buffer, static_cast<size_t>(count));
  size_t begin = 0;
  for (size_t end; (end = stream.pending.find('\n', begin)) != std::string::npos; begin = end + 1) {
    emit(instance, stream, stream.pending.substr(begin, end - begin));
  }
  stream.pending.erase(0, begin);
  if (!open && !stream.pending.empty()) {
    emit(instance, stream, stream.pending);
    stream.pending.clear();
  }
  std::fflush(stream.console);
  if (instance.log != nullptr) std::fflush(instance.log);
  return open;
}

LaunchOptions launch_options(const ParsedArgs& parsed) {
  LaunchOptions options;
  // kiln's earlier spellings stay as aliases of run_cpu's.
  const auto either = [&](const char* name, const char* alias) {
    KILN_CHECK(!(parsed.has(name) && parsed.has(alias)), invalid_argument, "kiln launch: --", name, " and --",
               alias, " are the same option; give one");
    return parsed.has(name) ? name : alias;
  };
  options.instances = parsed.int_value(either("ninstances", "instances"), -1, 1, kMaxThreads);
  options.cores_per_instance = parsed.int_value(either("ncores-per-instance", "cores-per-instance"), -1, 1, kMaxThreads);
  options.node = parsed.int_value("node-id", -1, 0, 1 << 20);
  options.rank = parsed.int_value("rank", -1, 0, kMaxThreads);
  if (parsed.has("core-list")) options.core_list = parse_cpu_list(parsed.value("core-list"), "--core-list");
  KILN_CHECK(!options.core_list || !options.core_list->empty(), invalid_argument,
             "kiln launch: --core-list is empty (expected CPU ids such as 0-3,8)");
  options.use_logical_cores = parsed.has("use-logical-core");
  options.skip_cross_node_cores = parsed.has("skip-cross-node-cores");
  options.latency_mode = parsed.has(either("latency-mode", "latency"));
  options.throughput_mode = parsed.has(either("throughput-mode", "throughput"));
  options.disable_numactl = parsed.has("disable-numactl");
  const bool tcmalloc = parsed.has("enable-tcmalloc"), jemalloc = parsed.has(either("enable-jemalloc", "jemalloc")),
             system = parsed.has("use-default-allocator");
  KILN_CHECK(tcmalloc + jemalloc + system <= 1, invalid_argument,
             "kiln launch: --enable-tcmalloc, --enable-jemalloc and --use-default-allocator contradict each other");
  options.allocator = tcmalloc ? LaunchAllocator::tcmalloc
                      : jemalloc ? LaunchAllocator::jemalloc
                      : system   ? LaunchAllocator::system
                                 : LaunchAllocator::automatic;
  options.wait_policy = parsed.value("wait-policy");
  KILN_CHECK(options.wait_policy.empty() || options.wait_policy == "passive" || options.wait_policy == "active",
             invalid_argument, "--wait-policy expects 'passive' or 'active', got '", options.wait_policy, "'");
  options.log_path = parsed.value("log-path");
  options.log_file_prefix = parsed.value("log-file-prefix", "run");
  KILN_CHECK(!options.log_file_prefix.empty() && options.log_file_prefix.find('/') == std::string::npos,
             invalid_argument, "--log-file-prefix expects a file name prefix without '/', got '",
             options.log_file_prefix, "'");
  return options;
}

}  // namespace

int command_launch(const std::vector<std::string>& args) {
  const auto separator = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> options(args.begin(), separator);
  const std::vector<std::string> command(separator == args.end() ? separator : separator + 1, args.end());
  const std::vector<OptionSpec> specs = {
      {"ninstances", true, "N: instances to start (alias --instances; default: from the mode)"},
      {"ncores-per-instance", true,
       "C: physical cores (CPUs with --use-logical-core) per instance (alias --cores-per-instance)"},
      {"node-id", true, "ID: use only NUMA node ID's cores"},
      {"core-list", true, "LIST: use only these CPUs (e.g. 0-3,8; needs --ncores-per-instance)"},
      {"use-logical-core", false, "count SMT siblings as cores (instances may then share a physical core)"},
      {"skip-cross-node-cores", false,
       "with --ncores-per-instance: leave a node's leftover cores idle instead of spanning two nodes"},
      {"latency-mode", false, "4 physical cores per instance, every physical core used (alias --latency)"},
      {"throughput-mode", false, "one instance per NUMA node on its physical cores (alias --throughput)"},
      {"rank", true, "R: start only instance R of the layout"},
      {"disable-numactl", false, "neither pin the instances' CPUs nor bind their memory to their nodes"},
      {"enable-tcmalloc", false, "preload tcmalloc (Debian's libtcmalloc-minimal4); the default when installed"},
      {"enable-jemalloc", false, "preload jemalloc (Debian's libjemalloc2), with run_cpu's MALLOC_CONF (alias --jemalloc)"},
      {"use-default-allocator", false, "preload no allocator"},
      {"wait-policy", true,
       "passive|active: OMP_WAIT_POLICY for the instances, GOMP_SPINCOUNT unset (default: the environment's, "
       "else libgomp's own)"},
      {"log-path", true, "DIR: also write each instance's output to DIR/PREFIX_instance_N.log"},
      {"log-file-prefix", true, "PREFIX: for the log files (default: run)"},
      {"dry-run", false, "print each instance's CPUs, nodes, memory policy and environment; start nothing"},
      {"instances", true, ""},
      {"cores-per-instance", true, ""},
      {"latency", false, ""},
      {"throughput", false, ""},
      {"jemalloc", false, ""},
      {"help", false, "show this help"},
  };
  const ParsedArgs parsed = parse_args("launch", options, specs);
  if (parsed.has("help")) {
    std::vector<OptionSpec> shown;
    std::copy_if(specs.begin(), specs.end(), std::back_inserter(shown), [](const OptionSpec& spec) { return !spec.help.empty(); });
    std::printf(
        "usage: kiln launch [options] -- COMMAND [ARGS...]\n\nStarts instances of COMMAND at once, laid out as "
        "PyTorch's torch.backends.xeon.run_cpu lays them out: by default one instance using every physical core, "
        "each pinned to its CPUs with its memory bound to their NUMA nodes, OMP_NUM_THREADS and KILN_NUM_THREADS "
        "set to its core count and KILN_LAUNCH_INSTANCE to its index; prints each instance's output behind its "
        "index, and the throughput `kiln bench` reports per instance and in total.\n\n%s",
        options_help(shown).c_str());
    return 0;
  }
  const bool dry_run = parsed.has("dry-run");
  KILN_CHECK(dry_run || !command.empty(), invalid_argument,
             "kiln launch expects a command after '--' (e.g. kiln launch --throughput-mode -- kiln bench MODEL)");
  const LaunchPlan plan = plan_launch(process_topology(), launch_options(parsed),
                                      [](const char* name) -> const char* { return std::getenv(name); });
  std::printf("%s", describe_launch_plan(plan).c_str());
  if (dry_run) return 0;

  const std::string log_path = parsed.value("log-path");
  if (!log_path.empty()) {
    std::error_code error;
    std::filesystem::create_directories(log_path, error);
    KILN_CHECK(!error, invalid_argument, "--log-path: cannot create directory '", log_path, "': ", error.message());
  }
  std::vector<Instance> launched(plan.instances.size());
  // Every log file opens before any instance starts, so a bad one stops the launch with none running.
  for (size_t i = 0; i < launched.size(); ++i) {
    Instance& instance = launched[i];
    instance.plan = plan.instances[i];
    if (instance.plan.log_file.empty()) continue;
    instance.log = std::fopen(instance.plan.log_file.c_str(), "we");
    KILN_CHECK(instance.log != nullptr, invalid_argument, "--log-path: cannot write '", instance.plan.log_file,
               "': ", std::strerror(errno));
  }
  std::fflush(stdout);
  try {
    for (Instance& instance : launched) {
      // Close-on-exec, so no instance inherits another's pipes or log file (dup2 clears the flag on
      // the instance's own stdout and stderr).
      int out[2], err[2];
      KILN_CHECK(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, runtime,
                 "kiln launch: cannot create a pipe: ", std::strerror(errno));
      instance.pid = fork();
      KILN_CHECK(instance.pid >= 0, runtime, "kiln launch: cannot start instance ", instance.plan.index, ": ",
                 std::strerror(errno));
      if (instance.pid == 0) {
        close(out[0]);
        close(err[0]);
        exec_instance(instance.plan, command, out[1], err[1]);
      }
      close(out[1]);
      close(err[1]);
      instance.streams[0] = {out[0], "", stdout};
      instance.streams[1] = {err[0], "", stderr};
      running_instances().push_back(instance.pid);
      std::printf("kiln launch: instance %d started (pid %d)\n", instance.plan.index, static_cast<int>(instance.pid));
    }
  } catch (...) {
    pass_signal_on(SIGTERM);  // no instance outlives a launch that failed to start them all
    throw;
  }
  std::fflush(stdout);
  struct sigaction pass_on {};
  pass_on.sa_handler = pass_signal_on;
  sigaction(SIGINT, &pass_on, nullptr);
  sigaction(SIGTERM, &pass_on, nullptr);

  for (;;) {
    std::vector<pollfd> open;
    std::vector<Stream*> streams;
    std::vector<Instance*> owners;
    for (Instance& instance : launched) {
      for (Stream& stream : instance.streams) {
        if (stream.fd < 0) continue;
        open.push_back({stream.fd, POLLIN, 0});
        streams.push_back(&stream);
        owners.push_back(&instance);
      }
    }
    if (open.empty()) break;
    if (poll(open.data(), open.size(), -1) < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::runtime, "kiln launch: poll failed: ", std::strerror(errno));
    }
    for (size_t k = 0; k < open.size(); ++k) {
      if (open[k].revents == 0) continue;
      if (!forward_output(*owners[k], *streams[k])) {
        close(streams[k]->fd);
        streams[k]->fd = -1;
      }
    }
  }
  int exit_code = 0;
  double total = 0;
  bool every_throughput = true;
  for (Instance& instance : launched) {
    int status = 0;
    while (waitpid(instance.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (instance.log != nullptr) std::fclose(instance.log);
    instance.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (exit_code == 0) exit_code = instance.exit_code;
    std::printf("kiln launch: instance %d on cpus %s exited with %d", instance.plan.index,
                format_cpu_list(instance.plan.cpus).c_str(), instance.exit_code);
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
    std::printf("kiln launch: aggregate throughput %.2f samples/s over %zu instances\n", total, launched.size());
  return exit_code;
}

}  // namespace kiln
