// Tests of modules that join a process context late (child.c, parent.c,
// modules/module.c, modules/dlist.c): a child created with the default
// modules is ready once local and tcp are up; ucx joins after, the creator
// hears of it and its route switches to ucx, with every RSR sent across
// the switch handled exactly once; a child whose ucx cannot come up works
// over tcp; a child destroyed, or finalizing, while ucx joins ends cleanly.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "capture_stderr.h"
#include "child_pid.h"
#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

// The suite sets NX_PROTOCOLS (tcp,local); these tests need the default
// set, in this process and in the children, which inherit it.
class default_modules {
public:
  default_modules() {
    const char *v = std::getenv("NX_PROTOCOLS");
    had_ = v != nullptr;
    if (had_)
      old_ = v;
    unsetenv("NX_PROTOCOLS");
  }
  ~default_modules() {
    if (had_)
      setenv("NX_PROTOCOLS", old_.c_str(), 1);
  }
  default_modules(const default_modules &) = delete;
  default_modules &operator=(const default_modules &) = delete;

private:
  std::string old_;
  bool had_ = false;
};

bool module_loaded(const char *name) {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) == 0 && std::strcmp(info.name, name) == 0)
      return info.loaded != 0;
  }
  return false;
}

bool no_children() { return nxt_no_children() != 0; }

nx_node_t local_node() {
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  return node;
}

double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// What ctx_child's "seq_report" answers (helper_ctx_child.c).
struct seq_result {
  latch n;
  uint64_t distinct = 0, dups = 0, bad = 0;
  int32_t ucx = -1;
  char route[16] = {0};
  uint64_t ordered = 0, disorder = 0; // "oseq"
};
seq_result result;

void on_seq_result(nx_context_t *, void *, nx_buffer_t *buf) {
  nx_get_uint64(buf, &result.distinct);
  nx_get_uint64(buf, &result.dups);
  nx_get_uint64(buf, &result.bad);
  nx_get_int32(buf, &result.ucx);
  nx_get_char_array(buf, result.route, sizeof(result.route));
  nx_get_uint64(buf, &result.ordered);
  nx_get_uint64(buf, &result.disorder);
  result.n.add();
}

// Asks the child for its counts until it has handled `sent` RSRs (or 20 s
// passed); true once an answer came. The question may overtake RSRs still
// on their way over tcp when it goes over ucx: it is asked again.
bool ask_report(const nx_gp_t &child, const nx_gp_t &me, uint64_t sent) {
  bool answered = false;
  double deadline = now_s() + 20;
  do {
    long want = result.n.get() + 1;
    nx_buffer_t *b;
    if (nx_rsr_init_name(&b, &child, "seq_report", 64) != 0 ||
        nx_put_gp(b, &me) != 0 || nx_rsr_send(b) != 0)
      return false;
    if (result.n.wait_for(want, 20) < want)
      return answered;
    answered = true;
    if (result.distinct + result.dups + result.ordered >= sent)
      return true;
    usleep(10 * 1000);
  } while (now_s() < deadline);
  return answered;
}

int send_seq(const nx_gp_t &child, uint64_t i, bool ordered = false) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &child, ordered ? "oseq" : "seq", 8);
  if (r == 0)
    r = nx_put_uint64(b, i);
  return r == 0 ? nx_rsr_send_flags(b, ordered ? NX_RSR_ORDERED : 0) : r;
}

// Whether ucx and tcp load here; if so registers "seq_result" and makes
// the gp the child answers to.
bool seq_client(nx_gp_t *me) {
  if (!module_loaded("ucx") || !module_loaded("tcp"))
    return false;
  REQUIRE(nx_handler_register(nx_context_self(), "seq_result", on_seq_result,
                              NX_HANDLER_NONTHREADED, nullptr) == 0);
  REQUIRE(nx_gp_make(nullptr, me) == 0);
  return true;
}

