/* The x86-64 half of the heterogeneity test (tests/hetero/run.sh): listens
 * with nx_attach_listen, starts the peer command it is given (hetero_peer
 * under qemu-s390x) with the URL, and drives the exchange: every scalar and
 * array type, zero copy, a gp passed on to a third context in each process,
 * Figure 3's arrays of doubles and the counters at the end. Every receiver
 * checks what it got and sends a verdict here; this prints the table and
 * exits 0 only when every verdict came and passed and the peer exited 0.
 * Usage: hetero_host PEER-COMMAND [ARGS...] (the URL is appended). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hetero.h"

#define ROWS (2 * HX_FIG3_SIZES)

struct verdicts {
  int got, checks, failed;
};

static struct {
  nx_mutex_t m;
  nx_cond_t c;
  int hello;
  nx_gp_t p0, third; /* the peer's initial and third contexts */
  char machine[16];  /* the peer's uname -m */
  struct verdicts v[HX_NITEMS][ROWS][HX_NDIRS];
  double rtt_us[ROWS];
} st;

static pid_t peer = -1;
static double host_out[HX_FIG3_MAX], host_back[HX_FIG3_MAX];

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* "hello": the peer's format and machine, gps to its two contexts. */
static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  int32_t format = 0;
  char machine[16] = {0};
  nx_gp_t p0 = NX_GP_NULL, third = NX_GP_NULL;
  uint32_t sanity = 0;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_int32(buf, &format), "hello: nx_get_int32");
  hx_rc(&ck, nx_get_char_array(buf, machine, sizeof(machine)),
        "hello: nx_get_char_array");
  hx_rc(&ck, nx_get_gp(buf, &p0), "hello: nx_get_gp");
  hx_rc(&ck, nx_get_gp(buf, &third), "hello: nx_get_gp");
  hx_rc(&ck, nx_get_uint32(buf, &sanity), "hello: nx_get_uint32");
  machine[sizeof(machine) - 1] = '\0';
  hx_expect(&ck, format == hx_remote_format(),
            "hello: the peer says its format is %d", (int)format);
  hx_expect(&ck, sanity == 0x01020304u, "hello: uint32 %08x", (unsigned)sanity);
  const char *same = getenv("HETERO_SAME_ORDER");
  if (same == NULL || strcmp(same, "1") != 0)
    hx_expect(&ck, strcmp(machine, "s390x") == 0,
              "hello: the peer runs on %s, not s390x", machine);
  for (int i = 0; i < 2; i++) {
    const nx_gp_t *gp = i == 0 ? &p0 : &third;
    const char *proto = nx_gp_protocol(gp);
    hx_expect(&ck, proto != NULL && strcmp(proto, "tcp") == 0,
              "hello: the peer's context %d is reached by %s, expected tcp", i,
              proto != NULL ? proto : "nothing");
  }
  hx_expect(&ck, nx_gp_context(&p0) != nx_gp_context(&third),
            "hello: both gps name context %016llx",
            (unsigned long long)nx_gp_context(&p0));
  hx_send_verdict(HX_HELLO, 0, &ck);
  nx_mutex_lock(&st.m);
  if (!st.hello) {
    const nx_gp_t null_gp = NX_GP_NULL;
    st.p0 = p0, st.third = third; /* the references move to st */
    p0 = third = null_gp;
    memcpy(st.machine, machine, sizeof(machine));
    st.hello = 1;
    nx_cond_broadcast(&st.c);
  }
  nx_mutex_unlock(&st.m);
  nx_gp_release(&p0);
  nx_gp_release(&third);
}

/* "item": an item the peer packed. */
static void on_item(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  int32_t item = -1;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_int32(buf, &item), "item: nx_get_int32");
  hx_check_item(&ck, buf, item);
  hx_send_verdict(item, 0, &ck);
}

/* "pong": Figure 3's array back from the peer. */
static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  int64_t count = -1;
  int32_t mode = -1, row = -1;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_int64(buf, &count), "pong: nx_get_int64");
  hx_rc(&ck, nx_get_int32(buf, &mode), "pong: nx_get_int32");
  hx_rc(&ck, nx_get_int32(buf, &row), "pong: nx_get_int32");
  if (count < 0 || count > HX_FIG3_MAX || (mode != 0 && mode != 1) || row < 0 ||
      row >= ROWS) {
    hx_expect(&ck, 0, "pong: count %lld, mode %d, row %d", (long long)count,
              (int)mode, (int)row);
    hx_send_verdict(HX_FIG3, row < 0 || row >= ROWS ? 0 : row, &ck);
    return;
  }
  size_t n = (size_t)count;
  const double *p = host_back;
  if (mode == 0) {
    hx_rc(&ck, nx_get_double_array(buf, host_back, n), "nx_get_double_array");
  } else {
    hx_rc(&ck, nx_get_double_array_ptr(buf, &p, n), "nx_get_double_array_ptr");
    hx_expect(&ck, p != NULL && (uintptr_t)p % sizeof(double) == 0,
              "nx_get_double_array_ptr gave %p", (const void *)p);
  }
  size_t bad = 0, first = n;
  for (size_t i = 0; p != NULL && i < n; i++)
    if (p[i] != hx_fig3_value((uint32_t)i) && bad++ == 0)
      first = i;
  hx_expect(&ck, p != NULL && bad == 0,
            "pong: %zu of %zu doubles wrong, first [%zu] = %a", bad, n, first,
            p != NULL && first < n ? p[first] : 0.0);
  hx_send_verdict(HX_FIG3, row, &ck);
}

