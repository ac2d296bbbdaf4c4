/* The PMIx bootstrap (nexus/src/processes/boot_pmix*.c), run as every
 * process of a job that a PMIx server started (mpirun here) without the mpi
 * module:
 *   test_pmix MOD N [BOOT]   with NX_PROTOCOLS=local,MOD and no NX_KEY;
 * MOD may be SAME/OTHER (ucx/tcp): SAME between processes of one host,
 * OTHER between hosts (the hosts come with the hellos: NX_HOST_ID, or the
 * host name), for a job across hosts (tests/cluster, mode pmix).
 * Each process checks that nx_bootstrap() is BOOT ("pmix" by default;
 * "mpi" when the mpi module is loaded too, which then wins; "nxrun" under
 * nxrun), that nx_context_peers gives the N processes with its own rank
 * (PMIX_RANK, or nxrun's NX_RANK), that every other process
 * is reached over MOD (its own context over local), then sends each
 * process (itself too) a hello whose bytes depend on sender and receiver
 * and answers every hello with an ack: all N hellos and N acks must come,
 * intact, with nothing dropped. A second nx_context_peers (the same list)
 * is the barrier before nx_finalize; then rank 0 runs a program of its own
 * (test_pmix --boot none), which inherits the PMIx variables but must not
 * join the job. libpmix is in a process that joined through PMIx, and in
 * no process started by hand or by nxrun (the bootstrap's plugin is loaded
 * only to join: docs/pmix.md). Exit 0, 1 (a check failed) or 77
 * (MOD does not load here, with the reason).
 *   test_pmix --boot none    started by hand: nx_bootstrap() is "none" and
 *                            nx_context_peers says NX_ENOENT;
 *   test_pmix --boot nxrun   under nxrun (even inside a PMIx job, whose
 *                            variables nxrun's children inherit): "nxrun",
 *                            and nxrun's NX_SIZE peers. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

#define WAIT_S 30
#define HELLO_BYTES 256
#define MAX_PROCS 64
#define HOST_MAX 64

static int my_rank = -1;
static char self_exe[4096];
/* This process's host: NX_HOST_ID where set (hosts made of namespaces),
 * else the host name. */
static char my_host[HOST_MAX];
static int failed;

static int check(int ok, const char *what, int line) {
  if (!ok) {
    fprintf(stderr, "test_pmix rank %d: line %d: expected %s\n", my_rank, line,
            what);
    failed++;
  }
  return ok;
}
#define CHECK(c) check((c) != 0, #c, __LINE__)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_pmix: timed out\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(1);
}

static struct {
  nx_mutex_t m;
  nx_cond_t c;
  int hellos[MAX_PROCS];          /* hellos from each rank, intact */
  uint32_t hello_to[MAX_PROCS];   /* the receiver each hello named */
  char host[MAX_PROCS][HOST_MAX]; /* the host each hello came from */
  int acks[MAX_PROCS];
  int bad;     /* malformed hellos or acks */
  int leaving; /* past the final barrier */
  int errors;
} in;

static void pattern(uint8_t *p, uint32_t from, uint32_t to) {
  for (size_t i = 0; i < HELLO_BYTES; i++)
    p[i] = (uint8_t)(from * 31 + to * 7 + i);
}

/* A hello may come before this process's own nx_context_peers returned
 * (its rank is not known yet): it names its receiver, checked later. */
