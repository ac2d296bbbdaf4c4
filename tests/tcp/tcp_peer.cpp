// The peer process of the tcp tests: a nexus program that serves the
// handlers listed in tcp_common.h ("echo" and "stall" from
// tests/common/peer_handlers.h) over the tcp module and hands its gp to the
// test through a pipe. Started by the tests (posix_spawn); exits when
// told to ("quit"), when its parent goes, or after PEER_LIFETIME_S.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <vector>

#include "nexus.h"
#include "peer_handlers.h"
#include "pipe_io.h"
#include "tcp_common.h"

namespace {

const int PEER_LIFETIME_S = 300;

struct peer_state {
  nx_mutex_t m;
  nx_cond_t c;
  // Under m: work for the main thread.
  bool quit = false;
  uint32_t blast_count = 0;
  uint64_t blast_start = 0;
  nx_gp_t target = NX_GP_NULL;
  // Written by handlers only (they run on the driver, one at a time).
  uint64_t stat[STAT_COUNT] = {};
  uint64_t sink_next = 0;
  uint64_t seq_next = 0;
  std::vector<uint8_t> scratch;
};

peer_state st;

uint64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Connected TCP sockets this process holds (listening ones have no peer).
uint64_t count_sockets() {
  uint64_t n = 0;
  for (int fd = 3; fd < 1024; fd++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int type = 0;
    socklen_t tlen = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 &&
        type == SOCK_STREAM &&
        getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
      n++;
  }
  return n;
}

// Our IPv4 listening port: the listening socket among our fds.
uint32_t listening_port() {
  for (int fd = 3; fd < 1024; fd++) {
    int on = 0;
    socklen_t len = sizeof(on);
    struct sockaddr_in in;
    socklen_t alen = sizeof(in);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on &&
        getsockname(fd, (struct sockaddr *)&in, &alen) == 0 &&
        in.sin_family == AF_INET)
      return ntohs(in.sin_port);
  }
  return 0;
}

void on_stats(nx_context_t *, void *, nx_buffer_t *buf) {
  nx_stats_t s;
  nx_stats_get(&s);
  uint64_t sockets = count_sockets();
  nx_mutex_lock(&st.m);
  st.stat[STAT_RSR_SENT] = s.rsr_sent;
  st.stat[STAT_RSR_HANDLED] = s.rsr_handled;
  st.stat[STAT_DROP_NO_HANDLER] = s.drop_no_handler;
  st.stat[STAT_DROP_NO_CONTEXT] = s.drop_no_context;
  st.stat[STAT_DROP_BAD_FRAME] = s.drop_bad_frame;
  st.stat[STAT_SOCKETS] = sockets;
  uint64_t stat[STAT_COUNT];
  std::memcpy(stat, st.stat, sizeof(stat));
  nx_mutex_unlock(&st.m);
  peer_reply_counters(buf, "stats", stat, STAT_COUNT);
}

void on_sink(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t index = 0, n = 0;
  bool ok = nx_get_uint64(buf, &index) == 0 && nx_get_uint64(buf, &n) == 0 &&
            n <= ((uint64_t)1 << 30);
  if (ok) {
    st.scratch.resize(n);
    ok = (n == 0 || nx_get_bytes(buf, st.scratch.data(), n) == 0) &&
         index == st.sink_next &&
         pattern_sample_ok(st.scratch.data(), n, sink_seed(index));
  }
  st.sink_next = index + 1;
  nx_mutex_lock(&st.m);
  st.stat[STAT_SINK_FRAMES]++;
  if (!ok)
    st.stat[STAT_SINK_BAD]++;
  nx_mutex_unlock(&st.m);
}

void on_seq(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t n = 0;
  bool ok = nx_get_uint64(buf, &n) == 0 && n == st.seq_next;
  st.seq_next = n + 1;
  nx_mutex_lock(&st.m);
  st.stat[STAT_SEQ_FRAMES]++;
  if (!ok)
    st.stat[STAT_SEQ_BAD]++;
  nx_mutex_unlock(&st.m);
}

