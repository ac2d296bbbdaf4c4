/* What an nx_mutex costs beside the bare pthread mutex it replaced (the
 * default type), after nx_init as a frontend uses it: instructions per
 * uncontended lock/unlock pair, counted by callgrind (this program runs
 * itself under valgrind once per kind, counting only the loop of pairs,
 * and divides; the loop's own 9 instructions a pair are in both counts);
 * nanoseconds per uncontended pair; and nanoseconds per pair when two
 * threads, pinned to a CPU each, take one mutex around an increment of a
 * shared counter, back to back and with 200 rounds of a busy loop between
 * pairs. The two kinds are timed in turns within each run. Prints the
 * ratios nx / pthread and the goals: the uncontended pair within 1.5x of
 * pthread's, the contended no slower. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: bench_mutex [--quick]; under valgrind it is run as
 * "--count nx|pthread <pairs>". */

#define MAX_RUNS 21
static int runs = 11;
static long solo_pairs = 2000000; /* per timed uncontended run */
static long duel_pairs = 200000;  /* per thread, per timed contended run */
#define COUNT_PAIRS 100000        /* pairs counted under callgrind */
#define NCASES 3

static nx_mutex_t nxm;
static pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;

/* The first two CPUs this process may run on, and how many it may. */
static int cpu_of[2];
static int ncpus;

static void die_nx(const char *what, int rc) {
  bench_die(what, nx_strerror(rc));
}

/* The loops callgrind counts (--toggle-collect names them): n pairs and
 * the loop around them, nothing else. */
__attribute__((noinline)) void count_nx(long n);
__attribute__((noinline)) void count_nx(long n) {
  for (long i = 0; i < n; i++) {
    nx_mutex_lock(&nxm);
    nx_mutex_unlock(&nxm);
  }
}

__attribute__((noinline)) void count_pthread(long n);
__attribute__((noinline)) void count_pthread(long n) {
  for (long i = 0; i < n; i++) {
    pthread_mutex_lock(&pm);
    pthread_mutex_unlock(&pm);
  }
}

/* Nanoseconds per uncontended pair of one kind. */
static double time_solo(int nx) {
  double t0 = bench_now_us();
  if (nx)
    count_nx(solo_pairs);
  else
    count_pthread(solo_pairs);
  return (bench_now_us() - t0) * 1e3 / (double)solo_pairs;
}

/* Two threads that each take the mutex duel_pairs times around an
 * increment of `counter`, started together, with `work` rounds of a busy
 * loop between one pair and the next (0: back to back). */
struct duel {
  int nx;
  int work;
  atomic_int ready; /* also which CPU the next thread takes */
  atomic_int go;
  long counter;
  int err;
};

static void duel_pair(struct duel *d) {
  if (d->nx) {
    int rc = nx_mutex_lock(&nxm);
    if (rc != 0) {
      d->err = rc; /* racy, but only a failed run writes it */
      return;
    }
    d->counter++;
    rc = nx_mutex_unlock(&nxm);
    if (rc != 0)
      d->err = rc;
  } else {
    pthread_mutex_lock(&pm);
    d->counter++;
    pthread_mutex_unlock(&pm);
  }
}

static void *duel_thread(void *arg) {
  struct duel *d = arg;
  /* One CPU each, so that the two run at once when the machine lets
   * them. */
  int me = atomic_fetch_add(&d->ready, 1);
  if (ncpus >= 2)
    bench_pin_to(cpu_of[me]);
  while (!atomic_load(&d->go))
    ;
  for (long i = 0; i < duel_pairs; i++) {
    duel_pair(d);
    for (int k = 0; k < d->work; k++)
      __asm__ volatile("" ::: "memory");
  }
  return NULL;
}

/* Nanoseconds per contended pair of one kind: the time both threads take,
 * over the pairs of both. */
static double time_duel(int nx, int work) {
  struct duel d = {.nx = nx, .work = work};
  nx_thread_t t[2];
  for (int i = 0; i < 2; i++) {
    int rc = nx_thread_create(&t[i], duel_thread, &d);
    if (rc != 0)
      die_nx("nx_thread_create", rc);
  }
  while (atomic_load(&d.ready) != 2)
    ;
  double t0 = bench_now_us();
  atomic_store(&d.go, 1);
  for (int i = 0; i < 2; i++)
    nx_thread_join(t[i], NULL);
  double us = bench_now_us() - t0;
  if (d.err != 0)
    die_nx("nx_mutex_lock/unlock (contended)", d.err);
  if (d.counter != 2 * duel_pairs)
    bench_die("contended run", "the counter lost increments");
  return us * 1e3 / (double)(2 * duel_pairs);
}

/* Runs this program under callgrind counting count_<kind>; returns the
 * instructions it executed, or -1 (why in *why). */
