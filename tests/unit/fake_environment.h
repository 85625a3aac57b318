// A fake process environment for the functions that read thread counts from variables through an
// EnvironmentLookup (runtime/threads.h): tests set variables here instead of in the real one, which
// the process reads once.
#pragma once

#include <map>
#include <string>

namespace kiln::testing {

inline std::map<std::string, std::string>& fake_environment() {
  static std::map<std::string, std::string> variables;
  return variables;
}

inline const char* fake_lookup(const char* name) {
  auto it = fake_environment().find(name);
  return it == fake_environment().end() ? nullptr : it->second.c_str();
}

}  // namespace kiln::testing
