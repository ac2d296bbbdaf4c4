/* A program the ofi tests start as a process context (nx_context_create); it
 * serves the handlers of ofi_common.h ("echo" and "stall" from
 * tests/common/peer_handlers.h) until its creator destroys it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"
#include "ofi_common.h"
#include "peer_handlers.h"

/* Non-threaded handlers run one at a time, on the driver: the counters
 * need no lock. The blast runs on a threaded handler and only bumps
 * `blast_fails`, atomically. */
static uint64_t report[REPORT_COUNT];
static int64_t last_index[COUNT_THREADS_MAX];
static uint8_t *seen; /* COUNT_THREADS_MAX * COUNT_INDEX_MAX flags */
static uint64_t blast_fails;

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  if (nx_get_gp(buf, &reply) != 0)
    return;
  char proto[16] = {0}, info[128] = {0};
  const char *p = nx_gp_protocol(&reply);
  snprintf(proto, sizeof(proto), "%s", p != NULL ? p : "none");
  if (nx_gp_protocol_info(&reply, info, sizeof(info)) != 0)
    snprintf(info, sizeof(info), "?");
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &reply, "hello", 256) == 0) {
    nx_put_uint32(out, (uint32_t)getpid());
    nx_put_char_array(out, proto, sizeof(proto));
    nx_put_char_array(out, info, sizeof(info));
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

static void on_count(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  uint32_t t = 0, i = 0;
  uint64_t n = 0;
  uint8_t data[4096];
  if (nx_get_uint32(buf, &t) != 0 || nx_get_uint32(buf, &i) != 0 ||
      nx_get_uint64(buf, &n) != 0 || t >= COUNT_THREADS_MAX ||
      i >= COUNT_INDEX_MAX || n > sizeof(data) ||
      (n > 0 && nx_get_bytes(buf, data, n) != 0) ||
      pattern_check(data, n, (uint64_t)t << 32 | i) != n) {
    report[REPORT_BAD_BYTES]++;
    return;
  }
  report[REPORT_COUNTED]++;
  uint8_t *s = &seen[(size_t)t * COUNT_INDEX_MAX + i];
  if (*s)
    report[REPORT_DUPLICATES]++;
  *s = 1;
  if ((int64_t)i != last_index[t] + 1)
    report[REPORT_OUT_OF_ORDER]++;
  last_index[t] = i;
}

static void on_stats(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_stats_t st;
  if (nx_stats_get(&st) == 0)
    report[REPORT_DROP_BAD_FRAME] = st.drop_bad_frame;
  report[REPORT_BLAST_FAILS] = __atomic_load_n(&blast_fails, __ATOMIC_RELAXED);
  peer_reply_counters(buf, "stats", report, REPORT_COUNT);
}

static void on_blast(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t target = NX_GP_NULL;
  uint32_t count = 0;
  if (nx_get_gp(buf, &target) != 0 || nx_get_uint32(buf, &count) != 0)
    return;
  uint8_t *data = malloc(seq_size(0));
  for (uint32_t i = 0; i < count && data != NULL; i++) {
    size_t n = seq_size(i);
    pattern_fill(data, n, i);
    nx_buffer_t *out;
    if (nx_rsr_init_name(&out, &target, "seq",
                         2 * nx_sizeof_int64(1) + nx_sizeof_bytes(n)) != 0) {
      __atomic_fetch_add(&blast_fails, 1, __ATOMIC_RELAXED);
      continue;
    }
    nx_put_uint64(out, i);
    nx_put_uint64(out, n);
    nx_put_bytes(out, data, n);
    if (nx_rsr_send(out) != 0)
      __atomic_fetch_add(&blast_fails, 1, __ATOMIC_RELAXED);
  }
  free(data);
  nx_gp_release(&target);
}

int main(int argc, char **argv) {
  seen = calloc((size_t)COUNT_THREADS_MAX * COUNT_INDEX_MAX, 1);
  for (int t = 0; t < COUNT_THREADS_MAX; t++)
    last_index[t] = -1;
  if (seen == NULL || nx_init(&argc, &argv) != 0)
    return 2;
  nx_context_t *self = nx_context_self();
  if (peer_register_common(self) != 0)
    return 3;
  nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "count", on_count, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "stats", on_stats, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "blast", on_blast, NX_HANDLER_THREADED, NULL);
  int r = nx_context_serve();
  nx_finalize();
  free(seen);
  peer_handlers_done();
  return r == 0 ? 0 : 1;
}
