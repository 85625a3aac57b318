// The `kiln` CLI's commands. Each takes the arguments after its name, prints its results to stdout
// and returns the process exit code; errors are thrown as kiln::Error and reported by run_cli()
// (tools/cli.cpp).
#pragma once

#include <string>
#include <vector>

namespace kiln {

int command_info(const std::vector<std::string>& args);
int command_run(const std::vector<std::string>& args);
int command_conformance(const std::vector<std::string>& args);
int command_bench(const std::vector<std::string>& args);
int command_explain(const std::vector<std::string>& args);
int command_launch(const std::vector<std::string>& args);
int command_profile(const std::vector<std::string>& args);
int command_tidy(const std::vector<std::string>& args);
int command_compare(const std::vector<std::string>& args);
int command_quantize(const std::vector<std::string>& args);
int command_serve(const std::vector<std::string>& args);

}  // namespace kiln