/* "verdict": one receiver's checks, from either process. */
static void on_verdict(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  int32_t item, row, dir, checks, failed;
  if (nx_get_int32(buf, &item) != 0 || nx_get_int32(buf, &row) != 0 ||
      nx_get_int32(buf, &dir) != 0 || nx_get_int32(buf, &checks) != 0 ||
      nx_get_int32(buf, &failed) != 0 || item < 0 || item >= HX_NITEMS ||
      row < 0 || row >= ROWS || dir < 0 || dir >= HX_NDIRS) {
    struct hx_check ck = {0, 0};
    hx_expect(&ck, 0, "a malformed verdict");
    return;
  }
  nx_mutex_lock(&st.m);
  struct verdicts *v = &st.v[item][row][dir];
  v->got++;
  v->checks += checks;
  v->failed += failed;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* Verdicts each row expects, per direction: one per receiving handler. In
 * HX_GP, the peer's gp_pass, its third context's relay and via; the host's
 * second context's via and third context's relay. */
static int expected(int item, int row, int dir) {
  switch (item) {
  case HX_HELLO: return row == 0 && dir == HX_TO_HOST;
  case HX_GP: return row == 0 ? (dir == HX_TO_PEER ? 3 : 2) : 0;
  case HX_FIG3: return 1;
  default: return row == 0;
  }
}

static void kill_peer(void) {
  if (peer > 0) {
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    peer = -1;
  }
}

/* Waits until `item`'s row has all its verdicts; 0 on time-out. */
static int wait_row(int item, int row, int seconds) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  int ok = 1;
  nx_mutex_lock(&st.m);
  while (st.v[item][row][HX_TO_PEER].got < expected(item, row, HX_TO_PEER) ||
         st.v[item][row][HX_TO_HOST].got < expected(item, row, HX_TO_HOST))
    if (nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT) {
      ok = 0;
      break;
    }
  nx_mutex_unlock(&st.m);
  if (!ok)
    fprintf(
        stderr,
        "hetero host: FAILED: item %d row %d: verdicts missing after %d s\n",
        item, row, seconds);
  return ok;
}

/* Waits for the peer's hello, at most `seconds`, and stops early if the
 * peer exits first; 1 once hello came. */
static int wait_hello(int seconds) {
  int ok = 0, status = 0;
  for (int s = 0; s < seconds && !ok; s++) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    nx_mutex_lock(&st.m);
    while (!st.hello)
      if (nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT)
        break;
    ok = st.hello;
    nx_mutex_unlock(&st.m);
    if (!ok && waitpid(peer, &status, WNOHANG) == peer) {
      peer = -1;
      fprintf(stderr,
              "hetero host: FAILED: the peer exited (status %#x) "
              "before its hello\n",
              (unsigned)status);
      return 0;
    }
  }
  if (!ok)
    fprintf(stderr, "hetero host: FAILED: no hello from the peer in %d s\n",
            seconds);
  return ok;
}

static int refs_settled(int seconds) {
  struct timespec step = {0, 1000000};
  for (long i = 0; i < seconds * 1000L; i++) {
    if (__atomic_load_n(&hx_refs_released, __ATOMIC_SEQ_CST) ==
        __atomic_load_n(&hx_refs_put, __ATOMIC_SEQ_CST))
      return 1;
    nanosleep(&step, NULL);
  }
  return 0;
}

static int send_gp(const nx_gp_t *to, const char *handler, const nx_gp_t *gp) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, to, handler, 256);
  if (rc != 0)
    return rc;
  if ((rc = nx_put_gp(b, gp)) != 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

static int send_empty(const nx_gp_t *to, const char *handler) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, to, handler, 0);
  return rc != 0 ? rc : nx_rsr_send(b);
}

