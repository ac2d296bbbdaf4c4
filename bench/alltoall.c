/* Scaling when processes outnumber cores: every rank of `nxrun -n N` sends M
 * RSRs (8 B, non-threaded handler) to every other rank, then waits for the
 * N-1 times M it is sent, and rank 0 reports the time from the first send
 * to the last rank's "done" and the system-wide RSR rate. With --scale, runs
 * that for N = 2, 4, 8, 16, 32 and each module given (nxrun --protocols
 * MODULE,local), and Open MPI doing the same with MPI_Isend and MPI_Irecv
 * (mpi_alltoall, built next to this program, under mpirun --oversubscribe:
 * shared memory) in the same run; prints the table, and the goals: every
 * module at least as fast as tcp at every N, the best module within 1.5x
 * Open MPI at 16, and the rate at 16 at least half the rate at 2. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static nx_mutex_t m;
static nx_cond_t c;
static long got, want, dones, starts, gos;

static void on_msg(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&m);
  if (++got == want)
    nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

/* Counts one more in `v` (start, go, done) and wakes the waiter. */
static void bump(long *v) {
  nx_mutex_lock(&m);
  (*v)++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static void on_start(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  bump(&starts);
}

static void on_go(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  bump(&gos);
}

static void on_done(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  bump(&dones);
}

static int send_to(nx_gp_t *gp, const char *handler, size_t len) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, gp, handler, len);
  if (r < 0)
    return r;
  if (len > 0) {
    int64_t v = 42;
    nx_put_int64(b, v);
  }
  return nx_rsr_send(b);
}

static void wait_for(long *v, long goal) {
  nx_mutex_lock(&m);
  while (*v < goal)
    nx_cond_wait(&c, &m);
  nx_mutex_unlock(&m);
}

/* One rank. Returns the exit status. */
static int rank_main(int msgs) {
  if (nx_init(NULL, NULL) < 0)
    return 1;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "msg", on_msg, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "start", on_start, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "done", on_done, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "go", on_go, NX_HANDLER_NONTHREADED, NULL);
  nx_gp_t *peers;
  int n, rank;
  if (nx_context_peers(&peers, &n, &rank) < 0) {
    fprintf(stderr, "alltoall: run me under nxrun (or with --scale)\n");
    return 1;
  }
  /* A barrier, as mpi_alltoall's MPI_Barrier: every rank tells rank 0 it
   * is ready to receive and waits for its "go"; rank 0 starts the clock
   * once all are ready, then says "go". No rank sends before the clock
   * runs (they did once, and on an oversubscribed machine a rank 0 that
   * came late to the CPU found much of the stream sent already). */
  nx_mutex_lock(&m);
  want = (long)msgs * (n - 1);
  nx_mutex_unlock(&m);
  int r = 0;
  double t0 = 0;
  if (rank != 0) {
    r = send_to(&peers[0], "start", 0);
    if (r == 0)
      wait_for(&gos, 1);
  } else {
    wait_for(&starts, n - 1);
    t0 = now_s();
    for (int k = 1; k < n && r == 0; k++)
      r = send_to(&peers[k], "go", 0);
  }
  for (int i = 0; i < msgs && r == 0; i++)
    for (int k = 1; k < n && r == 0; k++)
      r = send_to(&peers[(rank + k) % n], "msg", 8);
  if (r < 0) {
    fprintf(stderr, "alltoall: rank %d: send: %s\n", rank, nx_err_name(r));
    return 1;
  }
  wait_for(&got, want);
  if (rank != 0) {
    send_to(&peers[0], "done", 0);
  } else {
    wait_for(&dones, n - 1);
    double t = now_s() - t0;
    printf("%d %.4f %.0f\n", n, t, (double)msgs * n * (n - 1) / t);
  }
  for (int i = 0; i < n; i++)
    nx_gp_release(&peers[i]);
  free(peers);
  nx_finalize();
  return 0;
}

/* Runs `cmd` (an nxrun or mpirun printing "N seconds rate"); returns the
 * seconds, or a negative value. */
static double run_cmd(const char *cmd, double *rate) {
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  int got_n = 0;
  double t = -1, r = 0;
  if (fscanf(p, "%d %lf %lf", &got_n, &t, &r) != 3)
    t = -1;
  if (pclose(p) != 0)
    t = -1;
  *rate = r;
  return t;
}

static double run_one(const char *nxrun, const char *self, const char *mod,
                      int n, int msgs, double *rate) {
  char cmd[8192 + 64];
  snprintf(cmd, sizeof(cmd),
           "'%s' -n %d --protocols %s,local --timeout 120 '%s' --rank %d",
           nxrun, n, mod, self, msgs);
  return run_cmd(cmd, rate);
}

static double run_mpi(const char *prog, int n, int msgs, double *rate) {
  char cmd[4096 + 128];
  snprintf(cmd, sizeof(cmd),
           "mpirun --allow-run-as-root --oversubscribe --timeout 120 -np %d "
           "'%s' %d 2>/dev/null",
           n, prog, msgs);
  return run_cmd(cmd, rate);
}

static const char usage[] =
    "usage: bench_alltoall --scale [--quick] [MODULE...]   (default "
    "modules: tcp ucx ofi)\n"
    "       nxrun -n N bench_alltoall --rank MSGS\n"
    "  --scale   an all-to-all stream among N = 2, 4, 8, 16, 32 process "
    "contexts\n"
    "            over each MODULE, beside Open MPI's (mpi_alltoall), and the "
    "goals\n"
    "  --quick   fewer messages\n"
    "  --rank    one process of a run (started by --scale under nxrun)\n";

