/* The big-endian half of the heterogeneity test (tests/hetero/run.sh): cross-
 * built for s390x and run under qemu-s390x, it joins hetero_host's
 * computation with nx_attach over tcp, checks every RSR the host sends it
 * and answers with the same kinds of values, packed in its own order.
 * Usage: hetero_peer URL. Exits 0 when every check here passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hetero.h"

static struct {
  nx_mutex_t m;
  nx_cond_t c;
  int quit;
} st;

static nx_gp_t third = NX_GP_NULL; /* the third context, in this process */
static double peer_buf[HX_FIG3_MAX];

static void die(const char *what, int rc) {
  fprintf(stderr, "hetero peer: %s: %s\n", what, nx_strerror(rc));
  exit(1);
}

/* Waits (in a threaded handler) until every reference put here was
 * released, at most `seconds`; returns 1 if they were. */
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

/* "item": check what the host packed, then send the same item back. */
static void on_item(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  int32_t item = -1;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_int32(buf, &item), "item: nx_get_int32");
  hx_check_item(&ck, buf, item);
  hx_send_verdict(item, 0, &ck);
  struct hx_check sent = {0, 0};
  hx_rc(&sent, hx_send_item(&hx_coord, "item", item), "sending the item back");
}

/* "gp_pass": a gp to a context of the host, which goes on to the third
 * context here; that one sends "via" through it. */
static void on_gp_pass(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  nx_gp_t gp = NX_GP_NULL;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_gp(buf, &gp), "gp_pass: nx_get_gp");
  const char *proto = nx_gp_protocol(&gp);
  hx_expect(&ck, proto != NULL && strcmp(proto, "tcp") == 0,
            "gp_pass: the host's gp is reached by %s, expected tcp",
            proto != NULL ? proto : "nothing");
  nx_buffer_t *out;
  int rc = nx_rsr_init_name(&out, &third, "relay", 128);
  if (rc == 0) {
    nx_put_gp(out, &gp);
    rc = nx_rsr_send(out);
  }
  hx_rc(&ck, rc, "gp_pass: sending relay to the third context");
  nx_gp_release(&gp);
  hx_send_verdict(HX_GP, 0, &ck);
}

/* "ping" (threaded: it may wait for its last pong's reference): Figure 3's
 * hop, an array of doubles checked and sent back in "pong", copied or (mode
 * 1) read in place and put by reference. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  int64_t count = -1;
  int32_t mode = -1, row = -1;
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_int64(buf, &count), "ping: nx_get_int64");
  hx_rc(&ck, nx_get_int32(buf, &mode), "ping: nx_get_int32");
  hx_rc(&ck, nx_get_int32(buf, &row), "ping: nx_get_int32");
  if (count < 0 || count > HX_FIG3_MAX || (mode != 0 && mode != 1) || row < 0 ||
      row >= 2 * HX_FIG3_SIZES) {
    hx_expect(&ck, 0, "ping: count %lld, mode %d, row %d", (long long)count,
              (int)mode, (int)row);
    hx_send_verdict(HX_FIG3, row < 0 || row >= 2 * HX_FIG3_SIZES ? 0 : row,
                    &ck);
    return;
  }
  size_t n = (size_t)count;
  hx_expect(&ck, count == hx_fig3_count[row % HX_FIG3_SIZES],
            "ping: %lld doubles in row %d", (long long)count, (int)row);
  /* The previous pong's array must be released before it is overwritten. */
  hx_expect(&ck, refs_settled(30), "ping: the last pong was not released");
  if (mode == 0) {
    hx_rc(&ck, nx_get_double_array(buf, peer_buf, n), "nx_get_double_array");
  } else {
    const double *p = NULL;
    hx_rc(&ck, nx_get_double_array_ptr(buf, &p, n), "nx_get_double_array_ptr");
    hx_expect(&ck, p != NULL && (uintptr_t)p % sizeof(double) == 0,
              "nx_get_double_array_ptr gave %p", (const void *)p);
    if (p != NULL)
      memcpy(peer_buf, p, n * sizeof(double));
  }
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; i++)
    if (peer_buf[i] != hx_fig3_value((uint32_t)i) && bad++ == 0)
      first = i;
  hx_expect(&ck, bad == 0, "ping: %zu of %zu doubles wrong, first [%zu] = %a",
            bad, n, first, first < n ? peer_buf[first] : 0.0);
  hx_send_verdict(HX_FIG3, row, &ck);

  nx_buffer_t *out;
  int rc = nx_rsr_init_name(&out, &hx_coord, "pong",
                            nx_sizeof_int64(1) + nx_sizeof_double(n) + 16);
  if (rc == 0) {
    nx_put_int64(out, count);
    nx_put_int32(out, mode);
    nx_put_int32(out, row);
    if (mode == 0) {
      rc = nx_put_double_array(out, peer_buf, n);
    } else {
      rc = nx_put_double_array_ref(out, peer_buf, n, hx_release_cb, NULL);
      if (rc == 0)
        __atomic_fetch_add(&hx_refs_put, 1, __ATOMIC_SEQ_CST);
    }
    if (rc == 0)
      rc = nx_rsr_send(out);
    else
      nx_buffer_release(out);
  }
  struct hx_check sent = {0, 0};
  hx_rc(&sent, rc, "sending pong");
}

