// Tests of nexus/src/processes/parent.c and child.c: process contexts started
// with nx_context_create on this host, their bootstrap and their ends; no
// process or file descriptor is left behind.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dirent.h>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "child_pid.h"
#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

int open_fds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  while (d != nullptr && readdir(d) != nullptr)
    n++;
  if (d != nullptr)
    closedir(d);
  return n;
}

// No child of this process is left, running or unreaped (child_pid.h).
bool no_children() { return nxt_no_children() != 0; }

// The pid of our running ctx_child, or -1 (looked for a while).
pid_t find_child() {
  pid_t child = -1;
  for (int tries = 0; tries < 100 && child < 0; tries++)
    child = nxt_child_pid("ctx_child");
  return child;
}

nx_node_t local_node() {
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  return node;
}

} // namespace

TEST_CASE("nodes on this host; other specs are not supported yet",
          "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t nodes[3];
  REQUIRE(nx_nodes_acquire("localhost", 3, nodes) == 0);
  CHECK(nodes[2].id == 2);
  CHECK(std::string(nodes[0].host) == "localhost");
  CHECK(nx_nodes_acquire("mpi:hosts=a,b", 2, nodes) == NX_ENOTSUP);
  CHECK(nx_nodes_acquire(nullptr, 1, nodes) == NX_EINVAL);
  // A spec too long for a node's host is NX_EINVAL (process.h), also when
  // no loaded module is named by it.
  std::string longspec = "nosuch:" + std::string(60, 'a');
  CHECK(nx_nodes_acquire(longspec.c_str(), 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire(longspec.substr(0, 63).c_str(), 1, nodes) ==
        NX_ENOTSUP);
  CHECK(nx_node_release(&nodes[0]) == 0);
  nx_node_t far = nodes[0];
  std::snprintf(far.host, sizeof(far.host), "elsewhere.example");
  nx_gp_t gp;
  CHECK(nx_context_create(&far, CHILD_EXE, nullptr, &gp) == NX_ENOTSUP);
}

TEST_CASE("20 process contexts created and destroyed in a row", "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  // One round first: the runtime's process monitor opens its pipe once.
  nx_gp_t warm;
  REQUIRE(nx_context_create(&node, CHILD_EXE, nullptr, &warm) == 0);
  REQUIRE(nx_context_destroy(&warm) == 0);
  nx_gp_release(&warm);
  // Destroy returns before the child has ended: its socket and pidfd are
  // closed when the monitor reaps it.
  REQUIRE(no_children());
  usleep(50 * 1000);
  int fds = open_fds();
  for (int i = 0; i < 20; i++) {
    nx_gp_t gp = NX_GP_NULL;
    char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
    REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &gp) == 0);
    CHECK_FALSE(nx_gp_is_null(&gp));
    CHECK((nx_gp_context(&gp) >> 32) !=
          (nx_context_id(nx_context_self()) >> 32)); // another process
    // RSRs before it ends (over tcp: a connection that closes with it),
    // none after: a destroyed context is NX_ENOCONTEXT, not a dead peer.
    for (int k = 0; k < 10; k++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "count", 0) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
    }
    REQUIRE(nx_context_destroy(&gp) == 0);
    CHECK(nx_context_destroy(&gp) == NX_ENOCONTEXT);
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &gp, "count", 0) == 0);
    CHECK(nx_rsr_send(b) == NX_ENOCONTEXT);
    nx_gp_release(&gp);
  }
  CHECK(no_children());
  // The monitor closes a child's socket and pidfd as it reaps it.
  for (int i = 0; i < 1000 && open_fds() != fds; i++)
    usleep(2000);
  CHECK(open_fds() == fds);
}

