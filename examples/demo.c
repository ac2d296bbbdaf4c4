/* The main demo: a ring of in-process contexts that learn their neighbours from
 * global pointers sent in buffers, pass a token around with RSRs, and a
 * threaded handler that blocks until a later RSR wakes it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nexus.h"

#define RING 4
#define LAPS 10000

/* Each ring member's context data. */
struct member {
  int index;
  nx_gp_t next; /* learnt from a "set_next" RSR */
  long tokens;  /* tokens passed on */
};

/* What the main context waits on. */
struct waiter {
  nx_mutex_t m;
  nx_cond_t c;
  int done;
  long hops;
};

static nx_gp_t main_gp;

static void wake_main(long hops) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &main_gp, "done", nx_sizeof_int64(1)) == 0) {
    nx_put_int64(b, hops);
    nx_rsr_send(b);
  }
}

/* Non-threaded: stores the gp of the next member. */
static void set_next(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  struct member *me = nx_context_data(ctx);
  nx_gp_release(&me->next);
  nx_get_gp(buf, &me->next);
}

/* Non-threaded: passes the token on until it has made LAPS laps. */
static void token(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  struct member *me = nx_context_data(ctx);
  int64_t hops = 0;
  nx_get_int64(buf, &hops);
  me->tokens++;
  if (++hops == (int64_t)RING * LAPS) {
    wake_main(hops);
    return;
  }
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &me->next, "token", nx_sizeof_int64(1)) == 0) {
    nx_put_int64(b, hops);
    nx_rsr_send(b);
  }
}

/* Threaded: blocks on a condition variable until "open" arrives. */
static struct waiter gate;
static void sleeper(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  wake_main(-2); /* "I am running"; main then sends the wake-up */
  nx_mutex_lock(&gate.m);
  while (!gate.done)
    nx_cond_wait(&gate.c, &gate.m);
  nx_mutex_unlock(&gate.m);
  wake_main(-1);
}

static void open_gate(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&gate.m);
  gate.done = 1;
  nx_cond_broadcast(&gate.c);
  nx_mutex_unlock(&gate.m);
}

static void done(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  struct waiter *w = addr;
  int64_t hops = 0;
  nx_get_int64(buf, &hops);
  nx_mutex_lock(&w->m);
  w->done = 1;
  w->hops = (long)hops;
  nx_cond_signal(&w->c);
  nx_mutex_unlock(&w->m);
}

static int member_init(nx_context_t *ctx, void *arg) {
  struct member *me = arg;
  nx_context_set_data(ctx, me);
  int r = nx_handler_register(ctx, "set_next", set_next, NX_HANDLER_NONTHREADED,
                              NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "token", token, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "sleep", sleeper, NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "open", open_gate, NX_HANDLER_NONTHREADED,
                            NULL);
  return r;
}

static void wait_done(struct waiter *w) {
  nx_mutex_lock(&w->m);
  while (!w->done)
    nx_cond_wait(&w->c, &w->m);
  w->done = 0;
  nx_mutex_unlock(&w->m);
}

static void send_empty(const nx_gp_t *gp, const char *handler) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, gp, handler, 0) == 0)
    nx_rsr_send(b);
}

static int fail(const char *what, int r) {
  fprintf(stderr, "demo: %s: %s\n", what, nx_strerror(r));
  return 1;
}

int main(int argc, char **argv) {
  int r = nx_init(&argc, &argv);
  if (r < 0)
    return fail("nx_init", r);
  nx_node_t node;
  nx_node_self(&node);
  printf("nexus demo on node %s\n\nprotocol modules:\n", node.host);
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t m;
    nx_module_info(i, &m);
    printf("  %-8s %s\n", m.name, m.loaded ? "loaded" : m.reason);
  }

  struct waiter w;
  nx_mutex_init(&w.m);
  nx_cond_init(&w.c);
  w.done = 0;
  nx_mutex_init(&gate.m);
  nx_cond_init(&gate.c);
  nx_handler_register(nx_context_self(), "done", done, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_gp_make(&w, &main_gp);

  /* Create the ring; each member learns its successor from a gp that
   * travels inside a buffer. */
  struct member members[RING] = {{0}};
  nx_gp_t gps[RING];
  for (int i = 0; i < RING; i++) {
    members[i].index = i;
    if ((r = nx_context_create_local(member_init, &members[i], &gps[i])) < 0)
      return fail("nx_context_create_local", r);
  }
  for (int i = 0; i < RING; i++) {
    nx_buffer_t *b;
    const nx_gp_t *next = &gps[(i + 1) % RING];
    nx_rsr_init_name(&b, &gps[i], "set_next", nx_sizeof_gp(next));
    nx_put_gp(b, next);
    nx_rsr_send(b);
  }

  printf("\ncontexts and the protocol an RSR to each takes:\n");
  printf("  %-20s %-18s %s\n", "context", "id", "protocol");
  printf("  %-20s %#-18llx %s\n", "main",
         (unsigned long long)nx_gp_context(&main_gp), nx_gp_protocol(&main_gp));
  for (int i = 0; i < RING; i++) {
    char name[32];
    snprintf(name, sizeof(name), "ring member %d", i);
    printf("  %-20s %#-18llx %s\n", name,
           (unsigned long long)nx_gp_context(&gps[i]), nx_gp_protocol(&gps[i]));
  }

  /* The token goes round LAPS times; the last member wakes main. */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nx_buffer_t *b;
  nx_rsr_init_name(&b, &gps[0], "token", nx_sizeof_int64(1));
  nx_put_int64(b, 0);
  nx_rsr_send(b);
  wait_done(&w);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
  printf("\ntoken: %ld RSR hops around a ring of %d in %.1f ms (%.3f us/hop)\n",
         w.hops, RING, us / 1e3, us / (double)w.hops);
  for (int i = 0; i < RING; i++)
    printf("  member %d passed the token %ld times\n", i, members[i].tokens);

  /* A threaded handler blocks; a later RSR wakes it. */
  send_empty(&gps[1], "sleep");
  wait_done(&w); /* the sleeper runs, and is about to block */
  send_empty(&gps[2], "open");
  wait_done(&w);
  printf("\nthreaded handler: waited in context 1 until an RSR to context 2 "
         "woke it\n");

  nx_stats_t s;
  nx_stats_get(&s);
  printf("\nstats: %llu RSRs sent, %llu handled, %llu dropped, %llu runtime "
         "threads started\n",
         (unsigned long long)s.rsr_sent, (unsigned long long)s.rsr_handled,
         (unsigned long long)(s.drop_no_handler + s.drop_no_context),
         (unsigned long long)s.threads_created);
  for (int i = 0; i < RING; i++) {
    nx_context_destroy(&gps[i]);
    nx_gp_release(&gps[i]);
    nx_gp_release(&members[i].next);
  }
  nx_gp_release(&main_gp);
  return nx_finalize() == 0 ? 0 : 1;
}
