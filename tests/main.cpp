// Catch2 main for every nexus test executable, built once and linked into each.
//
// Tests need no environment (libnexus finds the build tree's protocols/ by
// itself), but a developer's shell may carry settings that change what the
// runtime prints or does. meson.build lists variables to drop in
// NX_TESTS_UNSET (colon-separated); they are removed before any test runs.
// Running a test executable by hand keeps the caller's environment.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

static void unset_listed_variables() {
  const char *list = std::getenv("NX_TESTS_UNSET");
  if (list == nullptr)
    return;
  std::string names(list);
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find(':', start);
    if (end == std::string::npos)
      end = names.size();
    std::string name = names.substr(start, end - start);
    if (!name.empty())
      unsetenv(name.c_str());
    start = end + 1;
  }
  unsetenv("NX_TESTS_UNSET");
}

int main(int argc, char *argv[]) {
  unset_listed_variables();
  return Catch::Session().run(argc, argv);
}