TEST_CASE("a process context that cannot start, or never gets ready",
          "[process][badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_context_create(&node, "/nonexistent/program", nullptr, &gp) ==
        NX_ENOENT);
  char *const early[] = {(char *)"ctx_child", (char *)"exit-early", nullptr};
  CHECK(nx_context_create(&node, CHILD_EXE, early, &gp) == NX_EPEERDEAD);
  setenv("NX_CREATE_TIMEOUT", "1", 1);
  char *const stuck[] = {(char *)"ctx_child", (char *)"no-ready", nullptr};
  CHECK(nx_context_create(&node, CHILD_EXE, stuck, &gp) == NX_ETIMEDOUT);
  unsetenv("NX_CREATE_TIMEOUT");
  CHECK(nx_gp_is_null(&gp));
  CHECK(nx_context_create(&node, CHILD_EXE, nullptr, nullptr) == NX_EINVAL);
  CHECK(no_children());
}

namespace {
// Starts ctx_child "env" with `attr`; returns what it wrote ("" if none).
std::string child_env(const nx_node_t &node, const nx_context_attr_t *attr,
                      int *rc) {
  char path[] = "/tmp/nx_env_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  nx_gp_t gp = NX_GP_NULL;
  char *const argv[] = {(char *)"ctx_child", (char *)"env", path, nullptr};
  *rc = nx_context_create_attr(&node, CHILD_EXE, argv, attr, &gp);
  std::string line;
  if (*rc == 0) {
    REQUIRE(nx_context_destroy(&gp) == 0); // it wrote the file before serving
    std::ifstream in(path);
    std::getline(in, line);
    nx_gp_release(&gp);
  }
  unlink(path);
  return line;
}
} // namespace

TEST_CASE("nx_context_create_attr: an environment for the child, only it if "
          "asked, and misuse refused",
          "[process][badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  setenv("NXT_PARENT", "p", 1);
  setenv("NXT_B", "parent-b", 1);
  int rc = -1;
  // No attributes: nx_context_create's environment.
  CHECK(child_env(node, nullptr, &rc) == "- parent-b p");
  CHECK(rc == 0);
  // Entries set over the inherited ones.
  char *const env[] = {(char *)"NXT_A=1", (char *)"NXT_B=two words", nullptr};
  nx_context_attr_t attr = {env, 0, 0};
  CHECK(child_env(node, &attr, &rc) == "1 two words p");
  CHECK(rc == 0);
  // Only them (the child still starts: nexus adds what it needs).
  attr.flags = NX_CREATE_ENV_ONLY;
  CHECK(child_env(node, &attr, &rc) == "1 two words -");
  CHECK(rc == 0);
  // A timeout of its own: a child that never gets ready.
  char *const stuck[] = {(char *)"ctx_child", (char *)"no-ready", nullptr};
  nx_context_attr_t quick = {nullptr, 0, 300};
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_context_create_attr(&node, CHILD_EXE, stuck, &quick, &gp) ==
        NX_ETIMEDOUT);
  // Misuse.
  char *const no_eq[] = {(char *)"NXT_A", nullptr};
  char *const empty_name[] = {(char *)"=1", nullptr};
  char *const newline[] = {(char *)"NXT_A=1\nNXT_C=2", nullptr};
  char *const key[] = {(char *)"NX_KEY=00", nullptr};
  char *const fd[] = {(char *)"NX_CTL_FD=3", nullptr};
  for (char *const *bad : {no_eq, empty_name, newline, key, fd}) {
    nx_context_attr_t b = {bad, 0, 0};
    CHECK(nx_context_create_attr(&node, CHILD_EXE, nullptr, &b, &gp) ==
          NX_EINVAL);
  }
  nx_context_attr_t flags = {nullptr, 0x80, 0};
  CHECK(nx_context_create_attr(&node, CHILD_EXE, nullptr, &flags, &gp) ==
        NX_EINVAL);
  nx_context_attr_t negative = {nullptr, 0, -1};
  CHECK(nx_context_create_attr(&node, CHILD_EXE, nullptr, &negative, &gp) ==
        NX_EINVAL);
  CHECK(nx_gp_is_null(&gp));
  unsetenv("NXT_PARENT");
  unsetenv("NXT_B");
  CHECK(no_children());
}

