// The `kiln` executable.
#include "tools/cli.h"

int main(int argc, char** argv) {
  return kiln::run_cli(std::vector<std::string>(argv + 1, argv + argc));
}
