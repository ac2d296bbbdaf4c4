// Lifecycle errors name their real cause (issue 16): a process context that
// never calls nx_context_ready makes nx_context_create fail with a line
// saying so, and the SIGTERM nexus then sends it is not reported as the
// child's fault. Also the other ends of a process context's life: its
// non-zero exit, a Slurm step without PMIx, and its creator's death.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "child_pid.h"
#include "nexus.h"
#include "capture_stderr.h"
#include "runtime_guard.h"

namespace {

// A node for process contexts on this host.
nx_node_t local_node() {
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  return node;
}

} // namespace

TEST_CASE("a worker that never gets ready: the timeout says why, nexus's own "
          "SIGTERM is not blamed on it",
          "[process][lifecycle]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
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
// printed by default, and not with the flag. nx_context_destroy returns
// before the child has ended; the creator's monitor reaps it and writes
// the line then: the capture lasts until the child is gone.
TEST_CASE("a child's non-zero exit is printed, unless created with "
          "NX_CREATE_QUIET_END",
          "[process][lifecycle]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
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
        CHECK(nxt_no_children());
        usleep(100 * 1000); // the monitor writes the line as it reaps it
      }
    });
    INFO("flags " << flags << ": " << err);
    REQUIRE(r == 0);
    bool printed = err.find("exited with status 3") != std::string::npos;
    CHECK(printed == (flags == 0));
    nx_gp_release(&gp);
  }
}

// srun without --mpi=pmix (docs/pmix.md): nx_context_peers finds no job,
// and task 0 of a Slurm step of several tasks says how to start it, once.
// The step's variables are set here by hand; no PMIx server is about.
TEST_CASE("no job in a Slurm step without PMIx: task 0 gets the hint",
          "[process][lifecycle]") {
  const char *vars[] = {"PMIX_NAMESPACE", "PMIX_RANK", "NX_CTL_FD",
                        "NX_CTL_TCP"};
  for (const char *v : vars)
    REQUIRE(getenv(v) == nullptr);
  // Whatever step this test itself may run in is not the one checked.
  for (const char *v :
       {"SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"})
    unsetenv(v);
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  auto peers = [] {
    nx_gp_t *gps = nullptr;
    int n = 0, rank = 0;
    int r = 0;
    std::string err =
        capture_stderr([&] { r = nx_context_peers(&gps, &n, &rank); });
    CHECK(r == NX_ENOENT);
    return err;
  };
  // Not in a step, and task 1 of one: nothing.
  CHECK(peers().find("srun --mpi=pmix") == std::string::npos);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_PROCID", "1", 1);
  CHECK(peers().find("srun --mpi=pmix") == std::string::npos);
  // Task 0: the hint, once.
  setenv("SLURM_PROCID", "0", 1);
  std::string err = peers();
  INFO(err);
  CHECK(err.find("task 0 of the 4 tasks of Slurm step 0") != std::string::npos);
  CHECK(err.find("srun --mpi=pmix") != std::string::npos);
  CHECK(peers().find("srun --mpi=pmix") == std::string::npos);
  unsetenv("SLURM_STEP_ID");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_PROCID");
}

// A creator that dies without nx_finalize (killed here) while its child
// waits for nothing in particular: the child's error callback hears
// NX_EPEERDEAD for the creator's process from its control channel, though
// no module ever connected the two (before, it waited for ever).
TEST_CASE("a process context hears of its creator's death",
          "[process][lifecycle]") {
  char dir[] = "/tmp/nxt-creator-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string result = std::string(dir) + "/result";
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl(CHILD_EXE, CHILD_EXE, "create-and-die", result.c_str(),
          (char *)nullptr);
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("creator status " << status);
  REQUIRE(WIFSIGNALED(status)); // it made its child, then was killed
  CHECK(WTERMSIG(status) == SIGKILL);
  // The child writes what it heard within 20 s; give it 30.
  std::string text;
  for (int i = 0; i < 300 && text.empty(); i++) {
    std::ifstream f(result);
    std::getline(f, text);
    if (text.empty())
      usleep(100 * 1000);
  }
  CHECK(text == "saw-death");
  unlink(result.c_str());
  rmdir(dir);
}

// nexus at work in an atexit handler registered before nx_init (as a PVM
// program's pvm_exit in a static destructor is): a new connection's
// handshake there uses libcrypto, whose own exit-time cleanup, registered
// later and so run first, would have freed it (a crash, before
// nxu_auth_init).
TEST_CASE("a handshake in an atexit handler", "[process][lifecycle]") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl(CHILD_EXE, CHILD_EXE, "handshake-at-exit", (char *)nullptr);
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
