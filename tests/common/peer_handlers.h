/* Handlers that the peer programs of the module tests (tcp_peer.cpp,
 * ucx_peer.c, ofi_peer.c) serve alike: "echo" and "stall". Header-only, C
 * and C++: included once per program, whose handlers are non-threaded (they
 * run one at a time on the driver, so the scratch buffer needs no lock).
 * A peer's counters request is answered by peer_reply_counters.
 *   "echo"   gp reply, u64 tag, u64 n, bytes[n]  -> "echoed" at reply:
 *            u64 tag, u64 n, bytes[n] (the same bytes)
 *   "stall"  gp reply, u32 ms -> "stalled" at reply, then sleeps ms in the
 *            handler, so the peer's driver stops reading */
#ifndef NX_TESTS_PEER_HANDLERS_H
#define NX_TESTS_PEER_HANDLERS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

/* The largest "echo" payload a peer accepts. */
#define PEER_ECHO_MAX ((uint64_t)1 << 32)

static uint8_t *peer_scratch;
static size_t peer_scratch_len;

/* Says on stderr, with the peer's pid, what went wrong. */
static void peer_fail(const char *what) {
  fprintf(stderr, "peer[%d]: %s\n", (int)getpid(), what);
}

/* A scratch buffer of at least n bytes (never NULL for n == 0), or NULL. */
static uint8_t *peer_room(uint64_t n) {
  if (n > peer_scratch_len) {
    uint8_t *p = (uint8_t *)realloc(peer_scratch, n);
    if (p == NULL)
      return NULL;
    peer_scratch = p;
    peer_scratch_len = n;
  }
  return peer_scratch != NULL ? peer_scratch : (uint8_t *)&peer_scratch_len;
}

static void peer_on_echo(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint64_t tag = 0, n = 0;
  uint8_t *p;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &reply) != 0 || nx_get_uint64(buf, &tag) != 0 ||
      nx_get_uint64(buf, &n) != 0 || n > PEER_ECHO_MAX ||
      (p = peer_room(n)) == NULL || (n > 0 && nx_get_bytes(buf, p, n) != 0) ||
      nx_rsr_init_name(&out, &reply, "echoed",
                       2 * nx_sizeof_int64(1) + nx_sizeof_bytes(n)) != 0) {
    peer_fail("echo: bad request");
    nx_gp_release(&reply);
    return;
  }
  nx_put_uint64(out, tag);
  nx_put_uint64(out, n);
  nx_put_bytes(out, p, n);
  int r = nx_rsr_send(out);
  if (r != 0 && r != NX_EPEERDEAD)
    peer_fail("echo: send failed");
  nx_gp_release(&reply);
}

static void peer_on_stall(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t ms = 0;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &reply) != 0 || nx_get_uint32(buf, &ms) != 0 ||
      ms > 60000 || nx_rsr_init_name(&out, &reply, "stalled", 0) != 0) {
    peer_fail("stall: bad request");
    nx_gp_release(&reply);
    return;
  }
  nx_rsr_send(out);
  nx_gp_release(&reply);
  /* A plain sleep, invisible to the runtime: this process's driver (which
   * runs this handler) stops polling the module. */
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Answers a counters request (payload: gp reply) with `handler` at reply:
 * u64[n], the values v. */
static void peer_reply_counters(nx_buffer_t *request, const char *handler,
                                const uint64_t *v, int n) {
  nx_gp_t reply = NX_GP_NULL;
  nx_buffer_t *out;
  if (nx_get_gp(request, &reply) != 0 ||
      nx_rsr_init_name(&out, &reply, handler, nx_sizeof_int64(n)) != 0) {
    peer_fail("counters: bad request");
    nx_gp_release(&reply);
    return;
  }
  nx_put_uint64_array(out, v, n);
  nx_rsr_send(out);
  nx_gp_release(&reply);
}

/* Registers "echo" and "stall" in ctx, non-threaded. Returns 0 or the
 * first failing registration's error. */
static int peer_register_common(nx_context_t *ctx) {
  int r = nx_handler_register(ctx, "echo", peer_on_echo, NX_HANDLER_NONTHREADED,
                              NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "stall", peer_on_stall, NX_HANDLER_NONTHREADED,
                            NULL);
  return r;
}

/* Frees the scratch buffer; at the end of main. */
static void peer_handlers_done(void) {
  free(peer_scratch);
  peer_scratch = NULL;
  peer_scratch_len = 0;
}

#endif /* NX_TESTS_PEER_HANDLERS_H */
