/* The ranks of one MPI job agree on the computation's key (docs/mpi.md,
 * "The job's key"): started by mpirun with no NX_KEY, each rank draws a key
 * of its own, and nx_init makes them all take rank 0's. Run as
 *   mpirun -np N test_job_key MOD      (N >= 2, NX_PROTOCOLS=MOD,mpi,local)
 * where MOD is a module that checks keys (tcp, ofi). Every rank checks:
 *   1. its RSRs to the next rank go over MOD (nx_gp_protocol), not mpi;
 *   2. a ping to the next rank is answered, and the ping from the previous
 *      rank arrives (a rank with another key would be refused: tcp's
 *      handshake fails, ofi drops the sender);
 *   3. nothing was lost or dropped (nx_stats_get) and the error callback
 *      never ran.
 * Each rank prints "rank R: N passed, M failed" and exits 1 on a failure,
 * 77 (on every rank alike) when MOD does not load here, with the reason. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

#define WAIT_S 20
#define WATCHDOG_S 100

static int my_rank = -1;
static int passed, failed;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      passed++;                                                                \
    } else {                                                                   \
      failed++;                                                                \
      fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", my_rank, __FILE__, \
              __LINE__, #cond);                                                \
    }                                                                          \
  } while (0)

static nx_mutex_t m;
static nx_cond_t c;
static int pongs, pings, dones, errors;

static void bump(int *counter) {
  nx_mutex_lock(&m);
  (*counter)++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* Waits until *counter reaches `want`, WAIT_S at most; returns whether it
 * did. */
static int wait_for(const int *counter, int want) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_S;
  nx_mutex_lock(&m);
  while (*counter < want && nx_cond_timedwait(&c, &m, &deadline) == 0)
    ;
  int ok = *counter >= want;
  nx_mutex_unlock(&m);
  return ok;
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t back;
  nx_buffer_t *out;
  if (nx_get_gp(b, &back) != 0)
    return;
  if (nx_rsr_init_name(&out, &back, "pong", 16) == 0)
    nx_rsr_send(out);
  nx_gp_release(&back);
  bump(&pings);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  (void)b;
  bump(&pongs);
}

static void on_done(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  (void)b;
  bump(&dones);
}

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  fprintf(stderr, "rank %d: error callback: %s (context %#llx handler %#x)\n",
          my_rank, nx_strerror(err), (unsigned long long)context,
          (unsigned)handler);
  bump(&errors);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_job_key: watchdog: a rank hung\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) {
  }
  _exit(1);
}

static int module_loaded(const char *name, char *why, size_t why_len) {
  nx_module_info_t info;
  for (int i = 0; i < nx_module_count(); i++)
    if (nx_module_info(i, &info) == 0 && strcmp(info.name, name) == 0) {
      snprintf(why, why_len, "%s", info.reason);
      return info.loaded;
    }
  snprintf(why, why_len, "not built");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -np N test_job_key MOD\n");
    return 2;
  }
  const char *mod = argv[1];
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  unsetenv("NX_KEY"); /* as mpirun starts ranks: no key handed to them */
  int r = nx_init(&argc, &argv);
  if (r != 0) {
    fprintf(stderr, "test_job_key: nx_init: %s\n", nx_strerror(r));
    return 1;
  }
  char why[256];
  if (!module_loaded(mod, why, sizeof(why))) {
    printf("SKIPPED: the %s module does not load here: %s\n", mod, why);
    nx_finalize();
    return 77;
  }
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_error_cb_set(on_error, NULL);
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "done", on_done, NX_HANDLER_NONTHREADED, NULL);
  nx_gp_t *gps = NULL;
  int n = 0;
  r = nx_context_peers(&gps, &n, &my_rank);
  if (r != 0 || n < 2) {
    fprintf(stderr, "test_job_key: nx_context_peers: %s (%d ranks)\n",
            nx_strerror(r), n);
    return 1;
  }
  const nx_gp_t *next = &gps[(my_rank + 1) % n];
  const char *proto = nx_gp_protocol(next);
  CHECK(proto != NULL && strcmp(proto, mod) == 0);

  nx_gp_t me = NX_GP_NULL;
  nx_buffer_t *b;
  CHECK(nx_gp_make(NULL, &me) == 0);
  CHECK(nx_rsr_init_name(&b, next, "ping", 64) == 0 && nx_put_gp(b, &me) == 0 &&
        nx_rsr_send(b) == 0);
  CHECK(wait_for(&pongs, 1));
  CHECK(wait_for(&pings, 1));

  /* Finalize only when every rank has its answer: a rank that ended
   * early would drop a ping still on its way to it. */
  for (int k = 0; k < n; k++)
    if (k != my_rank && nx_rsr_init_name(&b, &gps[k], "done", 16) == 0)
      CHECK(nx_rsr_send(b) == 0);
  CHECK(wait_for(&dones, n - 1));

  nx_stats_t st;
  CHECK(nx_stats_get(&st) == 0);
  CHECK(st.rsr_failed == 0);
  CHECK(st.peers_failed == 0);
  CHECK(st.drop_bad_frame == 0);
  CHECK(st.drop_no_context == 0 && st.drop_no_handler == 0);
  nx_mutex_lock(&m);
  int errs = errors;
  nx_mutex_unlock(&m);
  CHECK(errs == 0);
  printf("rank %d: %s to the next rank; %d passed, %d failed\n", my_rank,
         proto != NULL ? proto : "(none)", passed, failed);
  nx_gp_release(&me);
  for (int k = 0; k < n; k++)
    nx_gp_release(&gps[k]);
  free(gps);
  nx_finalize();
  return failed == 0 ? 0 : 1;
}