static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  uint32_t from = UINT32_MAX, to = UINT32_MAX;
  uint8_t got[HELLO_BYTES], want[HELLO_BYTES];
  char host[HOST_MAX];
  int ok = nx_get_uint32(b, &from) == 0 && from < MAX_PROCS &&
           nx_get_uint32(b, &to) == 0 &&
           nx_get_bytes(b, got, sizeof(got)) == 0 &&
           nx_get_bytes(b, host, sizeof(host)) == 0;
  if (ok) {
    pattern(want, from, to);
    ok = memcmp(got, want, sizeof(got)) == 0;
  }
  if (!ok)
    fprintf(stderr, "test_pmix: malformed hello (from %u to %u)\n", from, to);
  nx_mutex_lock(&in.m);
  if (ok) {
    in.hellos[from]++;
    in.hello_to[from] = to;
    memcpy(in.host[from], host, sizeof(host));
    in.host[from][HOST_MAX - 1] = '\0';
  } else {
    in.bad++;
  }
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_ack(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  uint32_t from = UINT32_MAX;
  int ok = nx_get_uint32(b, &from) == 0 && from < MAX_PROCS;
  nx_mutex_lock(&in.m);
  if (ok)
    in.acks[from]++;
  else
    in.bad++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  nx_mutex_lock(&in.m);
  int leaving = in.leaving;
  nx_mutex_unlock(&in.m);
  if (leaving)
    return; /* checked: from the barrier on, the others finalize and go */
  fprintf(stderr,
          "test_pmix rank %d: error callback: %s, context %#llx, "
          "handler %u\n",
          my_rank, nx_strerror(err), (unsigned long long)context, handler);
  nx_mutex_lock(&in.m);
  in.errors++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

/* Waits until every one of the n counters is at least 1; 0 on timeout. */
static int wait_all(const int *counters, int n) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_S;
  nx_mutex_lock(&in.m);
  int k = 0;
  for (;;) {
    while (k < n && counters[k] >= 1)
      k++;
    if (k == n || nx_cond_timedwait(&in.c, &in.m, &deadline) == NX_ETIMEDOUT)
      break;
  }
  nx_mutex_unlock(&in.m);
  return k == n;
}

static int send_to(const nx_gp_t *gp, const char *handler, uint32_t to) {
  nx_buffer_t *b = NULL;
  int r = nx_rsr_init_name(&b, gp, handler, 16 + HELLO_BYTES + HOST_MAX);
  if (r == 0)
    r = nx_put_uint32(b, (uint32_t)my_rank);
  if (r == 0 && strcmp(handler, "hello") == 0) {
    uint8_t p[HELLO_BYTES];
    pattern(p, (uint32_t)my_rank, to);
    r = nx_put_uint32(b, to);
    if (r == 0)
      r = nx_put_bytes(b, p, sizeof(p));
    if (r == 0)
      r = nx_put_bytes(b, my_host, sizeof(my_host));
  }
  if (r == 0)
    return nx_rsr_send(b);
  if (b != NULL)
    nx_buffer_release(b);
  return r;
}

/* Every process is reached over the module expected: local for this
 * process's own context; MOD, or with "SAME/OTHER" SAME within this host
 * and OTHER across hosts (the hosts came with the hellos). Prints this
 * process's row of the table. */
static void check_routes(const nx_gp_t *gps, int n, const char *mod) {
  char same[32], other[32];
  const char *slash = strchr(mod, '/');
  snprintf(same, sizeof(same), "%.*s",
           slash != NULL ? (int)(slash - mod) : (int)strlen(mod), mod);
  snprintf(other, sizeof(other), "%s", slash != NULL ? slash + 1 : mod);
  char row[1024];
  int at = snprintf(row, sizeof(row), "rank %d (%s):", my_rank, my_host);
  for (int k = 0; k < n; k++) {
    const char *p = nx_gp_protocol(&gps[k]);
    nx_mutex_lock(&in.m);
    int here = strcmp(in.host[k], my_host) == 0;
    nx_mutex_unlock(&in.m);
    const char *want = k == my_rank ? "local" : here ? same : other;
    if (!CHECK(p != NULL && strcmp(p, want) == 0))
      fprintf(stderr, "test_pmix rank %d: rank %d is reached over %s, not %s\n",
              my_rank, k, p != NULL ? p : "nothing", want);
    if (at > 0 && (size_t)at < sizeof(row))
      at += snprintf(row + at, sizeof(row) - (size_t)at, " %d:%s", k,
                     p != NULL ? p : "-");
  }
  if (strcmp(same, other) != 0)
    printf("%s\n", row);
}

static void release(nx_gp_t *gps, int n) {
  for (int k = 0; k < n; k++)
    nx_gp_release(&gps[k]);
  free(gps);
}

/* Whether libpmix is mapped into this process (/proc/self/maps). */
static int pmix_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL)
    return -1;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f) != NULL)
    found = strstr(line, "/libpmix.so") != NULL;
  fclose(f);
  return found;
}