TEST_CASE("NX_PROC_ID names a child's context ids, and only the child's "
          "it was given to",
          "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  // Given in the child's environment: its context ids carry it.
  char *const env[] = {(char *)"NX_PROC_ID=262145", nullptr};
  nx_context_attr_t attr = {env, 0, 0};
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_context_create_attr(&node, CHILD_EXE, nullptr, &attr, &gp) == 0);
  CHECK((nx_gp_context(&gp) >> 32) == 262145u);
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
  // Set in the creator's environment: not passed on (a second process
  // with one id would break both), so the child draws its own.
  setenv("NX_PROC_ID", "262145", 1);
  REQUIRE(nx_context_create(&node, CHILD_EXE, nullptr, &gp) == 0);
  CHECK((nx_gp_context(&gp) >> 32) != 262145u);
  REQUIRE(nx_context_destroy(&gp) == 0);
  nx_gp_release(&gp);
  unsetenv("NX_PROC_ID");
  // 0 and non-numbers are refused by the child's nx_init: it never gets
  // ready.
  char *const zero[] = {(char *)"NX_PROC_ID=0", nullptr};
  nx_context_attr_t bad = {zero, 0, 5000};
  CHECK(nx_context_create_attr(&node, CHILD_EXE, nullptr, &bad, &gp) < 0);
  CHECK(nx_gp_is_null(&gp));
  CHECK(no_children());
}

TEST_CASE("a created process context knows its creator", "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  char path[] = "/tmp/nx_peers_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  nx_gp_t gp;
  char *const argv[] = {(char *)"ctx_child", (char *)"peers", path, nullptr};
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &gp) == 0);
  REQUIRE(nx_context_destroy(&gp) == 0);
  // It writes the file after it is ready (nx_context_peers), and destroy
  // does not wait for it to end: it has written it once it is gone.
  REQUIRE(no_children());
  std::ifstream in(path);
  int r = -1, n = -1, rank = 0;
  std::string ctx;
  in >> r >> n >> rank >> std::hex >> ctx;
  unlink(path);
  CHECK(r == 0);
  CHECK(n == 1);
  CHECK(rank == -1);
  CHECK(std::stoull(ctx, nullptr, 16) == nx_context_id(nx_context_self()));
  nx_gp_release(&gp);
}

namespace {
struct deaths {
  latch n;
  std::atomic<uint64_t> ctx{0};
};
void on_death(int err, uint64_t ctx, uint32_t, void *arg) {
  auto *d = static_cast<deaths *>(arg);
  if (err == NX_EPEERDEAD) {
    d->ctx = ctx;
    d->n.add();
  }
}
} // namespace

TEST_CASE("a process context killed with SIGKILL is noticed", "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  deaths d;
  REQUIRE(nx_error_cb_set(on_death, &d) == 0);
  nx_node_t node = local_node();
  nx_gp_t gp;
  char path[] = "/tmp/nx_pid_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  char *const argv[] = {(char *)"ctx_child", (char *)"peers", path, nullptr};
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &gp) == 0);
  // Find the child by its parent: us.
  pid_t child = find_child();
  unlink(path);
  REQUIRE(child > 0);
  REQUIRE(kill(child, SIGKILL) == 0);
  REQUIRE(d.n.wait_for(1, 10) == 1);
  CHECK((d.ctx >> 32) == (nx_gp_context(&gp) >> 32));
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &gp, "ping", 0) == 0);
  CHECK(nx_rsr_send(b) == NX_EPEERDEAD);
  REQUIRE(nx_context_destroy(&gp) == 0); // reaps it
  CHECK(no_children());
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  nx_gp_release(&gp);
}

// The creator's monitor thread polls the children's sockets; a child that
// dies and is destroyed at once must not be touched by the monitor after
// nx_context_destroy freed it (ASan caught a use after free here).
TEST_CASE("a process context destroyed just as it dies", "[process]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  for (int i = 0; i < 8; i++) {
    INFO("round " << i);
    nx_gp_t gp;
    char path[] = "/tmp/nx_pid_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    char *const argv[] = {(char *)"ctx_child", (char *)"peers", path, nullptr};
    REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &gp) == 0);
    pid_t child = find_child();
    unlink(path);
    REQUIRE(child > 0);
    REQUIRE(kill(child, SIGKILL) == 0);
    if (i % 2 == 1)
      usleep(1000); // sometimes after its hang-up reached the monitor
    CHECK(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
  }
  CHECK(no_children());
}
