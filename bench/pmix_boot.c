/* Start-up under a PMIx launcher: nx_init + nx_context_peers for N ranks
 * (16 by default) started by mpirun, beside mpirun of a program that only
 * calls PMIx_Init, PMIx_Fence and PMIx_Finalize: the anchor is what any
 * PMIx program pays to start and meet its peers. Each round runs both
 * jobs, alternately; printed are the medians of
 *   job: mpirun's wall-clock time, start to exit (what a user waits), and
 *   in-process: from the first rank's main to the last rank's end of the
 *   exchange (nx_context_peers returned / PMIx_Fence returned), read from
 *   the lines the ranks print,
 * with their ratios (goal: nexus within 1.5x of the anchor, docs/pmix.md).
 *
 * usage: bench_pmix_boot [--np N] [--rounds R] [--protocols LIST]
 *        (LIST: NX_PROTOCOLS of the nexus job, default local,tcp)
 * The ranks are this program again: --rank-nexus, --rank-pmix. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "nexus.h"

/* Wall-clock microseconds: comparable between the ranks of one host. */
static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int rank_nexus(void) {
  double t0 = now_us();
  int r = nx_init(NULL, NULL);
  if (r < 0) {
    fprintf(stderr, "bench_pmix_boot: nx_init: %s\n", nx_strerror(r));
    return 1;
  }
  nx_gp_t *gps = NULL;
  int n = 0, rank = -1;
  r = nx_context_peers(&gps, &n, &rank);
  double t1 = now_us();
  if (r < 0) {
    fprintf(stderr, "bench_pmix_boot: nx_context_peers: %s\n", nx_strerror(r));
    nx_finalize();
    return 1;
  }
  printf("BOOT %.0f %.0f %d %s\n", t0, t1, n, nx_bootstrap());
  for (int k = 0; k < n; k++)
    nx_gp_release(&gps[k]);
  free(gps);
  nx_finalize();
  return 0;
}

static int rank_pmix(void) {
  double t0 = now_us();
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "bench_pmix_boot: PMIx_Init failed\n");
    return 1;
  }
  pmix_status_t s = PMIx_Fence(NULL, 0, NULL, 0);
  double t1 = now_us();
  PMIx_Finalize(NULL, 0);
  if (s != PMIX_SUCCESS) {
    fprintf(stderr, "bench_pmix_boot: PMIx_Fence: %s\n", PMIx_Error_string(s));
    return 1;
  }
  printf("BOOT %.0f %.0f 0 anchor\n", t0, t1);
  return 0;
}

/* Runs one job; *job_us its wall-clock time, *span_us from the earliest
 * rank's start to the latest rank's end. 0, or -1 (said why). */
static int run_job(const char *self, int np, const char *mode,
                   const char *protocols, double *job_us, double *span_us) {
  char cmd[8192];
  snprintf(cmd, sizeof(cmd),
           "NX_PROTOCOLS='%s' mpirun --oversubscribe -np %d '%s' %s 2>&1",
           protocols, np, self, mode);
  double t0 = now_us();
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  char line[1024];
  double first = 0, last = 0;
  int ranks = 0;
  while (fgets(line, sizeof(line), p) != NULL) {
    double a, b;
    int n;
    char boot[32];
    if (sscanf(line, "BOOT %lf %lf %d %31s", &a, &b, &n, boot) == 4) {
      if (strcmp(mode, "--rank-nexus") == 0 &&
          (n != np || strcmp(boot, "pmix") != 0)) {
        fprintf(stderr, "bench_pmix_boot: a rank saw %d peers, bootstrap %s\n",
                n, boot);
        pclose(p);
        return -1;
      }
      first = ranks == 0 || a < first ? a : first;
      last = ranks == 0 || b > last ? b : last;
      ranks++;
    } else {
      fputs(line, stderr);
    }
  }
  int status = pclose(p);
  *job_us = now_us() - t0;
  *span_us = last - first;
  if (status != 0 || ranks != np) {
    fprintf(stderr, "bench_pmix_boot: %s: exit status %d, %d of %d ranks\n",
            mode, status, ranks, np);
    return -1;
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char usage[] =
    "usage: bench_pmix_boot [--np N] [--rounds R] [--protocols LIST]\n"
    "  Start-up under mpirun: nx_init + nx_context_peers for N ranks "
    "(default\n"
    "  16) beside a program that only calls PMIx_Init, PMIx_Fence and\n"
    "  PMIx_Finalize, R rounds (default 5); prints the medians and the "
    "ratios.\n"
    "  --protocols   NX_PROTOCOLS of the nexus job (default local,tcp)\n";

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--rank-nexus") == 0)
    return rank_nexus();
  if (argc == 2 && strcmp(argv[1], "--rank-pmix") == 0)
    return rank_pmix();
  int np = 16, rounds = 5;
  const char *protocols = "local,tcp";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--np") == 0 && i + 1 < argc)
      np = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--protocols") == 0 && i + 1 < argc)
      protocols = argv[++i];
    else if (bench_is_help(argv[i]))
      return bench_help(usage);
    else
      return bench_bad_arg("bench_pmix_boot", argv[i], NULL, usage);
  }
  if (np < 1 || np > 1024 || rounds < 1 || rounds > 100) {
    fprintf(stderr, "bench_pmix_boot: --np 1..1024, --rounds 1..100\n");
    return 2;
  }
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0)
    return 1;
  self[len] = '\0';
  if (getuid() == 0) { /* Open MPI refuses root without both */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  unsetenv("NX_KEY");
  double *jn = calloc((size_t)rounds, sizeof(double));
  double *sn = calloc((size_t)rounds, sizeof(double));
  double *ja = calloc((size_t)rounds, sizeof(double));
  double *sa = calloc((size_t)rounds, sizeof(double));
  if (jn == NULL || sn == NULL || ja == NULL || sa == NULL)
    return 1;
  /* One job of each first, not counted: the page cache and mpirun's own
   * start-up warm up. */
  double j, s;
  if (run_job(self, np, "--rank-pmix", protocols, &j, &s) < 0 ||
      run_job(self, np, "--rank-nexus", protocols, &j, &s) < 0)
    return 1;
  for (int r = 0; r < rounds; r++)
    if (run_job(self, np, "--rank-pmix", protocols, &ja[r], &sa[r]) < 0 ||
        run_job(self, np, "--rank-nexus", protocols, &jn[r], &sn[r]) < 0)
      return 1;
  double mja = median(ja, rounds), msa = median(sa, rounds);
  double mjn = median(jn, rounds), msn = median(sn, rounds);
  printf("start-up of %d ranks under mpirun --oversubscribe, %ld cores, "
         "median of %d rounds\n",
         np, sysconf(_SC_NPROCESSORS_ONLN), rounds);
  printf("%-40s %12s %14s\n", "", "job (ms)", "in-process (ms)");
  printf("%-40s %12.1f %14.1f\n", "PMIx_Init + PMIx_Fence (anchor)", mja / 1e3,
         msa / 1e3);
  char label[64];
  snprintf(label, sizeof(label), "nx_init + nx_context_peers (%s)", protocols);
  printf("%-40s %12.1f %14.1f\n", label, mjn / 1e3, msn / 1e3);
  printf("%-40s %11.2fx %13.2fx\n", "ratio nexus / anchor", mjn / mja,
         msn / msa);
  printf("goal: within 1.5x of the anchor\n");
  free(jn);
  free(sn);
  free(ja);
  free(sa);
  return 0;
}
