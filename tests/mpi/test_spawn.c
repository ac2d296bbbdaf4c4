/* Tests of process contexts on "mpi" nodes: children started through the
 * mpi module's MPI_Comm_spawn, by a parent started with mpirun -np 1 or as
 * an MPI singleton (without mpirun). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child_pid.h"
#include "nexus.h"

/* Usage:
 *   test_spawn               the parent: bad specs, a missing program, two
 *                            children on "mpi" nodes and one on
 *                            "mpi:host=<this host>", ping-pong with each
 *                            (not over mpi: they are other jobs), destroy,
 *                            no process left; meson runs it as a singleton
 *                            and under mpirun -np 1;
 *   test_spawn --notloaded   with the mpi module left out by NX_PROTOCOLS,
 *                            "mpi" nodes are NX_ENOTSUP;
 *   test_spawn --early       (singleton only) a child that ends before
 *                            MPI_Init: NX_ETIMEDOUT after NX_CREATE_TIMEOUT,
 *                            not a hang, and nx_finalize still returns;
 *   test_spawn --noslots     (singleton only) a spawn Open MPI refuses for
 *                            want of a slot: NX_EAGAIN, not an abort, and
 *                            a local child then works;
 *   test_spawn --serial      (singleton only) SERIAL children on "mpi",
 *                            each created once the one before was
 *                            destroyed: every create succeeds, and each
 *                            child starts after the one before has ended
 *                            (Open MPI 4.1 sometimes hangs a spawn that
 *                            overlaps a child's end: docs/mpi.md);
 *   test_spawn --child [PID] what the parent starts: serves "ping" until
 *                            destroyed; PID is a process that should have
 *                            ended before this one started.
 * Prints "N passed, M failed" and exits non-zero on a failure; a watchdog
 * ends a run that hangs. */

#define WATCHDOG_S 150
#define WAIT_S 60
#define CHILDREN 3
#define SERIAL 5

static const char *who = "parent";
static int passed, failed;

static int check(int ok, const char *what, const char *file, int line) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "%s: %s:%d: CHECK failed: %s\n", who, file, line, what);
  }
  return ok;
}

#define CHECK(cond) check((cond) != 0, #cond, __FILE__, __LINE__)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_spawn: watchdog: hung; aborting\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(3);
}

/* The child. */

/* Whether the process named by --child's PID had ended when this one
 * started: 1 yes, 0 no, -1 none named. */
static int32_t prev_ended = -1;

/* "ping" (threaded: nx_context_peers may wait for the creator's list):
 * gp reply, u32 tag -> "pong": u32 tag, u64 pid, i32 number of peers
 * nx_context_peers gives (the creator: 1; -2 with a rank), i32
 * prev_ended. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t tag = 0;
  nx_buffer_t *o;
  nx_gp_t *gps = NULL;
  int n = 0, rank = 0, child_peers = -1;
  if (nx_context_peers(&gps, &n, &rank) == 0) {
    child_peers = rank == -1 ? n : -2;
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
  }
  if (nx_get_gp(b, &reply) == 0 && nx_get_uint32(b, &tag) == 0 &&
      nx_rsr_init_name(&o, &reply, "pong", 64) == 0) {
    nx_put_uint32(o, tag);
    nx_put_uint64(o, (uint64_t)getpid());
    nx_put_int32(o, child_peers);
    nx_put_int32(o, prev_ended);
    nx_rsr_send(o);
  }
  nx_gp_release(&reply);
}

static int run_child(void) {
  who = "child";
  if (nx_init(NULL, NULL) != 0)
    return 1;
  int r = nx_handler_register(nx_context_self(), "ping", on_ping,
                              NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 1;
}

/* The parent. */

static struct {
  nx_mutex_t m;
  nx_cond_t c;
  long pongs;
  uint32_t tag;
  uint64_t pid;
  int32_t peers;
  int32_t prev_ended;
} in;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  uint32_t tag = 0;
  uint64_t pid = 0;
  int32_t peers = -1, prev = -1;
  nx_get_uint32(b, &tag);
  nx_get_uint64(b, &pid);
  nx_get_int32(b, &peers);
  nx_get_int32(b, &prev);
  nx_mutex_lock(&in.m);
  in.tag = tag;
  in.pid = pid;
  in.peers = peers;
  in.prev_ended = prev;
  in.pongs++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

