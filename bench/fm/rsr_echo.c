/* The raw RSR anchor's peer: a process context that answers every "ping" (one
 * int32, or an array of doubles) with the same values in "pong". */
#include <stdio.h>
#include <stdlib.h>

#include "nexus.h"

static double *scratch;
static size_t scratch_n;

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  int32_t kind, v = 0;
  uint64_t n = 0;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &reply) != 0 || nx_get_int32(buf, &kind) != 0)
    return;
  /* Read the values out, as a receiver would, and send them back. */
  if (kind == 0 && nx_get_int32(buf, &v) == 0 &&
      nx_rsr_init_name(&out, &reply, "pong", 16) == 0) {
    nx_put_int32(out, v);
    nx_rsr_send(out);
  } else if (kind == 1 && nx_get_uint64(buf, &n) == 0 && n <= scratch_n &&
             nx_get_double_array(buf, scratch, n) == 0 &&
             nx_rsr_init_name(&out, &reply, "pong", nx_sizeof_double(n)) == 0) {
    nx_put_uint64(out, n);
    nx_put_double_array(out, scratch, n);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

int main(int argc, char **argv) {
  scratch_n = (size_t)1 << 17;
  scratch = malloc(scratch_n * sizeof(double));
  if (scratch == NULL || nx_init(&argc, &argv) != 0)
    return 1;
  if (nx_handler_register(nx_context_self(), "ping", on_ping,
                          NX_HANDLER_NONTHREADED, NULL) != 0)
    return 1;
  int r = nx_context_serve();
  nx_finalize();
  free(scratch);
  return r == 0 ? 0 : 1;
}
