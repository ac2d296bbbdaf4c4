// The protocol conformance suite: the same tests for every protocol module
// that was built (meson runs this program once per module, naming it in
// NX_CONFORMANCE_MODULE). A module that reaches other processes is tested
// against a real peer process; "local" against an in-process context.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "latch.h"
#include "nexus.h"

#include "conf_handlers.h"

namespace {

std::string module_under_test() {
  const char *m = std::getenv("NX_CONFORMANCE_MODULE");
  return m != nullptr ? m : "local";
}

bool in_process() { return module_under_test() == "local"; }

// What the suite's own context receives.
struct inbox {
  nx_mutex_t m;
  nx_cond_t c;
  long pongs = 0;
  uint32_t last_tag = 0;
  std::vector<uint8_t> last_bytes;
  long typed = 0;
  int typed_bad = -1;
  nx_gp_t third = NX_GP_NULL;
  long counts_in = 0;
  uint64_t counts[4] = {0, 0, 0, 0};
  std::atomic<int> deaths{0};
  inbox() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
  template <class Pred> bool wait(Pred pred, int seconds = 60) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    nx_mutex_lock(&m);
    bool ok = true;
    while (!pred())
      if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT) {
        ok = pred();
        break;
      }
    nx_mutex_unlock(&m);
    return ok;
  }
};

inbox *box;

void on_pong(nx_context_t *, void *, nx_buffer_t *b) {
  uint32_t tag = 0;
  uint64_t len = 0;
  std::vector<uint8_t> bytes;
  if (nx_get_uint32(b, &tag) == 0 && nx_get_uint64(b, &len) == 0) {
    bytes.resize(len);
    if (nx_get_bytes(b, bytes.data(), len) != 0)
      bytes.clear();
  }
  nx_mutex_lock(&box->m);
  box->last_tag = tag;
  box->last_bytes.swap(bytes);
  box->pongs++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_typed(nx_context_t *, void *, nx_buffer_t *b) {
  int32_t bad = -1;
  nx_get_int32(b, &bad);
  nx_mutex_lock(&box->m);
  box->typed_bad = bad;
  box->typed++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_third_is(nx_context_t *, void *, nx_buffer_t *b) {
  nx_gp_t g = NX_GP_NULL;
  nx_get_gp(b, &g);
  nx_mutex_lock(&box->m);
  box->third = g;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_counts(nx_context_t *, void *, nx_buffer_t *b) {
  uint64_t v[4] = {0, 0, 0, 0};
  nx_get_uint64_array(b, v, 4);
  nx_mutex_lock(&box->m);
  std::memcpy(box->counts, v, sizeof(v));
  box->counts_in++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_error(int err, uint64_t, uint32_t handler, void *) {
  if (err == NX_EPEERDEAD && handler == 0) {
    box->deaths++;
    nx_mutex_lock(&box->m);
    nx_cond_broadcast(&box->c);
    nx_mutex_unlock(&box->m);
  }
}

int local_peer_init(nx_context_t *ctx, void *) { return conf_register(ctx); }

// One runtime and one peer per test case.
struct session {
  inbox in;
  nx_gp_t me = NX_GP_NULL;
  nx_gp_t peer = NX_GP_NULL;
  session() {
    box = &in;
    std::string m = module_under_test();
    setenv("NX_PROTOCOLS", in_process() ? "local" : (m + ",local").c_str(), 1);
    REQUIRE(nx_init(nullptr, nullptr) == 0);
    nx_context_t *self = nx_context_self();
    REQUIRE(nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED,
                                nullptr) == 0);
    REQUIRE(nx_handler_register(self, "typed", on_typed,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "third_is", on_third_is,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "counts", on_counts,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_error_cb_set(on_error, nullptr) == 0);
    REQUIRE(nx_gp_make(nullptr, &me) == 0);
    if (in_process()) {
      REQUIRE(nx_context_create_local(local_peer_init, nullptr, &peer) == 0);
    } else {
      nx_node_t node;
      REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
      REQUIRE(nx_context_create(&node, PEER_EXE, nullptr, &peer) == 0);
    }
    const char *p = nx_gp_protocol(&peer);
    REQUIRE(p != nullptr);
    REQUIRE(std::string(p) == m);
  }
  ~session() {
    if (!in_process())
      nx_context_destroy(&peer);
    nx_gp_release(&in.third);
    nx_gp_release(&peer);
    nx_gp_release(&me);
    nx_finalize();
    unsetenv("NX_PROTOCOLS");
    box = nullptr;
  }
};

void ping(session &s, const nx_gp_t *to, const char *handler, uint32_t tag,
          const std::vector<uint8_t> &bytes) {
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, to, handler, bytes.size() + 128) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_put_uint32(b, tag) == 0);
  REQUIRE(nx_put_uint64(b, bytes.size()) == 0);
  REQUIRE(nx_put_bytes(b, bytes.data(), bytes.size()) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
}

} // namespace

TEST_CASE("ping-pong of every size, non-threaded and threaded", "[conformance]") {
  session s;
  INFO("module " << module_under_test());
  std::mt19937 rng(42);
  uint32_t tag = 0;
  for (const char *handler : {"ping", "ping_t"}) {
    for (size_t size : {size_t(0), size_t(1), size_t(8), size_t(1024),
                        size_t(64) << 10, size_t(1) << 20, size_t(16) << 20,
                        size_t(64) << 20}) {
      INFO(handler << " " << size << " bytes");
      std::vector<uint8_t> bytes(size);
      for (auto &x : bytes)
        x = (uint8_t)rng();
      ++tag;
      long before = s.in.pongs;
      ping(s, &s.peer, handler, tag, bytes);
      REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
      CHECK(s.in.last_tag == tag);
      CHECK(s.in.last_bytes == bytes);
    }
  }
}

TEST_CASE("every put/get type and a gp inside the buffer", "[conformance]") {
  session s;
  for (int format : {NX_FORMAT_LITTLE, NX_FORMAT_BIG}) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &s.peer, "types", 1024) == 0);
    REQUIRE(nx_buffer_set_format(b, format) == 0);
    REQUIRE(nx_put_gp(b, &s.me) == 0);
    REQUIRE(nx_put_int8(b, -8) == 0);
    REQUIRE(nx_put_uint8(b, 200) == 0);
    REQUIRE(nx_put_int16(b, -1600) == 0);
    REQUIRE(nx_put_uint16(b, 60000) == 0);
    REQUIRE(nx_put_int32(b, -320000) == 0);
    REQUIRE(nx_put_uint32(b, 4000000000u) == 0);
    REQUIRE(nx_put_int64(b, -(1ll << 60)) == 0);
    REQUIRE(nx_put_uint64(b, 0xfedcba9876543210ull) == 0);
    REQUIRE(nx_put_float(b, 1.5f) == 0);
    REQUIRE(nx_put_double(b, -2.25e100) == 0);
    REQUIRE(nx_put_char(b, 'q') == 0);
    int32_t arr[100];
    for (int k = 0; k < 100; k++)
      arr[k] = k * k - 50;
    REQUIRE(nx_put_int32_array(b, arr, 100) == 0);
    double darr[10];
    for (int k = 0; k < 10; k++)
      darr[k] = k / 4.0;
    REQUIRE(nx_put_double_array(b, darr, 10) == 0);
    REQUIRE(nx_put_gp(b, &s.me) == 0);
    long before = s.in.typed;
    REQUIRE(nx_rsr_send(b) == 0);
    REQUIRE(s.in.wait([&] { return s.in.typed > before; }));
    CHECK(s.in.typed_bad == 0);
  }
}

