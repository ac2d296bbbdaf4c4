/* What every benchmark does with --help and with an argument it does not
 * know: the usage to stdout and exit 0, or a line naming the argument and
 * the usage to stderr and exit 2. Header-only, so that the programs that do
 * not link bench_util (the MPI anchors, the Figure 3 and frontend programs)
 * share it too; each calls it before nx_init, MPI_Init or pvm_mytid, so
 * that --help needs no runtime. tests/bench/check_help.py checks both. */
#ifndef NX_BENCH_ARGS_H
#define NX_BENCH_ARGS_H

#include <stdio.h>
#include <string.h>

/* 1 if `arg` asks for the usage (--help or -h). */
static inline int bench_is_help(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* Prints `usage` to stdout; returns 0, the exit status of --help. */
static inline int bench_help(const char *usage) {
  fputs(usage, stdout);
  return 0;
}

/* Says that `prog` does not know `arg` (or that its value is malformed:
 * `why`, NULL for an unknown argument), then the usage, on stderr; returns
 * 2, the exit status of a bad command line. */
static inline int bench_bad_arg(const char *prog, const char *arg,
                                const char *why, const char *usage) {
  if (why != NULL)
    fprintf(stderr, "%s: %s: %s\n", prog, arg, why);
  else
    fprintf(stderr, "%s: unknown argument '%s'\n", prog, arg);
  fputs(usage, stderr);
  return 2;
}

#endif