void on_introduce(nx_context_t *, void *, nx_buffer_t *buf) {
  nx_gp_t gp = NX_GP_NULL;
  if (nx_get_gp(buf, &gp) != 0) {
    peer_fail("introduce: bad request");
    return;
  }
  nx_mutex_lock(&st.m);
  nx_gp_release(&st.target);
  st.target = gp;
  nx_mutex_unlock(&st.m);
}

void on_blast(nx_context_t *, void *, nx_buffer_t *buf) {
  uint32_t count = 0;
  uint64_t start = 0;
  if (nx_get_uint32(buf, &count) != 0 || nx_get_uint64(buf, &start) != 0) {
    peer_fail("blast: bad request");
    return;
  }
  nx_mutex_lock(&st.m);
  st.blast_count = count;
  st.blast_start = start;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

void on_quit(nx_context_t *, void *, nx_buffer_t *) {
  nx_mutex_lock(&st.m);
  st.quit = true;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

// The main thread's part of "blast": wait for the start time (so that two
// peers connect to each other at the same moment), then send.
void blast(uint32_t count, uint64_t start, const nx_gp_t *target) {
  while (realtime_ns() < start)
    ;
  uint64_t fails = 0;
  for (uint32_t i = 0; i < count; i++) {
    nx_buffer_t *b;
    if (nx_rsr_init_name(&b, target, "seq", nx_sizeof_int64(1)) != 0 ||
        nx_put_uint64(b, i) != 0 || nx_rsr_send(b) != 0)
      fails++;
  }
  nx_mutex_lock(&st.m);
  st.stat[STAT_BLAST_FAILS] += fails;
  nx_mutex_unlock(&st.m);
}

int handoff_gp(int fd) {
  nx_gp_t me = NX_GP_NULL;
  nx_buffer_t *b = nullptr;
  const void *bytes;
  size_t len;
  if (nx_gp_make(&st, &me) != 0 || nx_buffer_create(64, &b) != 0 ||
      nx_put_gp(b, &me) != 0 || nx_buffer_bytes(b, &bytes, &len) != 0)
    return -1;
  peer_hello h = {PEER_HELLO_MAGIC, (uint32_t)nx_buffer_format(b),
                  listening_port(), 0, len};
  bool ok = nx_test::write_all(fd, &h, sizeof(h)) &&
            nx_test::write_all(fd, bytes, len);
  nx_buffer_release(b);
  nx_gp_release(&me);
  close(fd);
  return ok ? 0 : -1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tcp_peer <pipe fd> <parent pid>\n");
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
    std::fprintf(stderr, "tcp_peer: nx_init: %s\n", nx_strerror(r));
    return 1;
  }
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  nx_context_t *self = nx_context_self();
  struct {
    const char *name;
    nx_handler_fn fn;
  } handlers[] = {{"stats", on_stats}, {"sink", on_sink},
                  {"seq", on_seq},     {"introduce", on_introduce},
                  {"blast", on_blast}, {"quit", on_quit}};
  if (peer_register_common(self) != 0)
    return 1;
  for (auto &h : handlers)
    if (nx_handler_register(self, h.name, h.fn, NX_HANDLER_NONTHREADED,
                            nullptr) != 0)
      return 1;
  if (handoff_gp(std::atoi(argv[1])) != 0) {
    std::fprintf(stderr, "tcp_peer: cannot hand over the gp\n");
    return 1;
  }
  nx_mutex_lock(&st.m);
  while (!st.quit) {
    if (st.blast_count > 0) {
      uint32_t count = st.blast_count;
      uint64_t start = st.blast_start;
      nx_gp_t target;
      nx_gp_copy(&st.target, &target);
      st.blast_count = 0;
      nx_mutex_unlock(&st.m);
      blast(count, start, &target);
      nx_gp_release(&target);
      nx_mutex_lock(&st.m);
      continue;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    nx_cond_timedwait(&st.c, &st.m, &deadline);
    if (getppid() != parent) {
      nx_mutex_unlock(&st.m);
      peer_fail("the test went away");
      _exit(3);
    }
  }
  nx_gp_release(&st.target);
  nx_mutex_unlock(&st.m);
  r = nx_finalize();
  nx_cond_destroy(&st.c);
  nx_mutex_destroy(&st.m);
  peer_handlers_done();
  return r == 0 ? 0 : 1;
}