/* "finish" (threaded): the counters at the end, as a verdict. */
static void on_finish(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
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
  hx_expect(&ck, hx_failed() == 0, "%d checks failed here before", hx_failed());
  hx_send_verdict(HX_FINAL, 0, &ck);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&st.m);
  st.quit = 1;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

static void send_hello(void) {
  nx_gp_t self = NX_GP_NULL;
  char machine[16];
  nx_buffer_t *b;
  int rc = nx_gp_make(NULL, &self);
  if (rc != 0)
    die("nx_gp_make", rc);
  hx_machine(machine);
  if ((rc = nx_rsr_init_name(&b, &hx_coord, "hello", 512)) != 0)
    die("nx_rsr_init", rc);
  nx_put_int32(b, nx_format_native());
  nx_put_char_array(b, machine, sizeof(machine));
  nx_put_gp(b, &self);
  nx_put_gp(b, &third);
  nx_put_uint32(b, 0x01020304u);
  if ((rc = nx_rsr_send(b)) != 0)
    die("sending hello", rc);
  nx_gp_release(&self);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hetero_peer URL\n");
    return 2;
  }
  hx_role = "peer";
  hx_incoming = HX_TO_PEER;
  int rc = nx_init(&argc, &argv);
  if (rc != 0)
    die("nx_init", rc);
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  nx_context_t *self = nx_context_self();
  struct {
    const char *name;
    nx_handler_fn fn;
    int kind;
  } h[] = {{"item", on_item, NX_HANDLER_NONTHREADED},
           {"gp_pass", on_gp_pass, NX_HANDLER_NONTHREADED},
           {"ping", on_ping, NX_HANDLER_THREADED},
           {"finish", on_finish, NX_HANDLER_THREADED},
           {"quit", on_quit, NX_HANDLER_NONTHREADED}};
  for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
    if ((rc = nx_handler_register(self, h[i].name, h[i].fn, h[i].kind, NULL)) !=
        0)
      die("nx_handler_register", rc);
  if ((rc = nx_context_create_local(hx_third_init, NULL, &third)) != 0)
    die("nx_context_create_local", rc);
  if ((rc = nx_attach(argv[1], &hx_coord)) != 0)
    die("nx_attach", rc);
  send_hello();

  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 600;
  nx_mutex_lock(&st.m);
  while (!st.quit)
    if (nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT)
      break;
  int quit = st.quit;
  nx_mutex_unlock(&st.m);
  if (!quit)
    fprintf(stderr, "hetero peer: FAILED: no quit from the host in 600 s\n");
  nx_gp_release(&third);
  nx_gp_release(&hx_coord);
  nx_finalize();
  return quit && hx_failed() == 0 ? 0 : 1;
}
