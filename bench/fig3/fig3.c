/* Options, clock and output shared by the Figure 3 ping-pong programs. */
#include "fig3.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *fig3_prog = "fig3";

static int parse_count(const char *s, unsigned long long max,
                       unsigned long long *out) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v > max)
    return -1;
  *out = v;
  return 0;
}

int fig3_common_option(int argc, char **argv, int *i, struct fig3_opts *o) {
  static const char *const names[] = {"--size", "--iters", "--warm", "--reps",
                                      "--max-ms"};
  int which = -1;
  for (int k = 0; k < 5; k++)
    if (strcmp(argv[*i], names[k]) == 0)
      which = k;
  if (which < 0)
    return 0;
  unsigned long long v;
  unsigned long long max = which == 0 ? FIG3_MAX_BYTES : 100000000;
  if (*i + 1 >= argc || parse_count(argv[*i + 1], max, &v) < 0 ||
      (which == 0 && v % 8 != 0) || (which != 0 && which != 2 && v == 0)) {
    fprintf(stderr, "%s: %s wants %s\n", fig3_prog, names[which],
            which == 0 ? "a multiple of 8 up to 4 MiB" : "a positive count");
    return -1;
  }
  switch (which) {
  case 0: o->size = (size_t)v; break;
  case 1: o->iters = (int)v; break;
  case 2: o->warm = (int)v; break;
  case 3: o->reps = (int)v; break;
  default: o->max_ms = (int)v; break;
  }
  *i += 1;
  return 1;
}

double fig3_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Makes up to `n` round trips, stopping after `limit_us`; returns how many
 * were made. The clock is read every 16 round trips: reading it costs
 * about 20 ns, a tenth of the fastest round trip bench/run times
 * (rsr/local/nonthreaded, 0.28-0.32 us in docs/performance.md), so every
 * 16th costs about 1 ns per round trip. */
static int loop(void (*round_trip)(void *), void *arg, int n, double limit_us,
                double *elapsed_us) {
  double t0 = fig3_now_us(), t = t0;
  int i = 0;
  while (i < n) {
    round_trip(arg);
    i++;
    if ((i & 15) == 0 && (t = fig3_now_us()) - t0 > limit_us)
      break;
  }
  if ((i & 15) != 0)
    t = fig3_now_us();
  *elapsed_us = t - t0;
  return i;
}

void fig3_measure(const struct fig3_opts *o, void (*round_trip)(void *),
                  void *arg) {
  double limit = o->max_ms * 1e3, elapsed;
  loop(round_trip, arg, o->warm, limit / 4, &elapsed);
  for (int r = 0; r < o->reps; r++) {
    int n = loop(round_trip, arg, o->iters, limit, &elapsed);
    printf("usec %.4f iters %d\n", elapsed / n, n);
    fflush(stdout);
  }
}

void fig3_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("skip: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  exit(FIG3_EXIT_SKIP);
}

void fig3_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", fig3_prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}
