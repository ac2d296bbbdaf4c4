/* A program run as a process context by the process tests; argv[1] picks its
 * behaviour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  int32_t v = 0;
  nx_buffer_t *out;
  if (nx_get_int32(buf, &v) == 0 && nx_get_gp(buf, &reply) == 0 &&
      nx_rsr_init_name(&out, &reply, "pong", 8) == 0) {
    nx_put_int32(out, v + 1);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

/* Rank-suffixed result files, so that nxrun's N copies do not collide. */
static void write_result(const char *base, int rank, const char *text) {
  char path[512];
  if (rank >= 0)
    snprintf(path, sizeof(path), "%s.%d", base, rank);
  else
    snprintf(path, sizeof(path), "%s", base);
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fputs(text, f);
    fclose(f);
  }
}

static nx_mutex_t dead_m;
static nx_cond_t dead_c;
static int dead_seen;

static uint64_t dead_ctx; /* the context of the last death heard */

static void on_error(int err, uint64_t ctx, uint32_t handler, void *arg) {
  (void)arg;
  if (err == NX_EPEERDEAD && handler == 0) {
    nx_mutex_lock(&dead_m);
    dead_seen++;
    dead_ctx = ctx;
    nx_cond_broadcast(&dead_c);
    nx_mutex_unlock(&dead_m);
  }
}

/* Deaths of peer processes, as the error callback hears them. */
static void watch_deaths(void) {
  nx_mutex_init(&dead_m);
  nx_cond_init(&dead_c);
  nx_error_cb_set(on_error, NULL);
}

/* Waits at most 20 s for a death; returns how many were heard, and the
 * context of the last in *ctx (may be NULL). */
static int wait_for_death(uint64_t *ctx) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 20;
  nx_mutex_lock(&dead_m);
  while (!dead_seen &&
         nx_cond_timedwait(&dead_c, &dead_m, &deadline) != NX_ETIMEDOUT)
    ;
  int seen = dead_seen;
  if (ctx != NULL)
    *ctx = dead_ctx;
  nx_mutex_unlock(&dead_m);
  return seen;
}

/* "forward" (relay mode): sends "count" to the gp in the buffer, telling
 * it which protocol this process uses to reach it and whom to report to. */
static void on_forward(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t target = NX_GP_NULL, report = NX_GP_NULL;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &target) == 0 && nx_get_gp(buf, &report) == 0 &&
      nx_rsr_init_name(&out, &target, "count", 128) == 0) {
    const char *p = nx_gp_protocol(&target);
    char name[16] = {0};
    snprintf(name, sizeof(name), "%s", p != NULL ? p : "none");
    nx_put_char_array(out, name, sizeof(name));
    nx_put_gp(out, &report);
    nx_rsr_send(out);
  }
  nx_gp_release(&target);
  nx_gp_release(&report);
}

/* "count" (relay mode): counts, and tells the reporter. */
static int counted;
static void on_count(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  char name[16];
  nx_gp_t report = NX_GP_NULL;
  nx_buffer_t *out;
  if (nx_get_char_array(buf, name, sizeof(name)) == 0 &&
      nx_get_gp(buf, &report) == 0 &&
      nx_rsr_init_name(&out, &report, "counted", 64) == 0) {
    counted++;
    nx_put_int32(out, counted);
    nx_put_char_array(out, name, sizeof(name));
    nx_rsr_send(out);
  }
  nx_gp_release(&report);
}

/* "storm": sends n "park" RSRs to the gp in the buffer, numbered 0..n-1,
 * then n "release" RSRs, last number first (test_lazy.cpp). */
static void on_storm(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t to = NX_GP_NULL;
  int32_t n = 0;
  if (nx_get_gp(buf, &to) != 0 || nx_get_int32(buf, &n) != 0)
    return;
  const char *names[2] = {"park", "release"};
  for (int k = 0; k < 2; k++) {
    for (int32_t i = 0; i < n; i++) {
      nx_buffer_t *out;
      if (nx_rsr_init_name(&out, &to, names[k], 4) != 0)
        break;
      nx_put_int32(out, k == 0 ? i : n - 1 - i);
      if (nx_rsr_send(out) != 0)
        break;
    }
  }
  nx_gp_release(&to);
}

/* "seq" (test_late_join.cpp): u64 index below SEQ_MAX; each is noted, a
 * second arrival of one as a duplicate. "oseq": u64 index, sent ordered
 * from 0: one that is not the next is out of order. "seq_report":
 * replies to the gp in the buffer with "seq_result": u64 distinct, u64
 * duplicates, u64 out of range, i32 whether ucx is loaded here, char[16]
 * the module this process reaches the reply gp with, u64 "oseq" RSRs
 * handled, u64 of them out of order. */