int main(int argc, char **argv) {
  int msgs = 2000;
  if (argc > 2 && strcmp(argv[1], "--rank") == 0)
    return rank_main(atoi(argv[2]));
  if (argc > 1 && bench_is_help(argv[1]))
    return bench_help(usage);
  if (argc < 2 || strcmp(argv[1], "--scale") != 0)
    return bench_bad_arg("bench_alltoall", argc < 2 ? "(none)" : argv[1],
                         argc < 2 ? "--scale or --rank is needed" : NULL,
                         usage);
  const char *mods[8] = {0};
  int nmods = 0, quick = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (bench_is_help(argv[i]))
      return bench_help(usage);
    else if (argv[i][0] == '-' || nmods == 8)
      return bench_bad_arg("bench_alltoall", argv[i], NULL, usage);
    else
      mods[nmods++] = argv[i];
  }
  if (nmods == 0) {
    mods[0] = "tcp", mods[1] = "ucx", mods[2] = "ofi";
    nmods = 3;
  }
  if (quick)
    msgs = 200;
  /* nxrun from the build tree this program is in, else on PATH. */
  char nxrun[4096];
  if (bench_beside_self("../nexus/tools/nxrun", nxrun, sizeof(nxrun)) != 0)
    snprintf(nxrun, sizeof(nxrun), "nxrun");
  /* The Open MPI anchor: mpi_alltoall next to this program, and mpirun. */
  char mpi_prog[4096];
  const char *no_mpi = NULL;
  if (bench_beside_self("mpi_alltoall", mpi_prog, sizeof(mpi_prog)) != 0)
    no_mpi = "mpi_alltoall is not built (no Open MPI at configure time)";
  else if (system("command -v mpirun >/dev/null 2>&1") != 0)
    no_mpi = "mpirun is not on PATH";
  const int counts[] = {2, 4, 8, 16, 32};
  const int ncounts = quick ? 4 : 5;
  double t[8][5], rate[8][5], tm[5], ratem[5];
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("all-to-all: every rank sends %d 8 B RSRs to every other rank "
         "(%ld cores); seconds, and RSRs/s system-wide\n",
         msgs, ncpu);
  printf("  %-6s", "ranks");
  for (int j = 0; j < nmods; j++)
    printf(" %22s", mods[j]);
  printf(" %22s\n", no_mpi == NULL ? "Open MPI" : "");
  for (int i = 0; i < ncounts; i++) {
    printf("  %-6d", counts[i]);
    fflush(stdout);
    for (int j = 0; j < nmods; j++) {
      t[j][i] = run_one(nxrun, argv[0], mods[j], counts[i], msgs, &rate[j][i]);
      if (t[j][i] < 0)
        printf(" %22s", "failed");
      else
        printf("  %8.3f s %9.0f/s", t[j][i], rate[j][i]);
      fflush(stdout);
    }
    tm[i] = no_mpi == NULL ? run_mpi(mpi_prog, counts[i], msgs, &ratem[i]) : -1;
    if (no_mpi == NULL && tm[i] < 0)
      printf(" %22s", "failed");
    else if (no_mpi == NULL)
      printf("  %8.3f s %9.0f/s", tm[i], ratem[i]);
    printf("\n");
  }
  if (no_mpi != NULL)
    printf("  Open MPI: skipped: %s\n", no_mpi);
  printf("goals:\n");
  int tcp = -1;
  for (int j = 0; j < nmods; j++)
    if (strcmp(mods[j], "tcp") == 0)
      tcp = j;
  for (int j = 0; j < nmods; j++) {
    if (j == tcp)
      continue;
    int ok = tcp >= 0, measured = 1;
    for (int i = 0; i < ncounts; i++) {
      if (t[j][i] < 0 || (tcp >= 0 && t[tcp][i] < 0))
        measured = 0;
      else if (tcp >= 0 && t[j][i] > t[tcp][i])
        ok = 0;
    }
    printf("  %s at least as fast as tcp at every count: %s\n", mods[j],
           !measured ? "NOT measured"
           : ok      ? "met"
                     : "NOT met");
  }
  if (ncounts >= 4) {
    int best = -1;
    for (int j = 0; j < nmods; j++)
      if (t[j][3] >= 0 && (best < 0 || t[j][3] < t[best][3]))
        best = j;
    if (best < 0 || no_mpi != NULL || tm[3] <= 0) {
      printf("  best module within 1.5x Open MPI at 16 ranks: NOT measured "
             "(%s)\n",
             no_mpi != NULL ? no_mpi
             : best < 0     ? "no module ran"
                            : "mpirun failed");
    } else {
      double r = bench_two_places(t[best][3] / tm[3]);
      printf("  best module (%s) within 1.5x Open MPI at 16 ranks: %.2fx  "
             "%s\n",
             mods[best], r, r <= 1.5 ? "met" : "NOT met");
    }
  }
  if (ncounts >= 4)
    for (int j = 0; j < nmods; j++)
      printf("  %s rate at 16 >= half the rate at 2: %.2f  %s\n", mods[j],
             rate[j][0] > 0 ? rate[j][3] / rate[j][0] : 0.0,
             t[j][3] < 0 || t[j][0] < 0       ? "NOT measured"
             : rate[j][3] >= 0.5 * rate[j][0] ? "met"
                                              : "NOT met");
  return 0;
}