/* A process started by hand, or by nxrun: no PMIx exchange. */
static int run_boot(const char *want) {
  CHECK(nx_bootstrap() == NULL);
  if (!CHECK(nx_init(NULL, NULL) == 0))
    return 1;
  const char *boot = nx_bootstrap();
  if (!CHECK(boot != NULL && strcmp(boot, want) == 0))
    fprintf(stderr, "test_pmix: bootstrap %s, not %s\n",
            boot != NULL ? boot : "(null)", want);
  if (!CHECK(pmix_mapped() == 0))
    fprintf(stderr, "test_pmix: libpmix loaded in a process that did not "
                    "join through PMIx\n");
  nx_node_t node;
  CHECK(nx_nodes_acquire("pmix", 1, &node) == NX_ENOTSUP);
  nx_gp_t *gps = NULL;
  int n = 0;
  int r = nx_context_peers(&gps, &n, &my_rank);
  if (strcmp(want, "none") == 0) {
    CHECK(r == NX_ENOENT);
  } else {
    const char *size = getenv("NX_SIZE"), *rank = getenv("NX_RANK");
    CHECK(r == 0 && size != NULL && n == atoi(size) && rank != NULL &&
          my_rank == atoi(rank));
    if (r == 0)
      release(gps, n);
  }
  CHECK(nx_finalize() == 0);
  return failed == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  signal(SIGALRM, on_alarm);
  alarm(2 * WAIT_S + 30);
  if (argc == 3 && strcmp(argv[1], "--boot") == 0)
    return run_boot(argv[2]);
  if (argc != 3 && argc != 4) {
    fprintf(stderr,
            "usage: test_pmix MODULE NPROCS [BOOTSTRAP] | --boot none|nxrun\n");
    return 2;
  }
  if (realpath("/proc/self/exe", self_exe) == NULL)
    return 2;
  const char *host = getenv("NX_HOST_ID");
  if (host != NULL && host[0] != '\0')
    snprintf(my_host, sizeof(my_host), "%s", host);
  else
    gethostname(my_host, sizeof(my_host) - 1);
  const char *mod = argv[1];
  int want_n = atoi(argv[2]);
  const char *want_boot = argc == 4 ? argv[3] : "pmix";
  const char *pr =
      getenv(strcmp(want_boot, "nxrun") == 0 ? "NX_RANK" : "PMIX_RANK");
  unsetenv("NX_KEY"); /* as a launcher starts them: no key handed out */
  nx_mutex_init(&in.m);
  nx_cond_init(&in.c);
  int r = nx_init(NULL, NULL);
  if (r < 0) {
    fprintf(stderr, "test_pmix: nx_init: %s\n", nx_strerror(r));
    return 1;
  }
  int loaded = 0;
  char why[256] = "not built";
  /* Every module MOD names must load ("ucx/tcp": both). */
  char names[64];
  snprintf(names, sizeof(names), "%s", mod);
  char *slash = strchr(names, '/');
  const char *need[2] = {names, slash != NULL ? slash + 1 : names};
  if (slash != NULL)
    *slash = '\0';
  loaded = 1;
  for (int j = 0; j < 2; j++) {
    int found = 0;
    for (int i = 0; i < nx_module_count(); i++) {
      nx_module_info_t mi;
      if (nx_module_info(i, &mi) == 0 && strcmp(mi.name, need[j]) == 0) {
        found = mi.loaded;
        if (!mi.loaded)
          snprintf(why, sizeof(why), "%s", mi.reason);
      }
    }
    if (!found) {
      loaded = 0;
      mod = need[j];
      break;
    }
  }
  if (!loaded) {
    printf("SKIPPED: the %s module does not load here: %s\n", mod, why);
    nx_finalize();
    return 77;
  }
  const char *boot = nx_bootstrap();
  if (!CHECK(boot != NULL && strcmp(boot, want_boot) == 0))
    fprintf(stderr, "test_pmix: bootstrap %s, not %s\n",
            boot != NULL ? boot : "(null)", want_boot);
  if (boot != NULL && strcmp(boot, "pmix") == 0 && !CHECK(pmix_mapped() == 1))
    fprintf(stderr, "test_pmix: joined through PMIx without libpmix\n");
  nx_context_t *self = nx_context_self();
  CHECK(nx_error_cb_set(on_error, NULL) == 0);
  CHECK(nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED,
                            NULL) == 0);
  CHECK(nx_handler_register(self, "ack", on_ack, NX_HANDLER_NONTHREADED,
                            NULL) == 0);

  nx_gp_t *gps = NULL;
  int n = 0;
  r = nx_context_peers(&gps, &n, &my_rank);
  if (!CHECK(r == 0) || !CHECK(n == want_n && n <= MAX_PROCS)) {
    fprintf(stderr, "test_pmix: nx_context_peers: %s, %d processes\n",
            nx_strerror(r), n);
    return 1;
  }
  CHECK(pr != NULL && my_rank == atoi(pr));
  for (int k = 0; k < n; k++)
    CHECK(send_to(&gps[k], "hello", (uint32_t)k) == 0);
  if (CHECK(wait_all(in.hellos, n))) {
    check_routes(gps, n, mod);
    for (int k = 0; k < n; k++)
      CHECK(send_to(&gps[k], "ack", (uint32_t)k) == 0);
  }
  CHECK(wait_all(in.acks, n));

  /* Checked before the barrier: once past it, the others may finalize,
   * and a peer that leaves is reported (NX_EPEERDEAD). */
  nx_mutex_lock(&in.m);
  for (int k = 0; k < n; k++)
    CHECK(in.hellos[k] == 1 && in.hello_to[k] == (uint32_t)my_rank &&
          in.acks[k] == 1);
  CHECK(in.bad == 0 && in.errors == 0);
  nx_mutex_unlock(&in.m);
  nx_stats_t st;
  if (CHECK(nx_stats_get(&st) == 0))
    CHECK(st.drop_bad_frame == 0 && st.drop_no_context == 0 &&
          st.drop_no_handler == 0 && st.rsr_failed == 0 &&
          st.peers_failed == 0 && st.rsr_handled == (uint64_t)(2 * n));
  /* Everyone has its hellos and acks: a second exchange is the barrier. */
  nx_gp_t *again = NULL;
  int n2 = 0, rank2 = -1;
  nx_mutex_lock(&in.m);
  in.leaving = 1;
  nx_mutex_unlock(&in.m);
  r = nx_context_peers(&again, &n2, &rank2);
  CHECK(r == 0 && n2 == n && rank2 == my_rank);
  if (r == 0)
    release(again, n2);
  /* Nodes of the PMIx server (processes started through PMIx_Spawn,
   * tests/pmix/pmix_spawn.c): there when this process joined through PMIx,
   * refused otherwise (under the mpi module's bootstrap). */
  nx_node_t node;
  int want = strcmp(want_boot, "pmix") == 0 ? 0 : NX_ENOTSUP;
  CHECK(nx_nodes_acquire("pmix", 1, &node) == want);
  CHECK(nx_nodes_acquire("pmix:host=a", 1, &node) == want);
  /* A program rank 0 starts inherits the PMIx server's variables but is
   * no process of the job: it starts on its own ("none"). */
  if (my_rank == 0 && strcmp(want_boot, "pmix") == 0) {
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "'%s' --boot none", self_exe);
    CHECK(getenv("PMIX_RANK") != NULL && system(cmd) == 0);
  }
  release(gps, n);
  CHECK(nx_finalize() == 0);
  /* A later nx_init joins the server again, as collectively as the first
   * (docs/pmix.md, "What happens"). */
  if (strcmp(want_boot, "pmix") == 0 && CHECK(nx_init(NULL, NULL) == 0)) {
    boot = nx_bootstrap();
    CHECK(boot != NULL && strcmp(boot, "pmix") == 0);
    r = nx_context_peers(&again, &n2, &rank2);
    CHECK(r == 0 && n2 == n && rank2 == my_rank);
    if (r == 0)
      release(again, n2);
    CHECK(nx_finalize() == 0);
  }
  if (failed == 0 && my_rank == 0)
    printf("test_pmix: %d processes (%s) over %s: every pair exchanged RSRs\n",
           n, want_boot, mod);
  return failed == 0 ? 0 : 1;
}
