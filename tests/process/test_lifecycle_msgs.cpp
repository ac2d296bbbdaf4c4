// Lifecycle errors name their real cause (issue 16): a process context that
// never calls nx_context_ready makes nx_context_create fail with a line
// saying so, and the SIGTERM nexus then sends it is not reported as the
// child's fault.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "nexus.h"
#include "capture_stderr.h"
#include "runtime_guard.h"

namespace {} // namespace

TEST_CASE("a worker that never gets ready: the timeout says why, nexus's own "
          "SIGTERM is not blamed on it",
          "[process][lifecycle]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  setenv("NX_CREATE_TIMEOUT", "1", 1);
  char *const stuck[] = {(char *)"ctx_child", (char *)"no-ready", nullptr};
  nx_gp_t gp = NX_GP_NULL;
  int r = 0;
  std::string err = capture_stderr(
      [&] { r = nx_context_create(&node, CHILD_EXE, stuck, &gp); });
  unsetenv("NX_CREATE_TIMEOUT");
  INFO(err);
  CHECK(r == NX_ETIMEDOUT);
  CHECK(err.find("did not call nx_context_ready or nx_context_serve within "
                 "1 s (NX_CREATE_TIMEOUT)") != std::string::npos);
  CHECK(err.find("was killed by signal") == std::string::npos);
}

// NX_CREATE_QUIET_END (process.h): a child's end with a non-zero status is
// printed by default, and not with the flag; nx_context_destroy reaps it,
// so the line, when there is one, is written inside the capture.
TEST_CASE("a child's non-zero exit is printed, unless created with "
          "NX_CREATE_QUIET_END",
          "[process][lifecycle]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  char *const argv[] = {(char *)"ctx_child", (char *)"ready-exit3", nullptr};
  for (unsigned flags : {0u, (unsigned)NX_CREATE_QUIET_END}) {
    nx_context_attr_t attr = {nullptr, flags, 0};
    nx_gp_t gp = NX_GP_NULL;
    int r = -1;
    std::string err = capture_stderr([&] {
      r = nx_context_create_attr(&node, CHILD_EXE, argv, &attr, &gp);
      if (r == 0) {
        usleep(400 * 1000); // it ends 100 ms after it is ready
        nx_context_destroy(&gp);
      }
    });
    INFO("flags " << flags << ": " << err);
    REQUIRE(r == 0);
    bool printed = err.find("exited with status 3") != std::string::npos;
    CHECK(printed == (flags == 0));
    nx_gp_release(&gp);
  }
}