static int send_ping(int mode, int row) {
  size_t n = hx_fig3_count[row % HX_FIG3_SIZES];
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, &st.p0, "ping",
                            nx_sizeof_int64(1) + nx_sizeof_double(n) + 16);
  if (rc != 0)
    return rc;
  if ((rc = nx_put_int64(b, (int64_t)n)) == 0 &&
      (rc = nx_put_int32(b, mode)) == 0 && (rc = nx_put_int32(b, row)) == 0) {
    if (mode == 0) {
      rc = nx_put_double_array(b, host_out, n);
    } else {
      rc = nx_put_double_array_ref(b, host_out, n, hx_release_cb, NULL);
      if (rc == 0)
        __atomic_fetch_add(&hx_refs_put, 1, __ATOMIC_SEQ_CST);
    }
  }
  if (rc != 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

/* The host's own counters at the end, as a verdict to itself. */
static void final_check(void) {
  struct hx_check ck = {0, 0};
  nx_stats_t s;
  hx_expect(&ck, refs_settled(10), "%d of %d references released",
            hx_refs_released, hx_refs_put);
  hx_expect(&ck, hx_refs_bad == 0, "%d references released with an error",
            hx_refs_bad);
  hx_rc(&ck, nx_stats_get(&s), "nx_stats_get");
  hx_expect(
      &ck,
      s.drop_bad_frame == 0 && s.drop_no_handler == 0 &&
          s.drop_no_context == 0 && s.rsr_failed == 0 && s.peers_failed == 0,
      "drops: bad frame %llu, no handler %llu, no context %llu; "
      "RSRs lost %llu, peers failed %llu",
      (unsigned long long)s.drop_bad_frame,
      (unsigned long long)s.drop_no_handler,
      (unsigned long long)s.drop_no_context, (unsigned long long)s.rsr_failed,
      (unsigned long long)s.peers_failed);
  hx_send_verdict(HX_FINAL, 0, &ck);
}

static const char *row_name(int item, int row, char *out, size_t len) {
  static const char *const names[HX_NITEMS] = {"hello: format, uname, 2 gps",
                                               "scalars: 11 types x 2",
                                               "arrays: 11 types, bytes, empty",
                                               "zero copy: 6 refs, in place",
                                               "buffer bytes -> from_bytes",
                                               "gp on to a third context",
                                               "",
                                               "counters at the end"};
  if (item == HX_FIG3)
    snprintf(out, len, "fig3 %-8s %6u doubles",
             row < HX_FIG3_SIZES ? "copy" : "ref/ptr",
             (unsigned)hx_fig3_count[row % HX_FIG3_SIZES]);
  else
    snprintf(out, len, "%s", names[item]);
  return out;
}

/* Prints the table; returns the number of rows that failed or are
 * incomplete. */
static int print_table(const char *me) {
  int bad = 0;
  char name[64], cell[HX_NDIRS][32], to_peer[40], to_host[40];
  const char *them = st.machine[0] ? st.machine : "peer";
  snprintf(to_peer, sizeof(to_peer), "%s -> %s", me, them);
  snprintf(to_host, sizeof(to_host), "%s -> %s", them, me);
  printf("\n%-36s %-18s %-18s %s\n", "what crossed (checked by receiver)",
         to_peer, to_host, "round trip");
  nx_mutex_lock(&st.m);
  for (int item = HX_HELLO; item < HX_NITEMS; item++)
    for (int row = 0; row < ROWS; row++) {
      if (expected(item, row, HX_TO_PEER) + expected(item, row, HX_TO_HOST) ==
          0)
        continue;
      for (int d = 0; d < HX_NDIRS; d++) {
        const struct verdicts *v = &st.v[item][row][d];
        int want = expected(item, row, d);
        if (want == 0)
          snprintf(cell[d], sizeof(cell[d]), "-");
        else if (v->got < want)
          snprintf(cell[d], sizeof(cell[d]), "MISSING (%d/%d)", v->got, want);
        else if (v->failed > 0)
          snprintf(cell[d], sizeof(cell[d]), "FAILED %d/%d", v->failed,
                   v->checks);
        else
          snprintf(cell[d], sizeof(cell[d]), "ok (%d checks)", v->checks);
        if (want > 0 && (v->got < want || v->failed > 0 || v->checks == 0))
          bad++;
      }
      char rtt[32] = "";
      if (item == HX_FIG3 && st.rtt_us[row] > 0)
        snprintf(rtt, sizeof(rtt), "%.0f us", st.rtt_us[row]);
      printf("%-36s %-18s %-18s %s\n", row_name(item, row, name, sizeof(name)),
             cell[HX_TO_PEER], cell[HX_TO_HOST], rtt);
    }
  nx_mutex_unlock(&st.m);
  return bad;
}

/* Starts the peer command with the URL appended. */
static pid_t spawn(char **cmd, int n, const char *url) {
  char **args = calloc((size_t)n + 2, sizeof(*args));
  if (args == NULL)
    return -1;
  for (int i = 0; i < n; i++)
    args[i] = cmd[i];
  args[n] = (char *)url;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(args[0], args);
    fprintf(stderr, "hetero host: cannot run %s: %s\n", args[0],
            strerror(errno));
    _exit(127);
  }
  free(args);
  return pid;
}

