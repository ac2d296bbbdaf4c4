/* The peer of the ucx tests: a process context (started by nx_context_create)
 * serving the handlers of ucx_common.h ("echo" and "stall" from
 * tests/common/peer_handlers.h); in "parent" mode it first starts a second
 * peer of its own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"
#include "peer_handlers.h"
#include "ucx_common.h"

/* Handlers are non-threaded: they run on the driver, one at a time, so the
 * counters below need no lock, except the stats read by "stats" itself. */
static uint64_t stat[STAT_COUNT];
static uint64_t next_index[SEQ_STREAMS];
static nx_gp_t child = NX_GP_NULL; /* "parent" mode: the second peer */
/* A "pid" RSR may run while main is still creating the child. */
static pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_seq(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  uint32_t stream = 0;
  uint64_t index = 0, n = 0;
  uint8_t *p = NULL;
  int ok = nx_get_uint32(buf, &stream) == 0 &&
           nx_get_uint64(buf, &index) == 0 && nx_get_uint64(buf, &n) == 0 &&
           stream < SEQ_STREAMS && n <= ((uint64_t)1 << 30) &&
           (p = peer_room(n)) != NULL &&
           (n == 0 || nx_get_bytes(buf, p, n) == 0);
  ok = ok && index == next_index[stream] &&
       pattern_check(p, n, seq_seed(stream, index)) == n;
  if (stream < SEQ_STREAMS)
    next_index[stream] = index + 1;
  __atomic_add_fetch(&stat[STAT_SEQ_FRAMES], 1, __ATOMIC_RELAXED);
  if (!ok)
    __atomic_add_fetch(&stat[STAT_SEQ_BAD], 1, __ATOMIC_RELAXED);
}

static void on_stats(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_stats_t s;
  nx_stats_get(&s);
  uint64_t v[STAT_COUNT];
  for (int i = 0; i < STAT_COUNT; i++)
    v[i] = __atomic_load_n(&stat[i], __ATOMIC_RELAXED);
  v[STAT_RSR_HANDLED] = s.rsr_handled;
  v[STAT_DROP_BAD_FRAME] = s.drop_bad_frame;
  v[STAT_PEERS_FAILED] = s.peers_failed;
  peer_reply_counters(buf, "stats", v, STAT_COUNT);
}

static void on_pid(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_t reply = NX_GP_NULL, me = NX_GP_NULL;
  nx_buffer_t *out;
  pthread_mutex_lock(&child_lock);
  if (!nx_gp_is_null(&child))
    nx_gp_copy(&child, &me);
  pthread_mutex_unlock(&child_lock);
  if (nx_gp_is_null(&me))
    nx_gp_make(NULL, &me);
  const nx_gp_t *who = &me;
  if (nx_get_gp(buf, &reply) == 0 &&
      nx_rsr_init_name(&out, &reply, "pid",
                       nx_sizeof_int64(1) + nx_sizeof_gp(who)) == 0) {
    nx_put_uint64(out, (uint64_t)getpid());
    nx_put_gp(out, who);
    nx_rsr_send(out);
  }
  nx_gp_release(&me);
  nx_gp_release(&reply);
}

int main(int argc, char **argv) {
  alarm(120); /* never outlive a stuck test */
  const char *mode = argc > 1 ? argv[1] : "serve";
  /* Shared-memory FIFO elements unlike the test's (the module's 256), set
   * while this process has one thread. */
  if (strcmp(mode, "fifo128") == 0 &&
      setenv("UCX_MM_FIFO_ELEM_SIZE", "128", 1) != 0)
    return 2;
  if (nx_init(&argc, &argv) != 0)
    return 2;
  nx_context_t *self = nx_context_self();
  struct {
    const char *name;
    nx_handler_fn fn;
  } handlers[] = {{"seq", on_seq}, {"stats", on_stats}, {"pid", on_pid}};
  if (peer_register_common(self) != 0)
    return 3;
  for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
    if (nx_handler_register(self, handlers[i].name, handlers[i].fn,
                            NX_HANDLER_NONTHREADED, NULL) != 0)
      return 3;
  if (strcmp(mode, "parent") == 0) {
    nx_node_t node;
    char *const child_argv[] = {argv[0], (char *)"serve", NULL};
    nx_gp_t made = NX_GP_NULL;
    if (nx_nodes_acquire("localhost", 1, &node) != 0 ||
        nx_context_create(&node, argv[0], child_argv, &made) != 0) {
      peer_fail("cannot start the second peer");
      return 4;
    }
    pthread_mutex_lock(&child_lock);
    child = made;
    pthread_mutex_unlock(&child_lock);
  }
  int r = nx_context_serve();
  /* The second peer may be dead already (a test kills it): then this
   * fails, and nx_finalize reaps it. */
  pthread_mutex_lock(&child_lock);
  nx_gp_t last = child, none = NX_GP_NULL;
  child = none;
  pthread_mutex_unlock(&child_lock);
  if (!nx_gp_is_null(&last)) {
    nx_context_destroy(&last);
    nx_gp_release(&last);
  }
  nx_finalize();
  peer_handlers_done();
  return r == 0 || r == NX_EPEERDEAD ? 0 : 1;
}
