// Tests of the process layer's reaping (nexus/src/processes/parent.c and
// uvloop.c) beside a program's own SIGCHLD handler and children: nexus waits
// for its children by pidfd and waitpid on their pids alone and installs no
// signal handler, so a program's handler stays in place and hears its
// signals, the program's own children stay its to reap, and a program that
// reaps every child (waitpid(-1)) does not stall nexus. A process forked
// from a creator leaves its parent's loop alone and starts its own, and an
// error callback on the loop's thread cannot make it wait for itself.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <sys/wait.h>
#include <unistd.h>

#include "child_pid.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

std::atomic<int> sigchld_seen{0};
void count_sigchld(int) { sigchld_seen++; }

std::atomic<pid_t> watched{0};
std::atomic<int> program_reaped{0};
void reap_every_child(int) {
  int saved = errno;
  pid_t p;
  while ((p = waitpid(-1, nullptr, WNOHANG)) > 0)
    if (p == watched)
      program_reaped = 1;
  errno = saved;
}

// Installs `fn` for SIGCHLD while it lives.
class sigchld_guard {
public:
  explicit sigchld_guard(void (*fn)(int)) {
    struct sigaction sa = {};
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, &old_);
  }
  ~sigchld_guard() { sigaction(SIGCHLD, &old_, nullptr); }

private:
  struct sigaction old_;
};

void (*sigchld_handler())(int) {
  struct sigaction sa;
  sigaction(SIGCHLD, nullptr, &sa);
  return sa.sa_handler;
}

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void sleep_ms(int ms) { // through the signals' interruptions
  double end = now_ms() + ms;
  while (now_ms() < end)
    usleep(1000);
}

nx_node_t local_node() {
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  return node;
}

char *serve_argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};

} // namespace

TEST_CASE("a program's SIGCHLD handler and its own children beside process "
          "contexts",
          "[process][sigchld]") {
  sigchld_guard guard(count_sigchld);
  sigchld_seen = 0;
  pid_t own = -1;
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_node_t node = local_node();
    nx_gp_t gp = NX_GP_NULL;
    REQUIRE(nx_context_create(&node, CHILD_EXE, serve_argv, &gp) == 0);
    // The program's own child ends while nexus watches its child.
    own = fork();
    REQUIRE(own >= 0);
    if (own == 0)
      _exit(7);
    sleep_ms(200);
    REQUIRE(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
    CHECK(sigchld_handler() == count_sigchld);
    REQUIRE(rt.finalize() == 0); // waits until the context's child is reaped
  }
  CHECK(sigchld_handler() == count_sigchld);
  int status = 0;
  REQUIRE(waitpid(own, &status, 0) == own); // still the program's to reap
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  CHECK(sigchld_seen >= 2); // its own child's end and the context's
  CHECK(nxt_no_children());
}

TEST_CASE("a program that reaps every child in its SIGCHLD handler",
          "[process][sigchld]") {
  sigchld_guard guard(reap_every_child);
  program_reaped = 0;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_context_create(&node, CHILD_EXE, serve_argv, &gp) == 0);
  watched = nxt_child_pid("ctx_child");
  REQUIRE(watched > 0);
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
  // Whoever reaps it first, nexus learns that it ended: nx_finalize does
  // not wait for the stages of its end (5 s, then SIGTERM).
  double t0 = now_ms();
  REQUIRE(rt.finalize() == 0);
  CHECK(now_ms() - t0 < 4000);
  INFO("the program reaped it: " << program_reaped.load());
  CHECK(nxt_no_children());
}

TEST_CASE("a process forked from a creator starts a process layer of its own",
          "[process][sigchld]") {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer ends a process that starts a thread after a fork of a
  // threaded one (die_after_fork), and the loop is such a thread.
  WARN("not under ThreadSanitizer: a thread started after fork");
  return;
#endif
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_context_create(&node, CHILD_EXE, serve_argv, &gp) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Its parent's loop and children are not its own: a context it
    // creates is watched by a loop of its own. It leaves without
    // nx_finalize (its runtime threads stayed with its parent); its child
    // hears the channel close and ends.
    alarm(20);
    nx_gp_t mine = NX_GP_NULL;
    int r = nx_context_create(&node, CHILD_EXE, serve_argv, &mine);
    _exit(r == 0 ? 0 : 10);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The parent's child is still its own, watched as before.
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
  REQUIRE(rt.finalize() == 0);
  CHECK(nxt_no_children());
}

namespace {

std::atomic<int> create_in_callback{1};
nx_node_t callback_node;

void create_on_death(int err, uint64_t ctx, uint32_t handler, void *arg) {
  (void)ctx;
  (void)arg;
  if (err != NX_EPEERDEAD || handler != 0 || create_in_callback != 1)
    return;
  nx_gp_t gp = NX_GP_NULL;
  create_in_callback =
      nx_context_create(&callback_node, CHILD_EXE, serve_argv, &gp);
}

} // namespace

// The loop's thread tells of a child's death, so an error callback may run
// there: a create in it, which would wait for that thread, is NX_EBUSY
// (not a deadlock).
TEST_CASE("nx_context_create in an error callback on the loop's thread",
          "[process][sigchld]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  callback_node = local_node();
  create_in_callback = 1;
  nx_error_cb_set(create_on_death, nullptr);
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_context_create(&callback_node, CHILD_EXE, serve_argv, &gp) == 0);
  pid_t child = nxt_child_pid("ctx_child");
  REQUIRE(child > 0);
  REQUIRE(kill(child, SIGKILL) == 0);
  for (int i = 0; i < 1000 && create_in_callback == 1; i++)
    sleep_ms(10);
  CHECK(create_in_callback == NX_EBUSY);
  nx_error_cb_set(nullptr, nullptr);
  CHECK(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
  REQUIRE(rt.finalize() == 0);
  CHECK(nxt_no_children());
}
