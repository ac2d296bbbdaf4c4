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