static long count_under_valgrind(const char *kind, const char **why) {
  char out[64], toggle[64], file_opt[96];
  snprintf(out, sizeof(out), "/tmp/bench_mutex.%d.%s", (int)getpid(), kind);
  snprintf(toggle, sizeof(toggle), "--toggle-collect=count_%s", kind);
  snprintf(file_opt, sizeof(file_opt), "--callgrind-out-file=%s", out);
  char pairs[24];
  snprintf(pairs, sizeof(pairs), "%d", COUNT_PAIRS);
  /* Resolved here: under valgrind, /proc/self/exe would name the tool. */
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len < 0) {
    *why = strerror(errno);
    return -1;
  }
  self[len] = '\0';
  pid_t pid = fork();
  if (pid < 0) {
    *why = strerror(errno);
    return -1;
  }
  if (pid == 0) {
    /* valgrind's own chatter would hide the table: to /dev/null. */
    if (freopen("/dev/null", "w", stderr) == NULL)
      _exit(127);
    execlp("valgrind", "valgrind", "--tool=callgrind", "--collect-atstart=no",
           toggle, file_opt, self, "--count", kind, pairs, (char *)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
    *why = "valgrind did not exit";
    return -1;
  }
  if (WEXITSTATUS(status) == 127) {
    *why = "valgrind not found";
    return -1;
  }
  if (WEXITSTATUS(status) != 0) {
    *why = "the run under valgrind failed";
    return -1;
  }
  FILE *f = fopen(out, "r");
  if (f == NULL) {
    *why = "no callgrind output";
    return -1;
  }
  long total = -1;
  char line[256];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "totals:", 7) == 0 || strncmp(line, "summary:", 8) == 0)
      total = strtol(strchr(line, ':') + 1, NULL, 10);
  }
  fclose(f);
  remove(out);
  if (total < 0)
    *why = "no totals in callgrind's output";
  return total;
}

/* The child under valgrind: a few pairs to settle lazy binding, then the
 * counted loop. */
static int count_main(const char *kind, long n) {
  if (strcmp(kind, "nx") == 0) {
    count_nx(0);
    nx_mutex_lock(&nxm);
    nx_mutex_unlock(&nxm);
    count_nx(n);
  } else {
    pthread_mutex_lock(&pm);
    pthread_mutex_unlock(&pm);
    count_pthread(n);
  }
  return 0;
}

static const char usage[] =
    "usage: bench_mutex [--quick]\n"
    "  An nx_mutex beside a bare pthread mutex: instructions per "
    "uncontended\n"
    "  pair (under valgrind, when installed), nanoseconds per pair "
    "uncontended\n"
    "  and contended; prints the ratios and the goals.\n"
    "  --quick   fewer runs and pairs\n"
    "  (--count nx|pthread PAIRS: one count, as run under valgrind)\n";

int main(int argc, char **argv) {
  bench_name = "bench_mutex";
  const char *count_kind = NULL;
  long count_n = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      runs = 3;
      solo_pairs = 500000;
      duel_pairs = 50000;
    } else if (strcmp(argv[i], "--count") == 0 && i + 2 < argc) {
      count_kind = argv[i + 1];
      count_n = strtol(argv[i + 2], NULL, 10);
      i += 2;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_mutex", argv[i], NULL, usage);
    }
  }
  bench_cpus_init();
  for (int c = 0; c < CPU_SETSIZE && ncpus < 2; c++)
    if (CPU_ISSET(c, &bench_all_cpus))
      cpu_of[ncpus++] = c;
  /* Only mutexes here: no module but the in-process one. */
  setenv("NX_PROTOCOLS", "local", 1);
  int rc = nx_init(&argc, &argv);
  if (rc != 0)
    die_nx("nx_init", rc);
  rc = nx_mutex_init(&nxm);
  if (rc != 0)
    die_nx("nx_mutex_init", rc);
  if (count_kind != NULL) {
    int r = count_main(count_kind, count_n);
    nx_finalize();
    return r;
  }

  printf("nx_mutex against a bare pthread mutex (default type), after "
         "nx_init\n");
  const char *why_nx = NULL, *why_pt = NULL;
  long ins_nx = count_under_valgrind("nx", &why_nx);
  long ins_pt = count_under_valgrind("pthread", &why_pt);
  if (ins_nx < 0 || ins_pt < 0) {
    printf("instructions per uncontended pair: SKIPPED (%s)\n",
           why_nx != NULL ? why_nx : why_pt);
  } else {
    double a = (double)ins_nx / COUNT_PAIRS, b = (double)ins_pt / COUNT_PAIRS;
    printf("instructions per uncontended lock/unlock pair (callgrind, %d "
           "pairs, loop included):\n",
           COUNT_PAIRS);
    printf("  nx_mutex %.1f  pthread %.1f  ratio %.2fx\n", a, b, a / b);
  }

  /* The cases: uncontended, then two threads back to back and with some
   * work between their pairs. */
  static const char *const label[NCASES] = {
      "uncontended", "contended, 2 threads, back to back",
      "contended, 2 threads, 200 loops apart"};
  static const int work[NCASES] = {0, 0, 200};
  double v[NCASES][2][MAX_RUNS];
  for (int r = 0; r < runs; r++) {
    for (int c = 0; c < NCASES; c++)
      for (int k = 0; k < 2; k++)
        v[c][k][r] = c == 0 ? time_solo(k == 0) : time_duel(k == 0, work[c]);
  }
  printf("nanoseconds per pair, median of %d runs (best), the two in turns:\n",
         runs);
  printf("  %-40s %15s %15s %8s\n", "case", "nx_mutex", "pthread", "ratio");
  for (int c = 0; c < NCASES; c++) {
    double best[2], med[2];
    for (int k = 0; k < 2; k++)
      med[k] = bench_median(v[c][k], runs, &best[k]);
    printf("  %-40s %6.2f (%6.2f) %6.2f (%6.2f) %7.2fx\n", label[c], med[0],
           best[0], med[1], best[1], med[0] / med[1]);
  }
  printf("goals: uncontended pair within 1.5x of pthread's; contended no "
         "slower than pthread's\n");
  nx_mutex_destroy(&nxm);
  nx_finalize();
  return 0;
}