#define SEQ_MAX (1u << 20)
static unsigned char seq_seen[SEQ_MAX / 8];
static uint64_t seq_distinct, seq_dups, seq_bad;
static uint64_t oseq_next, oseq_disorder;

static void on_oseq(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  uint64_t i = UINT64_MAX;
  nx_get_uint64(buf, &i);
  if (i != oseq_next)
    oseq_disorder++;
  oseq_next = i + 1;
}

static void on_seq(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  uint64_t i = 0;
  if (nx_get_uint64(buf, &i) != 0 || i >= SEQ_MAX) {
    seq_bad++;
    return;
  }
  unsigned char bit = (unsigned char)(1u << (i % 8));
  if (seq_seen[i / 8] & bit) {
    seq_dups++;
    return;
  }
  seq_seen[i / 8] |= bit;
  seq_distinct++;
}

static int module_loaded(const char *name) {
  int n = nx_module_count();
  for (int i = 0; i < n; i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) == 0 && strcmp(info.name, name) == 0)
      return info.loaded;
  }
  return 0;
}

static void on_seq_report(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &reply) == 0 &&
      nx_rsr_init_name(&out, &reply, "seq_result", 64) == 0) {
    nx_put_uint64(out, seq_distinct);
    nx_put_uint64(out, seq_dups);
    nx_put_uint64(out, seq_bad);
    nx_put_int32(out, module_loaded("ucx"));
    const char *p = nx_gp_protocol(&reply);
    char name[16] = {0};
    snprintf(name, sizeof(name), "%s", p != NULL ? p : "none");
    nx_put_char_array(out, name, sizeof(name));
    nx_put_uint64(out, oseq_next);
    nx_put_uint64(out, oseq_disorder);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

/* "handshake-at-exit": a round trip to a new process context, so over a
 * new connection (its handshake uses libcrypto), from main and again from
 * an atexit handler registered before nx_init. */
static const char *self_exe;
static nx_mutex_t pong_m;
static nx_cond_t pong_c;
static int pongs;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&pong_m);
  pongs++;
  nx_cond_broadcast(&pong_c);
  nx_mutex_unlock(&pong_m);
}

static int round_trip_to_new_child(void) {
  nx_node_t node;
  nx_gp_t gp = NX_GP_NULL, me = NX_GP_NULL;
  char *const argv[] = {(char *)self_exe, (char *)"serve", NULL};
  nx_buffer_t *b;
  if (nx_nodes_acquire("localhost", 1, &node) != 0 ||
      nx_context_create(&node, self_exe, argv, &gp) != 0 ||
      nx_gp_make(NULL, &me) != 0 || nx_rsr_init_name(&b, &gp, "ping", 64) != 0)
    return -1;
  nx_mutex_lock(&pong_m);
  int want = pongs + 1;
  nx_mutex_unlock(&pong_m);
  nx_put_int32(b, 1);
  nx_put_gp(b, &me);
  if (nx_rsr_send(b) != 0)
    return -1;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 20;
  nx_mutex_lock(&pong_m);
  while (pongs < want &&
         nx_cond_timedwait(&pong_c, &pong_m, &deadline) != NX_ETIMEDOUT)
    ;
  int ok = pongs >= want;
  nx_mutex_unlock(&pong_m);
  nx_context_destroy(&gp);
  nx_gp_release(&gp);
  nx_gp_release(&me);
  return ok ? 0 : -1;
}