std::string route_of(const nx_gp_t &gp) {
  const char *p = nx_gp_protocol(&gp);
  return p != nullptr ? p : "none";
}

// Sends "seq" (or ordered "oseq") RSRs numbered from 0 without pause,
// from the moment the child is ready until its route has been ucx for
// 2,000 more (or 20 s passed): the route it started on, how many were sent
// and how many of them once the route was ucx.
void send_until_ucx(const nx_gp_t &child, bool ordered, std::string *first,
                    uint64_t *sent, uint64_t *after) {
  *first = route_of(child);
  *sent = *after = 0;
  double deadline = now_s() + 20;
  while (*after < 2000 && now_s() < deadline) {
    REQUIRE(send_seq(child, *sent, ordered) == 0);
    (*sent)++;
    if (route_of(child) == "ucx")
      (*after)++;
  }
}

// Whether what this process's descriptor 2 has had written to it (a file:
// capture_stderr's) holds `what`; its children write there too.
bool stderr_has(const char *what) {
  std::string all;
  char buf[4096];
  ssize_t n;
  for (off_t off = 0; (n = pread(2, buf, sizeof(buf), off)) > 0; off += n)
    all.append(buf, (size_t)n);
  return all.find(what) != std::string::npos;
}

} // namespace

TEST_CASE("RSRs sent while ucx joins a new process context are each handled "
          "once, and move to ucx",
          "[process][late]") {
  default_modules dm;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  if (!seq_client(&me)) {
    WARN("skipped: ucx or tcp does not load in this process here");
    return;
  }
  nx_node_t node = local_node();
  nx_stats_t before;
  REQUIRE(nx_stats_get(&before) == 0);
  int on_tcp_rounds = 0, switched_rounds = 0;
  for (int round = 0; round < 3; round++) {
    INFO("round " << round);
    nx_gp_t child = NX_GP_NULL;
    char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
    REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &child) == 0);
    std::string first;
    uint64_t sent = 0, after = 0;
    send_until_ucx(child, false, &first, &sent, &after);
    INFO("first route " << first << ", " << sent << " sent, " << after
                        << " of them on ucx");
    CHECK(after == 2000);
    on_tcp_rounds += first == "tcp";
    switched_rounds += first == "tcp" && after == 2000;
    REQUIRE(ask_report(child, me, sent));
    CHECK(result.distinct == sent);
    CHECK(result.dups == 0);
    CHECK(result.bad == 0);
    CHECK(result.ucx == 1);
    // The child's own route back here moved to ucx as well.
    CHECK(std::string(result.route) == "ucx");
    REQUIRE(nx_context_destroy(&child) == 0);
    nx_gp_release(&child);
  }
  // The child is ready before ucx is up: it starts on tcp (a round where
  // ucx came up before the first send still counts as one that switched).
  CHECK(on_tcp_rounds >= 1);
  CHECK(switched_rounds == on_tcp_rounds);
  nx_stats_t st;
  REQUIRE(nx_stats_get(&st) == 0);
  CHECK(st.rsr_failed == before.rsr_failed);
  CHECK(st.route_fallbacks == before.route_fallbacks); // a switch, no failure
  nx_gp_release(&me);
  CHECK(no_children());
}

TEST_CASE("ordered RSRs sent while ucx joins run in the order of their "
          "sends",
          "[process][late]") {
  default_modules dm;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  if (!seq_client(&me)) {
    WARN("skipped: ucx or tcp does not load in this process here");
    return;
  }
  nx_node_t node = local_node();
  nx_gp_t child = NX_GP_NULL;
  char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &child) == 0);
  std::string first;
  uint64_t sent = 0, after = 0;
  send_until_ucx(child, true, &first, &sent, &after);
  INFO("first route " << first << ", " << sent << " sent, " << after
                      << " of them on ucx");
  CHECK(after == 2000);
  REQUIRE(ask_report(child, me, sent));
  CHECK(result.ordered == sent);
  CHECK(result.disorder == 0);
  REQUIRE(nx_context_destroy(&child) == 0);
  nx_gp_release(&child);
  nx_gp_release(&me);
  CHECK(no_children());
}

