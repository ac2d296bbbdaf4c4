/* pvm_bcast to the other 7 of 8 tasks and pvm_barrier of 8 tasks, timed;
 * the same source is built against nexus-pvm and against the real PVM. */
#include <limits.h>
#include <pvm3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench_args.h"

/* Usage: pvm_coll bcast|barrier [--iters N]
 * Prints "usec <T> iters <N>" (the mean time of one operation at instance
 * 0), or "skip: <reason>" and exits 77 when there is no PVM to run on.
 * bcast: instance 0 broadcasts 8 bytes and waits for the 7 acknowledgements
 * (one pvm_send each), so an operation is complete when everyone has it.
 * barrier: every instance calls pvm_barrier(group, 8). */

#define NTASK 8
#define TAG_B 1
#define TAG_ACK 2
#define TAG_DONE 3

static char group[] = "pvm_coll";

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int run(int bcast, int iters, int inst) {
  int root = pvm_gettid(group, 0);
  double t0 = 0;
  for (int i = -iters / 10; i < iters; i++) {
    if (i == 0)
      t0 = now_us();
    if (!bcast) {
      if (pvm_barrier(group, NTASK) < 0)
        return 1;
      continue;
    }
    double v = i;
    if (inst == 0) {
      pvm_initsend(PvmDataRaw);
      pvm_pkdouble(&v, 1, 1);
      if (pvm_bcast(group, TAG_B) < 0)
        return 1;
      for (int k = 1; k < NTASK; k++)
        if (pvm_recv(-1, TAG_ACK) < 0)
          return 1;
    } else {
      if (pvm_recv(root, TAG_B) < 0 || pvm_upkdouble(&v, 1, 1) < 0)
        return 1;
      pvm_initsend(PvmDataRaw);
      pvm_send(root, TAG_ACK);
    }
  }
  if (inst == 0)
    printf("usec %.3f iters %d\n", (now_us() - t0) / iters, iters);
  return 0;
}

static const char usage[] =
    "usage: pvm_coll bcast|barrier [--iters N]\n"
    "  pvm_bcast (8 B, acknowledged) or pvm_barrier among 8 tasks of one "
    "group\n"
    "  (this program and 7 it spawns); prints the microseconds per "
    "operation.\n"
    "  --iters   operations timed (default 1000, at least 10)\n";

int main(int argc, char **argv) {
  /* The arguments are read before pvm_mytid, so that --help and a bad one
   * need no PVM. */
  int iters = 1000;
  for (int i = 1; i < argc; i++) {
    if (bench_is_help(argv[i]))
      return bench_help(usage);
    if (i == 1 && strcmp(argv[1], "bcast") != 0 &&
        strcmp(argv[1], "barrier") != 0)
      return bench_bad_arg("pvm_coll", argv[1],
                           argv[1][0] == '-' ? NULL : "not bcast or barrier",
                           usage);
    if (i > 1 && strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end != '\0' || argv[i][0] == '\0' || v < 1 || v > 100000000)
        return bench_bad_arg("pvm_coll", argv[i], "not a positive count",
                             usage);
      iters = (int)v;
    } else if (i > 1) {
      return bench_bad_arg("pvm_coll", argv[i], NULL, usage);
    }
  }
  if (argc < 2)
    return bench_bad_arg("pvm_coll", "(none)", "bcast or barrier is needed",
                         usage);
  if (iters < 10)
    iters = 10;
  pvm_setopt(PvmAutoErr, 0);
  if (pvm_mytid() < 0) {
    printf("skip: no PVM to run on\n");
    return 77;
  }
  pvm_setopt(PvmRoute, PvmRouteDirect);
  int master = pvm_parent() == PvmNoParent;
  int tids[NTASK - 1];
  if (master) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
      return 1;
    self[len] = '\0';
    if (pvm_joingroup(group) != 0)
      return 1;
    char iterstr[16];
    snprintf(iterstr, sizeof(iterstr), "%d", iters);
    char *args[] = {argv[1], "--iters", iterstr, NULL};
    if (pvm_spawn(self, args, PvmTaskDefault, "", NTASK - 1, tids) !=
        NTASK - 1) {
      fprintf(stderr, "pvm_coll: pvm_spawn failed\n");
      pvm_exit();
      return 1;
    }
  } else if (pvm_joingroup(group) < 0) {
    pvm_exit();
    return 1;
  }
  int inst = pvm_getinst(group, pvm_mytid());
  pvm_barrier(group, NTASK);
  int rc = run(strcmp(argv[1], "bcast") == 0, iters, inst);
  pvm_barrier(group, NTASK);
  pvm_lvgroup(group);
  pvm_exit();
  return rc;
}
