/* The big-endian end of the fm heterogeneity test (tests/fm/hetero.sh): a C
 * program with libfm, cross-built for s390x and run under qemu-s390x, that
 * joins the x86-64 Fortran host (fortran_hetero.f90) with nx_attach, takes
 * an outport of the host's channel, sends an integer(int64) and a complex(8)
 * array (the host receives them into strided sections), sends an outport of
 * a channel of its own, receives the host's strided sections back into
 * contiguous arrays, checks them and sends its verdict. Usage: PEER URL */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fm.h"

#define NI 12
#define NZ 8

static nx_mutex_t m;
static nx_cond_t c;
static fm_port_t to_host;
static int have_port, quit;

/* "fmh.port": the outport of the host's channel. */
static void on_port(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int r = fm_get_port(buf, &to_host);
  nx_mutex_lock(&m);
  have_port = r == 0 ? 1 : -1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&m);
  quit = 1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* Waits (at most 300 s) until *flag is nonzero. */
static int wait_for(int *flag) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 300;
  nx_mutex_lock(&m);
  while (*flag == 0)
    if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT)
      break;
  int v = *flag;
  nx_mutex_unlock(&m);
  return v;
}

static int send_values(int type, const void *v, size_t n) {
  nx_buffer_t *b;
  int r = fm_send_begin(&to_host, 64 + n * 16, &b);
  if (r != 0)
    return r;
  if ((r = fm_put_values(b, type, v, n)) != 0) {
    fm_send_abort(&to_host, b);
    return r;
  }
  return fm_send_end(b);
}

static void die(const char *what, int rc) {
  fprintf(stderr, "fm hetero peer: %s: %s\n", what, fm_strerror(rc));
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fm_hetero_peer URL\n");
    return 2;
  }
  int rc = fm_init(&argc, &argv);
  if (rc != 0)
    die("fm_init", rc);
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_gp_t host, self;
  nx_buffer_t *b;
  if ((rc = nx_handler_register(nx_context_self(), "fmh.port", on_port,
                                NX_HANDLER_NONTHREADED, NULL)) != 0 ||
      (rc = nx_handler_register(nx_context_self(), "fmh.quit", on_quit,
                                NX_HANDLER_NONTHREADED, NULL)) != 0)
    die("nx_handler_register", rc);
  if ((rc = nx_attach(argv[1], &host)) != 0)
    die("nx_attach", rc);
  if ((rc = nx_gp_make(NULL, &self)) != 0 ||
      (rc = nx_rsr_init_name(&b, &host, "fmh.hello", 256)) != 0 ||
      (rc = nx_put_gp(b, &self)) != 0 || (rc = nx_rsr_send(b)) != 0)
    die("hello", rc);
  if (wait_for(&have_port) != 1)
    die("no outport from the host", NX_ETIMEDOUT);

  /* The values, different in every byte position, signs both ways. */
  int64_t iv[NI];
  double zv[2 * NZ];
  for (int i = 0; i < NI; i++)
    iv[i] = (int64_t)(i + 1) * INT64_C(1000000000007) * (i % 2 ? -1 : 1);
  for (int k = 0; k < NZ; k++) {
    zv[2 * k] = k + 0.25;
    zv[2 * k + 1] = -3.0 * k - 0.5;
  }
  if ((rc = send_values(FM_TYPE_INT64, iv, NI)) != 0 ||
      (rc = send_values(FM_TYPE_COMPLEX8, zv, NZ)) != 0)
    die("fm_send", rc);

  /* A channel of ours: its outport to the host, which sends back. */
  fm_port_t in, out;
  if ((rc = fm_channel(&in, &out)) != 0 ||
      (rc = fm_send_begin(&to_host, 128, &b)) != 0 ||
      (rc = fm_put_port(b, &out)) != 0 || (rc = fm_send_end(b)) != 0)
    die("sending an outport", rc);
  int64_t ig[NI] = {0};
  double zg[2 * NZ] = {0};
  int32_t bad = 0;
  if ((rc = fm_receive(&in, &b)) != 0)
    die("fm_receive", rc);
  rc = fm_get_values(b, FM_TYPE_INT64, ig, NI);
  fm_msg_free(b);
  bad += rc != 0 || memcmp(ig, iv, sizeof(iv)) != 0;
  if ((rc = fm_receive(&in, &b)) != 0)
    die("fm_receive", rc);
  rc = fm_get_values(b, FM_TYPE_COMPLEX8, zg, NZ);
  fm_msg_free(b);
  bad += 2 * (rc != 0 || memcmp(zg, zv, sizeof(zv)) != 0);
  if (bad != 0)
    fprintf(stderr,
            "fm hetero peer: the host's sections came back wrong "
            "(%d)\n",
            (int)bad);
  if ((rc = fm_send_int32(&to_host, bad)) != 0 ||
      (rc = fm_endchannel(&to_host)) != 0)
    die("the verdict", rc);

  int q = wait_for(&quit);
  nx_gp_release(&self);
  nx_gp_release(&host);
  fm_finalize();
  return q && bad == 0 ? 0 : 1;
}
