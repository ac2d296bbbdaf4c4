// The peer process of test_fallback.cpp: serves the handlers listed in
// fallback_common.h, sends its own numbered "seq" stream to the test while
// the test's streams come in, and at the end reports what it sent, what
// it received and what its error callback heard. Started by the test
// (posix_spawn) with the environment it runs in (NX_PROTOCOLS, NX_KEY,
// NX_TCP_LISTEN); hands its gp to the test through a pipe. Exits when told
// to ("quit"), when its parent goes, or after PEER_LIFETIME_S.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "fallback_common.h"
#include "pipe_io.h"

namespace {

const int PEER_LIFETIME_S = 300;

struct peer_state {
  nx_mutex_t m;
  nx_cond_t c;
  // Under m: work for the main thread.
  bool started = false, stopping = false, quit = false;
  nx_gp_t test = NX_GP_NULL;
  // The records of the test's streams (filled by handlers).
  fb_record rx_seq, rx_ping;
  fb_losses losses;
  // "pong": written by the ping handler, under rx_ping.m.
  uint64_t pong_sent = 0, pong_fails = 0;
  uint64_t pong_first_after = UINT64_MAX;
};

peer_state st;

void fail(const char *what) {
  std::fprintf(stderr, "fallback_peer[%d]: %s\n", (int)getpid(), what);
}

void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

using nx_test::now_ms;
using nx_test::write_all;

// The module carrying RSRs to `gp` ("" when none reaches it).
std::string route(const nx_gp_t &gp) {
  const char *p = nx_gp_protocol(&gp);
  return p != nullptr ? p : "";
}

void on_start(nx_context_t *, void *, nx_buffer_t *buf) {
  nx_gp_t gp = NX_GP_NULL;
  if (nx_get_gp(buf, &gp) != 0) {
    fail("start: bad request");
    return;
  }
  nx_mutex_lock(&st.m);
  nx_gp_release(&st.test);
  st.test = gp;
  st.started = true;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

void on_seq(nx_context_t *, void *, nx_buffer_t *buf) {
  st.rx_seq.receive(nx_handler_id("seq"), buf);
}

// Answers each ping with the pong of the same index, to the test.
void on_ping(nx_context_t *, void *, nx_buffer_t *buf) {
  int64_t index = st.rx_ping.receive(nx_handler_id("ping"), buf);
  if (index < 0)
    return;
  nx_mutex_lock(&st.m);
  nx_gp_t to = NX_GP_NULL;
  int r = nx_gp_copy(&st.test, &to);
  nx_mutex_unlock(&st.m);
  if (r != 0)
    return;
  bool after = route(to) != "tcp";
  r = fb_send(to, "pong", (uint64_t)index);
  std::lock_guard<std::mutex> g(st.rx_ping.m);
  if (r == 0) {
    st.pong_sent++;
    if (after && st.pong_first_after == UINT64_MAX)
      st.pong_first_after = (uint64_t)index;
  } else {
    st.pong_fails++;
  }
  nx_gp_release(&to);
}

void on_stop(nx_context_t *, void *, nx_buffer_t *) {
  nx_mutex_lock(&st.m);
  st.stopping = true;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

void on_quit(nx_context_t *, void *, nx_buffer_t *) {
  nx_mutex_lock(&st.m);
  st.quit = true;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

bool is_set(bool peer_state::*flag) {
  nx_mutex_lock(&st.m);
  bool v = st.*flag;
  nx_mutex_unlock(&st.m);
  return v;
}

void wait_for(bool peer_state::*flag) {
  nx_mutex_lock(&st.m);
  while (!(st.*flag))
    nx_cond_wait(&st.c, &st.m);
  nx_mutex_unlock(&st.m);
}

// The main thread's work: the "seq" stream, one RSR about every 500 us
// (pausing at FB_PEER_PAUSE), until told to stop and FB_AFTER_MIN went after
// the route changed (at most 30 s more); then the report.
void stream_and_report(const nx_gp_t &to) {
  std::string before = route(to), after;
  uint64_t sent = 0, fails = 0, first_after = UINT64_MAX, index = 0;
  uint64_t stop_by = 0;
  for (; index < FB_STREAM_MAX; index++) {
    if (stop_by == 0 && index >= FB_PEER_PAUSE)
      wait_for(&peer_state::stopping);
    if (stop_by == 0 && is_set(&peer_state::stopping))
      stop_by = now_ms() + 30000;
    if (stop_by != 0 &&
        (now_ms() > stop_by ||
         (first_after != UINT64_MAX && index >= first_after + FB_AFTER_MIN)))
      break;
    std::string now = route(to);
    if (now != "tcp" && first_after == UINT64_MAX) {
      first_after = index;
      after = now;
    }
    if (fb_send(to, "seq", index) == 0)
      sent++;
    else
      fails++;
    sleep_us(500);
  }
  if (after.empty())
    after = route(to);
  // Every RSR sent is settled first: handled there, or reported here
  // (those the broken connection swallowed, docs/design.md "Falling back").
  int fr = nx_flush(20000);
  nx_stats_t s = {};
  nx_stats_get(&s);
  uint64_t v[FB_R_COUNT] = {};
  v[FB_R_SEQ_SENT] = sent;
  v[FB_R_SEQ_SEND_FAILS] = fails;
  v[FB_R_SEQ_FIRST_AFTER] = first_after;
  v[FB_R_LOST_SEQ] = st.losses.seq;
  v[FB_R_LOST_PONG] = st.losses.pong;
  v[FB_R_LOST_OTHER] = st.losses.other + st.losses.ping;
  v[FB_R_LOST_PROCESS] = st.losses.process;
  v[FB_R_PEERS_FAILED] = s.peers_failed;
  v[FB_R_ROUTE_FALLBACKS] = s.route_fallbacks;
  v[FB_R_RSR_FAILED] = s.rsr_failed;
  v[FB_R_FLUSH] = (uint64_t)-fr;
  char pb[FB_PROTO_LEN] = {}, pa[FB_PROTO_LEN] = {};
  std::strncpy(pb, before.c_str(), FB_PROTO_LEN - 1);
  std::strncpy(pa, after.c_str(), FB_PROTO_LEN - 1);
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &to, "report",
                       nx_sizeof_int64(FB_R_COUNT) +
                           2 * nx_sizeof_char(FB_PROTO_LEN) +
                           2 * nx_sizeof_bytes(FB_STREAM_MAX)) != 0) {
    fail("report: nx_rsr_init failed");
    return;
  }
  // The ping handler's and the records' fields are read under the record
  // locks (the driver may still run handlers).
  {
    std::lock_guard<std::mutex> g(st.rx_ping.m);
    v[FB_R_PONG_SENT] = st.pong_sent;
    v[FB_R_PONG_SEND_FAILS] = st.pong_fails;
    v[FB_R_PONG_FIRST_AFTER] = st.pong_first_after;
    v[FB_R_RX_PING] = st.rx_ping.count;
    v[FB_R_RX_PING_BAD_ORDER] = st.rx_ping.bad_order;
    v[FB_R_RX_PING_BAD_DATA] = st.rx_ping.bad_data;
  }
  {
    std::lock_guard<std::mutex> g(st.rx_seq.m);
    v[FB_R_RX_SEQ] = st.rx_seq.count;
    v[FB_R_RX_SEQ_BAD_ORDER] = st.rx_seq.bad_order;
    v[FB_R_RX_SEQ_BAD_DATA] = st.rx_seq.bad_data;
  }
  int r = nx_put_uint64_array(b, v, FB_R_COUNT);
  if (r == 0)
    r = nx_put_char_array(b, pb, FB_PROTO_LEN);
  if (r == 0)
    r = nx_put_char_array(b, pa, FB_PROTO_LEN);
  if (r == 0) {
    std::lock_guard<std::mutex> g(st.rx_seq.m);
    r = nx_put_bytes(b, st.rx_seq.seen.data(), FB_STREAM_MAX);
  }
  if (r == 0) {
    std::lock_guard<std::mutex> g(st.rx_ping.m);
    r = nx_put_bytes(b, st.rx_ping.seen.data(), FB_STREAM_MAX);
  }
  if (r != 0) {
    nx_buffer_release(b);
    fail("report: put failed");
    return;
  }
  if (nx_rsr_send(b) != 0)
    fail("report: send failed");
}

// Writes u32 format, u32 length, then the bytes of a buffer holding our gp.
int handoff_gp(int fd) {
  nx_gp_t me = NX_GP_NULL;
  nx_buffer_t *b = nullptr;
  const void *bytes;
  size_t len;
  if (nx_gp_make(&st, &me) != 0 || nx_buffer_create(64, &b) != 0 ||
      nx_put_gp(b, &me) != 0 || nx_buffer_bytes(b, &bytes, &len) != 0)
    return -1;
  uint32_t h[2] = {(uint32_t)nx_buffer_format(b), (uint32_t)len};
  bool ok = write_all(fd, h, sizeof(h)) && write_all(fd, bytes, len);
  nx_buffer_release(b);
  nx_gp_release(&me);
  close(fd);
  return ok ? 0 : -1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fallback_peer <pipe fd> <parent pid>\n");
    return 2;
  }
  // Die with the test, even if it is killed itself.
  pid_t parent = (pid_t)std::atoi(argv[2]);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    return 3;
  alarm(PEER_LIFETIME_S); // never outlive a stuck test
  int r = nx_init(&argc, &argv);
  if (r != 0) {
    std::fprintf(stderr, "fallback_peer: nx_init: %s\n", nx_strerror(r));
    return 1;
  }
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  nx_context_t *self = nx_context_self();
  struct {
    const char *name;
    nx_handler_fn fn;
  } handlers[] = {{"start", on_start},
                  {"seq", on_seq},
                  {"ping", on_ping},
                  {"stop", on_stop},
                  {"quit", on_quit}};
  for (auto &h : handlers)
    if (nx_handler_register(self, h.name, h.fn, NX_HANDLER_NONTHREADED,
                            nullptr) != 0)
      return 1;
  if (nx_error_cb_set(fb_on_error, &st.losses) != 0 ||
      handoff_gp(std::atoi(argv[1])) != 0)
    return 1;
  wait_for(&peer_state::started);
  nx_gp_t to = NX_GP_NULL;
  nx_mutex_lock(&st.m);
  nx_gp_copy(&st.test, &to);
  nx_mutex_unlock(&st.m);
  stream_and_report(to);
  wait_for(&peer_state::quit);
  nx_gp_release(&to);
  nx_mutex_lock(&st.m);
  nx_gp_release(&st.test);
  nx_mutex_unlock(&st.m);
  nx_error_cb_set(nullptr, nullptr);
  // Everything was settled before the report: nothing is left for
  // nx_finalize to give up on (NX_FINALIZE_MS is 3 s here).
  r = nx_finalize();
  if (r != 0) {
    std::fprintf(stderr, "fallback_peer: nx_finalize: %s\n", nx_strerror(r));
    return 1;
  }
  return 0;
}