TEST_CASE("a process context whose ucx cannot come up works over tcp",
          "[process][late]") {
  default_modules dm;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  if (!seq_client(&me)) {
    WARN("skipped: ucx or tcp does not load in this process here");
    return;
  }
  nx_node_t node = local_node();
  // UCX in the child finds no transport it may use: its ucx fails as it
  // joins, and says so (at NX_DEBUG level 1, as a module that fails at
  // nx_init does).
  // (UCX's own complaint, on stdout, is kept out of the test's log.)
  char *const env[] = {(char *)"UCX_TLS=bogus_transport",
                       (char *)"UCX_LOG_LEVEL=fatal", (char *)"NX_DEBUG=1",
                       nullptr};
  nx_context_attr_t attr = {env, 0, 0};
  char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
  nx_gp_t child = NX_GP_NULL;
  std::string err = capture_stderr([&] {
    REQUIRE(nx_context_create_attr(&node, CHILD_EXE, argv, &attr, &child) == 0);
    for (uint64_t i = 0; i < 1000; i++)
      REQUIRE(send_seq(child, i) == 0);
    usleep(300 * 1000); // long enough for ucx to have joined, had it worked
    for (uint64_t i = 1000; i < 2000; i++)
      REQUIRE(send_seq(child, i) == 0);
    REQUIRE(ask_report(child, me, 2000));
    CHECK(route_of(child) == "tcp");
    // The child says why once its joining thread has tried ucx: at nice 10,
    // which on a busy machine may take a while; destroyed before that, it
    // would start no module and say nothing.
    for (double until = now_s() + 20;
         now_s() < until && !stderr_has("ucx: skipped: ucp_init");)
      usleep(10 * 1000);
    REQUIRE(nx_context_destroy(&child) == 0);
    CHECK(no_children());
  });
  INFO(err);
  CHECK(result.distinct == 2000);
  CHECK(result.dups == 0);
  CHECK(result.ucx == 0);
  CHECK(std::string(result.route) == "tcp");
  CHECK(err.find("ucx: skipped: ucp_init") != std::string::npos);
  nx_gp_release(&child);
  nx_gp_release(&me);
}

TEST_CASE("a process context destroyed, or finalizing, while ucx joins ends "
          "cleanly",
          "[process][late]") {
  default_modules dm;
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_node_t node = local_node();
  std::string err = capture_stderr([&] {
    for (int i = 0; i < 6; i++) {
      nx_gp_t child = NX_GP_NULL;
      // "ready-finalize" calls nx_finalize as soon as it is ready; "serve"
      // is destroyed at once. Both while ucx is most likely still coming up.
      char *const argv[] = {(char *)"ctx_child",
                            (char *)(i % 2 ? "ready-finalize" : "serve"),
                            nullptr};
      REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &child) == 0);
      // One that finalized by itself may have ended (and been reaped)
      // before this destroy: it then names no context any more.
      int r = nx_context_destroy(&child);
      if (i % 2)
        CHECK((r == 0 || r == NX_ENOCONTEXT));
      else
        CHECK(r == 0);
      nx_gp_release(&child);
    }
    CHECK(no_children());
    usleep(100 * 1000); // the monitor writes a child's end as it reaps it
  });
  INFO(err);
  // Every child exited by itself, with status 0: none was signalled (which
  // nexus does only after 5 s), none failed.
  CHECK(err.find("exited with status") == std::string::npos);
  CHECK(err.find("killed by signal") == std::string::npos);
  CHECK(err.find("ended by nexus") == std::string::npos);
  // And this process's own nx_finalize, with children still ending.
  nx_gp_t child = NX_GP_NULL;
  char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &child) == 0);
  nx_gp_release(&child);
  CHECK(rt.finalize() == 0);
  CHECK(no_children());
}