/* Sends "ping" to `to` and waits for its pong; the child's pid, 0 if none
 * came. */
static uint64_t ping(const nx_gp_t *to, uint32_t tag) {
  nx_gp_t me = NX_GP_NULL;
  nx_buffer_t *b;
  nx_mutex_lock(&in.m);
  long before = in.pongs;
  nx_mutex_unlock(&in.m);
  if (!CHECK(nx_gp_make(NULL, &me) == 0))
    return 0;
  int r = nx_rsr_init_name(&b, to, "ping", 64);
  if (r == 0 && (r = nx_put_gp(b, &me)) == 0 &&
      (r = nx_put_uint32(b, tag)) == 0)
    r = nx_rsr_send(b);
  nx_gp_release(&me);
  if (!CHECK(r == 0)) {
    fprintf(stderr, "parent: ping: %s\n", nx_strerror(r));
    return 0;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_S;
  nx_mutex_lock(&in.m);
  while (in.pongs <= before)
    if (nx_cond_timedwait(&in.c, &in.m, &deadline) == NX_ETIMEDOUT)
      break;
  uint64_t pid = in.pongs > before && in.tag == tag ? in.pid : 0;
  int peers = in.peers;
  nx_mutex_unlock(&in.m);
  CHECK(pid != 0);
  CHECK(peers == 1); /* the child's one peer is its creator */
  return pid;
}

/* Whether process `pid` has ended (gone, or a zombie its launcher has not
 * reaped yet), waiting up to WAIT_S. */
static int ended(uint64_t pid) {
  for (int i = 0; i < WAIT_S * 20; i++) {
    if (nxt_pid_ended((long)pid))
      return 1;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static void bad_specs(void) {
  nx_node_t nodes[2];
  CHECK(nx_nodes_acquire("", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire(":host=a", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:bogus=1", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:host", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:host=", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:host=a,,b", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:host=a,", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi:hostfile=", 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpiX", 1, nodes) == NX_ENOTSUP);
  CHECK(nx_nodes_acquire("nosuchmodule:host=a", 1, nodes) == NX_ENOTSUP);
  char longspec[128];
  snprintf(longspec, sizeof(longspec), "mpi:hostfile=/%0100d", 0);
  CHECK(nx_nodes_acquire(longspec, 1, nodes) == NX_EINVAL);
  CHECK(nx_nodes_acquire("mpi", -1, nodes) == NX_EINVAL);
  /* Accepted, not used: the hosts need not exist until a context is
   * created there. */
  CHECK(nx_nodes_acquire("mpi:host=a,b", 2, nodes) == 0);
  CHECK(nx_nodes_acquire("mpi:hostfile=/tmp/h", 1, nodes) == 0);
}

/* One nx_context_create on a thread of its own. */
struct creation {
  const nx_node_t *node;
  const char *exe;
  char *const *argv;
  nx_gp_t gp;
  int rc;
};

static void *create_main(void *arg) {
  struct creation *c = arg;
  c->rc = nx_context_create(c->node, c->exe, c->argv, &c->gp);
  return NULL;
}

static int run_parent(const char *self) {
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  CHECK(nx_handler_register(nx_context_self(), "pong", on_pong,
                            NX_HANDLER_NONTHREADED, NULL) == 0);
  bad_specs();

  nx_node_t nodes[CHILDREN];
  char host[64] = "localhost", spec[64];
  gethostname(host, sizeof(host) - 1);
  snprintf(spec, sizeof(spec), "mpi:host=%.40s", host);
  CHECK(nx_nodes_acquire("mpi", CHILDREN - 1, nodes) == 0);
  CHECK(nx_nodes_acquire(spec, 1, &nodes[CHILDREN - 1]) == 0);
  CHECK(strcmp(nodes[1].host, "mpi") == 0 && nodes[1].id == 1);

  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_context_create(&nodes[0], "/nonexistent/program", NULL, &gp) ==
        NX_ENOENT);
  CHECK(nx_context_create(&nodes[0], "no-such-program-in-path", NULL, &gp) ==
        NX_ENOENT);

  char *const argv[] = {(char *)self, (char *)"--child", NULL};
  nx_gp_t kids[CHILDREN];
  uint64_t pids[CHILDREN] = {0};
  int made = 0;
  /* All at once, each from a thread of its own (the module spawns one at
   * a time). */
  struct creation cr[CHILDREN];
  pthread_t t[CHILDREN];
  for (int i = 0; i < CHILDREN; i++) {
    cr[i] = (struct creation){&nodes[i], self, argv, NX_GP_NULL, NX_EINVAL};
    if (pthread_create(&t[i], NULL, create_main, &cr[i]) != 0) {
      create_main(&cr[i]); /* no thread to be had: here, then */
      t[i] = pthread_self();
    }
  }
  for (int i = 0; i < CHILDREN; i++) {
    if (!pthread_equal(t[i], pthread_self()))
      pthread_join(t[i], NULL);
    kids[i] = cr[i].gp;
    if (!CHECK(cr[i].rc == 0)) {
      fprintf(stderr, "parent: nx_context_create on %s: %s\n", nodes[i].host,
              nx_strerror(cr[i].rc));
      continue;
    }
    made++;
  }
  for (int i = 0; i < CHILDREN; i++) {
    if (nx_gp_is_null(&kids[i]))
      continue;
    /* Another job: mpi does not reach it, tcp does (NX_PROTOCOLS). */
    const char *proto = nx_gp_protocol(&kids[i]);
    if (!CHECK(proto != NULL && strcmp(proto, "tcp") == 0))
      fprintf(stderr, "parent: child %d over %s\n", i, proto ? proto : "?");
    for (uint32_t k = 1; k <= 3; k++)
      pids[i] = ping(&kids[i], 100 * (uint32_t)i + k);
  }
  CHECK(made == CHILDREN);
  if (made == CHILDREN)
    CHECK(pids[0] != pids[1] && pids[1] != pids[2] && pids[0] != pids[2]);
  for (int i = 0; i < CHILDREN; i++) {
    if (nx_gp_is_null(&kids[i]))
      continue;
    CHECK(nx_context_destroy(&kids[i]) == 0);
    if (pids[i] != 0)
      CHECK(ended(pids[i]));
    /* Destroyed: RSRs to it fail, they do not hang. */
    nx_buffer_t *b;
    int r = nx_rsr_init_name(&b, &kids[i], "ping", 16);
    if (r == 0)
      r = nx_rsr_send(b);
    CHECK(r < 0);
    CHECK(nx_context_destroy(&kids[i]) < 0);
    nx_gp_release(&kids[i]);
  }
  CHECK(nx_finalize() == 0);
  return 0;
}

static int run_notloaded(void) {
  setenv("NX_PROTOCOLS", "tcp,local", 1);
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  nx_node_t node;
  CHECK(nx_nodes_acquire("mpi", 1, &node) == NX_ENOTSUP);
  CHECK(nx_nodes_acquire("mpi:host=a", 1, &node) == NX_ENOTSUP);
  CHECK(nx_nodes_acquire("localhost", 1, &node) == 0);
  CHECK(nx_finalize() == 0);
  /* Before nx_init nothing knows the modules. */
  CHECK(nx_nodes_acquire("mpi", 1, &node) == NX_ENOTINIT);
  return 0;
}

/* Open MPI 4.1 never returns from MPI_Comm_spawn when the child ends
 * before MPI_Init (/bin/false does): the module gives up after
 * NX_CREATE_TIMEOUT. Under mpirun the job would be aborted instead. */
static int run_early(void) {
  setenv("NX_CREATE_TIMEOUT", "3", 1);
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  nx_node_t node;
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_nodes_acquire("mpi", 1, &node) == 0);
  CHECK(nx_context_create(&node, "/bin/false", NULL, &gp) == NX_ETIMEDOUT);
  CHECK(nx_gp_is_null(&gp));
  CHECK(nx_finalize() == 0);
  return 0;
}

/* A spawn Open MPI refuses: with oversubscription off, an
 * "mpi:host=<this host>" node has one slot, which the singleton holds.
 * MPI_Comm_spawn fails, and the module's spawns go through its own
 * MPI_COMM_SELF with MPI_ERRORS_RETURN: NX_EAGAIN, not an abort. Then the
 * process goes on: a child on a local node answers over tcp. */
static int run_noslots(const char *self) {
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "0", 1);
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  CHECK(nx_handler_register(nx_context_self(), "pong", on_pong,
                            NX_HANDLER_NONTHREADED, NULL) == 0);
  char host[64] = "localhost", spec[64];
  gethostname(host, sizeof(host) - 1);
  snprintf(spec, sizeof(spec), "mpi:host=%.40s", host);
  nx_node_t node, local;
  CHECK(nx_nodes_acquire(spec, 1, &node) == 0);
  char *const argv[] = {(char *)self, (char *)"--child", NULL};
  for (int i = 0; i < 2; i++) {
    nx_gp_t gp = NX_GP_NULL;
    int r = nx_context_create(&node, self, argv, &gp);
    if (!CHECK(r == NX_EAGAIN))
      fprintf(stderr, "parent: spawn %d with no slot: %s\n", i, nx_strerror(r));
    CHECK(nx_gp_is_null(&gp));
    if (r == 0) {
      nx_context_destroy(&gp);
      nx_gp_release(&gp);
    }
  }
  CHECK(nx_nodes_acquire("localhost", 1, &local) == 0);
  nx_gp_t kid = NX_GP_NULL;
  if (CHECK(nx_context_create(&local, self, argv, &kid) == 0)) {
    uint64_t pid = ping(&kid, 7);
    CHECK(nx_context_destroy(&kid) == 0);
    if (pid != 0)
      CHECK(ended(pid));
    nx_gp_release(&kid);
  }
  CHECK(nx_finalize() == 0);
  return 0;
}

/* One child after another on "mpi": each create waits until the child
 * destroyed before it has ended (mpi_spawn.c, "Ended children"), so each
 * child finds the one before gone when it starts. */
static int run_serial(const char *self) {
  setenv("NX_CREATE_TIMEOUT", "40", 1);
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  CHECK(nx_handler_register(nx_context_self(), "pong", on_pong,
                            NX_HANDLER_NONTHREADED, NULL) == 0);
  nx_node_t node;
  CHECK(nx_nodes_acquire("mpi", 1, &node) == 0);
  uint64_t prev = 0;
  for (int i = 0; i < SERIAL; i++) {
    char arg[32];
    snprintf(arg, sizeof(arg), "%llu", (unsigned long long)prev);
    char *const argv[] = {(char *)self, (char *)"--child",
                          prev != 0 ? arg : NULL, NULL};
    nx_gp_t kid = NX_GP_NULL;
    int r = nx_context_create(&node, self, argv, &kid);
    if (!CHECK(r == 0)) {
      fprintf(stderr, "parent: child %d: nx_context_create: %s\n", i,
              nx_strerror(r));
      break;
    }
    uint64_t pid = ping(&kid, (uint32_t)i + 1);
    nx_mutex_lock(&in.m);
    int32_t prev_ended = in.prev_ended;
    nx_mutex_unlock(&in.m);
    if (!CHECK(prev_ended == (prev != 0 ? 1 : -1)))
      fprintf(stderr,
              "parent: child %d started before child %d (pid %llu) "
              "ended\n",
              i, i - 1, (unsigned long long)prev);
    CHECK(nx_context_destroy(&kid) == 0);
    nx_gp_release(&kid);
    prev = pid;
  }
  CHECK(nx_finalize() == 0);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  if (strcmp(mode, "--child") == 0) {
    if (argc > 2)
      prev_ended = nxt_pid_ended(strtol(argv[2], NULL, 10)) ? 1 : 0;
    return run_child();
  }
  nx_mutex_init(&in.m);
  nx_cond_init(&in.c);
  int r;
  if (strcmp(mode, "--notloaded") == 0) {
    r = run_notloaded();
  } else if (strcmp(mode, "--early") == 0) {
    r = run_early();
  } else if (strcmp(mode, "--noslots") == 0) {
    r = run_noslots(argv[0]);
  } else if (strcmp(mode, "--serial") == 0) {
    r = run_serial(argv[0]);
  } else if (mode[0] == '\0') {
    r = run_parent(argv[0]);
  } else {
    fprintf(stderr, "usage: test_spawn [--notloaded | --early | --noslots | "
                    "--serial | --child [PID]]\n");
    return 2;
  }
  printf("%s: %d passed, %d failed\n", who, passed, failed);
  return r != 0 ? r : failed > 0;
}