/* Waits for the peer to exit, at most `seconds`; its status, or -1. */
static int reap(int seconds) {
  struct timespec step = {0, 10000000};
  for (int i = 0; i < seconds * 100; i++) {
    int status;
    pid_t r = waitpid(peer, &status, WNOHANG);
    if (r == peer) {
      peer = -1;
      return status;
    }
    if (r < 0)
      return -1;
    nanosleep(&step, NULL);
  }
  return -1;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "hetero host: %s: %s\n", what, nx_strerror(rc));
  kill_peer();
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: hetero_host PEER-COMMAND [ARGS...]\n");
    return 2;
  }
  hx_role = "host";
  hx_incoming = HX_TO_HOST;
  int rc = nx_init(&argc, &argv);
  if (rc != 0)
    die("nx_init", rc);
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  nx_context_t *self = nx_context_self();
  struct {
    const char *name;
    nx_handler_fn fn;
  } h[] = {{"hello", on_hello},
           {"item", on_item},
           {"pong", on_pong},
           {"verdict", on_verdict}};
  for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
    if ((rc = nx_handler_register(self, h[i].name, h[i].fn,
                                  NX_HANDLER_NONTHREADED, NULL)) != 0)
      die("nx_handler_register", rc);
  nx_gp_t second = NX_GP_NULL, third = NX_GP_NULL;
  if ((rc = nx_gp_make(NULL, &hx_coord)) != 0 ||
      (rc = nx_context_create_local(hx_third_init, NULL, &second)) != 0 ||
      (rc = nx_context_create_local(hx_third_init, NULL, &third)) != 0)
    die("setting up contexts", rc);
  for (uint32_t i = 0; i < HX_FIG3_MAX; i++)
    host_out[i] = hx_fig3_value(i);

  const char *url;
  if ((rc = nx_attach_listen(&url)) != 0)
    die("nx_attach_listen", rc);
  double t0 = now_us();
  peer = spawn(argv + 1, argc - 1, url);
  if (peer < 0)
    die("fork", NX_ENOMEM);

  int ok = wait_hello(120);
  double t_hello = now_us();
  for (int item = HX_SCALARS; ok && item <= HX_BUFBYTES; item++) {
    if ((rc = hx_send_item(&st.p0, "item", item)) != 0)
      die("sending an item", rc);
    ok = wait_row(item, 0, 60);
  }
  /* A gp to the second context goes to the peer, which passes it on to its
   * third context; the peer's third context's gp (from hello) goes to this
   * process's third context. Each third context then sends "via" through
   * the gp it got. */
  if (ok) {
    if ((rc = send_gp(&st.p0, "gp_pass", &second)) != 0 ||
        (rc = send_gp(&third, "relay", &st.third)) != 0)
      die("passing gps", rc);
    ok = wait_row(HX_GP, 0, 60);
  }
  for (int row = 0; ok && row < ROWS; row++) {
    int mode = row / HX_FIG3_SIZES;
    struct hx_check released = {0, 0};
    hx_expect(&released, refs_settled(30), "the last ping was not released");
    double t = now_us();
    if ((rc = send_ping(mode, row)) != 0)
      die("sending ping", rc);
    ok = wait_row(HX_FIG3, row, 120);
    st.rtt_us[row] = now_us() - t;
  }
  if (ok) {
    if ((rc = send_empty(&st.p0, "finish")) != 0)
      die("sending finish", rc);
    final_check();
    ok = wait_row(HX_FINAL, 0, 60);
  }
  int status = -1;
  if (ok && (rc = send_empty(&st.p0, "quit")) == 0)
    status = reap(60);
  kill_peer();
  double t_end = now_us();

  char me[16];
  hx_machine(me);
  int bad = print_table(me);
  printf("\nformats: every buffer the host received was %s, every one the "
         "peer received %s (checked by each receiver)\n",
         hx_remote_format() == NX_FORMAT_BIG ? "BIG" : "LITTLE",
         nx_format_native() == NX_FORMAT_BIG ? "BIG" : "LITTLE");
  printf("times: peer start to hello %.2f s, exchange %.2f s\n",
         (t_hello - t0) / 1e6, (t_end - t_hello) / 1e6);
  if (status != 0)
    printf("the peer %s\n", status == -1        ? "did not exit by itself"
                            : WIFEXITED(status) ? "exited non-zero"
                                                : "was killed by a signal");
  int failed_here = hx_failed();
  nx_gp_release(&st.p0);
  nx_gp_release(&st.third);
  nx_gp_release(&second);
  nx_gp_release(&third);
  nx_gp_release(&hx_coord);
  nx_finalize();
  int pass = ok && bad == 0 && status == 0 && failed_here == 0;
  printf("hetero: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
