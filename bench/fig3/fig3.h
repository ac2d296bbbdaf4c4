/* What the Figure 3 ping-pong programs share: their common options, the clock
 * and the line protocol bench/run reads. */
#ifndef FIG3_H
#define FIG3_H

#include <stddef.h>

/* Every program prints, on stdout, one line "usec <T> iters <N>" per
 * repetition (T: the mean of that repetition's N round trips in
 * microseconds), and nothing else there. A program that cannot measure its
 * system here (a module that did not load, no pvmd) prints "skip: <reason>" on
 * stdout and exits with FIG3_EXIT_SKIP; bench/run then records the row as
 * skipped with the reason. Diagnostics go to stderr. */
#define FIG3_EXIT_SKIP 77

/* The largest payload: 4 MiB, the largest size of the paper's range. */
#define FIG3_MAX_BYTES (4u << 20)

struct fig3_opts {
  size_t size; /* payload bytes per message, a multiple of 8 (doubles) */
  int iters;   /* timed round trips per repetition */
  int warm;    /* untimed round trips before the first repetition */
  int reps;    /* repetitions */
  int max_ms;  /* a repetition (and the warm-up) ends after this long */
};

/* Runs the warm-up and then o->reps repetitions of round_trip(arg),
 * printing one "usec" line per repetition. A repetition makes o->iters
 * round trips or as many as fit in o->max_ms, whichever is fewer, so that
 * a slow system (or a loaded machine) does not stretch the whole run. */
void fig3_measure(const struct fig3_opts *o, void (*round_trip)(void *),
                  void *arg);

/* Parses "--size N", "--iters N", "--warm N", "--reps N" and
 * "--max-ms N" at argv[*i]
 * (advancing *i past the value). Returns 1 if it took the option, 0 if the
 * option is not one of these, -1 (with a message) for a bad value. */
int fig3_common_option(int argc, char **argv, int *i, struct fig3_opts *o);

/* Monotonic time in microseconds. */
double fig3_now_us(void);

/* Prints "skip: <reason>" and exits with FIG3_EXIT_SKIP. */
void fig3_skip(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/* Prints "<prog>: <message>" on stderr and exits with 1. */
void fig3_die(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/* The program name fig3_die uses. */
extern const char *fig3_prog;

#endif /* FIG3_H */