static void handshake_at_exit(void) {
  int r = round_trip_to_new_child();
  nx_finalize();
  _exit(r == 0 ? 0 : 6);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "handshake-at-exit") == 0) {
    self_exe = argv[0];
    nx_mutex_init(&pong_m);
    nx_cond_init(&pong_c);
    atexit(handshake_at_exit);
    if (nx_init(&argc, &argv) != 0 ||
        nx_handler_register(nx_context_self(), "pong", on_pong,
                            NX_HANDLER_NONTHREADED, NULL) != 0)
      _exit(2);
    return round_trip_to_new_child() == 0 ? 0 : 5;
  }
  const char *mode = argc > 1 ? argv[1] : "serve";
  if (strcmp(mode, "exit-early") == 0)
    return 3; /* before nx_init: never ready */
  if (nx_init(&argc, &argv) != 0)
    return 2;
  nx_handler_register(nx_context_self(), "ping", on_ping,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "forward", on_forward,
                      NX_HANDLER_THREADED, NULL);
  nx_handler_register(nx_context_self(), "count", on_count,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "storm", on_storm,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "seq", on_seq, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(nx_context_self(), "seq_report", on_seq_report,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "oseq", on_oseq,
                      NX_HANDLER_NONTHREADED, NULL);
  if (strcmp(mode, "attach-server") == 0 && argc > 2) {
    /* Started by hand, not as a process context: listen, say where, and
     * serve until killed. */
    const char *url = NULL;
    if (nx_attach_listen(&url) != 0)
      return 6;
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
    write_result(tmp, -1, url);
    rename(tmp, argv[2]);
    for (;;)
      pause();
  }
  if (strcmp(mode, "ready-exit3") == 0) {
    /* Ready, then an end with status 3 (test_lifecycle_msgs.cpp). */
    if (nx_context_ready() != 0)
      return 2;
    usleep(100 * 1000);
    _exit(3);
  }
  if (strcmp(mode, "ready-finalize") == 0) {
    /* Ready (and its creator's answer in: nx_context_create has
     * returned), then nx_finalize at once: while a module may still be
     * joining (test_late_join.cpp). */
    nx_gp_t *gps = NULL;
    int n = 0;
    int r = nx_context_peers(&gps, &n, NULL);
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
    return nx_finalize() == 0 && r == 0 ? 0 : 7;
  }
  if (strcmp(mode, "no-ready") == 0) {
    sleep(600);
    return 0;
  }
  if (strcmp(mode, "peers") == 0 && argc > 2) {
    nx_gp_t *gps = NULL;
    int n = 0, rank = 0;
    int r = nx_context_peers(&gps, &n, &rank);
    char text[128];
    snprintf(text, sizeof(text), "%d %d %d %llx\n", r, n, rank,
             n > 0 ? (unsigned long long)nx_gp_context(&gps[0]) : 0ull);
    write_result(argv[2], rank, text);
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
  }
  if (strcmp(mode, "env") == 0 && argc > 2) {
    /* What nx_context_create_attr set: NXT_A, NXT_B, and whether the
     * creator's NXT_PARENT came along ("-" when unset). */
    const char *a = getenv("NXT_A"), *b = getenv("NXT_B"),
               *p = getenv("NXT_PARENT");
    char text[256];
    snprintf(text, sizeof(text), "%s %s %s\n", a ? a : "-", b ? b : "-",
             p ? p : "-");
    write_result(argv[2], -1, text);
  }
  if (strcmp(mode, "die-hang") == 0) {
    /* Under nxrun: rank 1 dies once all are ready; the others hang (only
     * nxrun --stop-on-death ends them soon). */
    nx_gp_t *gps = NULL;
    int n = 0, rank = -1;
    if (nx_context_peers(&gps, &n, &rank) != 0)
      return 4;
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
    if (rank == 1)
      raise(SIGKILL);
    sleep(120);
    return 0;
  }
  if (strcmp(mode, "create-and-die") == 0 && argc > 2) {
    /* Started by hand: makes a "creator-dies" child, then dies without
     * nx_finalize (test_lifecycle_msgs.cpp). */
    nx_node_t node;
    char *const child[] = {argv[0], (char *)"creator-dies", argv[2], NULL};
    nx_gp_t gp = NX_GP_NULL;
    if (nx_nodes_acquire("localhost", 1, &node) != 0 ||
        nx_context_create(&node, argv[0], child, &gp) != 0)
      return 4;
    raise(SIGKILL);
  }
  if (strcmp(mode, "creator-dies") == 0 && argc > 2) {
    /* Ready, and told nothing else: waits to hear that its creator died
     * (its error callback), at most 20 s, and writes what it heard. */
    watch_deaths();
    nx_gp_t *gps = NULL;
    int n = 0;
    if (nx_context_peers(&gps, &n, NULL) != 0 || n != 1)
      return 4;
    uint64_t creator = nx_gp_context(&gps[0]), dead = 0;
    nx_gp_release(&gps[0]);
    free(gps);
    int seen = wait_for_death(&dead);
    write_result(argv[2], -1,
                 !seen                             ? "no-death\n"
                 : (dead >> 32) == (creator >> 32) ? "saw-death\n"
                                                   : "saw-another\n");
    nx_finalize();
    return seen ? 0 : 5;
  }
  if (strcmp(mode, "die") == 0 && argc > 2) {
    /* Under nxrun: rank 1 dies; the others wait to hear of it, then end. */
    watch_deaths();
    nx_gp_t *gps = NULL;
    int n = 0, rank = -1;
    if (nx_context_peers(&gps, &n, &rank) != 0)
      return 4;
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
    if (rank == 1)
      raise(SIGKILL);
    int seen = wait_for_death(NULL);
    write_result(argv[2], rank, seen ? "saw-death\n" : "no-death\n");
    nx_finalize();
    return seen ? 0 : 5;
  }
  int r = nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 1;
}