TEST_CASE("a gp to a third context, made by the peer, travels back and works",
          "[conformance]") {
  session s;
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "third", 128) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(s.in.wait([&] { return !nx_gp_is_null(&s.in.third); }));
  CHECK(std::string(nx_gp_protocol(&s.in.third)) == module_under_test());
  long before = s.in.pongs;
  ping(s, &s.in.third, "ping", 7, std::vector<uint8_t>(100, 9));
  REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
  CHECK(s.in.last_tag == 7);
}

TEST_CASE("many senders to one receiver: each RSR exactly once, each "
          "sender's order kept",
          "[conformance]") {
  session s;
  const int threads = 4, each = 2000;
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  nx_handler_id_t id = nx_handler_id("seq");
  for (int t = 0; t < threads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < each; i++) {
        nx_buffer_t *b;
        if (nx_rsr_init(&b, &s.peer, id, 16) != 0 ||
            nx_put_uint32(b, (uint32_t)t) != 0 ||
            nx_put_uint32(b, (uint32_t)i) != 0 || nx_rsr_send(b) != 0)
          errors++;
      }
    });
  for (auto &th : ts)
    th.join();
  REQUIRE(errors == 0);
  // The report goes after the RSRs on the same path, so it sees them all
  // (the ordering guarantee: one sending thread to one receiver).
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "report", 64) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(s.in.wait([&] { return s.in.counts_in > 0; }));
  CHECK(s.in.counts[0] == (uint64_t)threads * each); // total
  CHECK(s.in.counts[1] == 0);                         // duplicates
  CHECK(s.in.counts[2] == 0);                         // out of order
  CHECK(s.in.counts[3] == 0);                         // malformed
}

TEST_CASE("peer death: the error is reported, later RSRs fail, nothing hangs",
          "[conformance]") {
  if (in_process()) {
    WARN("SKIPPED for local: an in-process context does not die on its own");
    return;
  }
  session s;
  // Find the peer: our child running conf_peer.
  pid_t child = -1;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d != nullptr && (e = readdir(d)) != nullptr) {
    std::ifstream st(std::string("/proc/") + e->d_name + "/stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (st >> pid >> comm >> state >> ppid && ppid == getpid() &&
        comm == "(conf_peer)")
      child = std::stoi(pid);
  }
  if (d != nullptr)
    closedir(d);
  REQUIRE(child > 0);
  long before = s.in.pongs;
  ping(s, &s.peer, "ping", 1, std::vector<uint8_t>(10));
  REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
  REQUIRE(kill(child, SIGKILL) == 0);
  REQUIRE(s.in.wait([&] { return s.in.deaths.load() > 0; }, 20));
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "ping", 16) == 0);
  CHECK(nx_rsr_send(b) == NX_EPEERDEAD);
}

TEST_CASE("bad frames", "[conformance]") {
  // Injecting malformed frames needs a raw handle on the transport: the
  // tests that own one do it (tests/core/test_loader.cpp through the
  // fixture module's receive path; tests/tcp on real sockets).
  WARN("SKIPPED for " << module_under_test()
                      << ": no raw transport handle here; see tests/core "
                         "(fixture) and tests/tcp (sockets)");
  CHECK(true);
}
