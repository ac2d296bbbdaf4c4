/* nxtrace: reads the event logs that NX_TRACE=<dir> left in a directory,
 * merges them into one OTF2 archive (DIR/nexus.otf2), prints a summary and,
 * with --png, draws the communication matrix and a timeline through
 * gnuplot (docs/tracing.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nxtrace.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: nxtrace [options] DIR\n"
          "  Reads every *.nxt log in DIR (written under NX_TRACE=DIR), "
          "writes\n"
          "  DIR/nexus.otf2 (one OTF2 archive: read it with otf2-print or "
          "Vampir)\n"
          "  and prints a summary: RSRs per pair of contexts, handler times, "
          "busy\n"
          "  and waiting time per context, totals.\n"
          "  --no-archive     the summary only, no OTF2 archive\n"
          "  --quiet          the archive only, no summary (nxrun runs "
          "nxtrace so)\n"
          "  --png PREFIX     also draw PREFIX-matrix.png (who sent to whom) "
          "and\n"
          "                   PREFIX-timeline.png (handler runs over time); "
          "needs\n"
          "                   gnuplot on PATH\n"
          "  --by rsrs|bytes  colour the matrix by RSR count (default) or "
          "bytes\n"
          "  --help           this text\n"
          "Exit status: 0 done; 1 no readable log, or the archive or a "
          "picture\n"
          "failed; 2 bad usage, or --png without gnuplot.\n");
}

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "nxtrace: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage(stderr);
  return 2;
}

/* Whether a program of that name is on PATH (what posix_spawnp will run). */
static int on_path(const char *prog) {
  const char *path = getenv("PATH");
  if (path == NULL || path[0] == '\0')
    path = "/usr/bin:/bin";
  while (*path) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    char f[4096];
    snprintf(f, sizeof(f), "%.*s/%s", (int)n, n ? path : ".", prog);
    if (access(f, X_OK) == 0)
      return 1;
    path += n + (end != NULL);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *png = NULL;
  int archive = 1, by_bytes = 0, quiet = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--no-archive") == 0) {
      archive = 0;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = 1;
    } else if (strcmp(a, "--png") == 0 || strncmp(a, "--png=", 6) == 0) {
      png = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      if (png == NULL || png[0] == '\0')
        return bad_usage("--png needs a PREFIX", "");
    } else if (strcmp(a, "--by") == 0 || strncmp(a, "--by=", 5) == 0) {
      const char *v = a[4] == '=' ? a + 5 : (i + 1 < argc ? argv[++i] : "");
      if (strcmp(v, "bytes") == 0)
        by_bytes = 1;
      else if (strcmp(v, "rsrs") == 0)
        by_bytes = 0;
      else
        return bad_usage("--by takes rsrs or bytes, not '%s'", v);
    } else if (a[0] == '-' && a[1] != '\0') {
      return bad_usage("unknown option '%s'", a);
    } else if (dir != NULL) {
      return bad_usage("one DIR only ('%s' is a second)", a);
    } else {
      dir = a;
    }
  }
  if (dir == NULL)
    return bad_usage("no DIR given%s", "");
  if (png != NULL && !on_path("gnuplot")) {
    fprintf(stderr, "nxtrace: --png needs gnuplot, which is not on PATH "
                    "(Debian: apt-get install gnuplot-nox)\n");
    return 2;
  }
  struct tr_trace t;
  if (nxi_tr_load(dir, &t) < 0)
    return 1;
  int rc = 0;
  if (archive && nxi_tr_write_otf2(&t, dir) < 0)
    rc = 1;
  if (!quiet)
    nxi_tr_summary(&t, stdout);
  if (png != NULL && nxi_tr_png(&t, png, by_bytes) < 0)
    rc = 1;
  if (archive && rc == 0 && !quiet)
    fprintf(stderr, "nxtrace: wrote %s/nexus.otf2\n", dir);
  nxi_tr_free(&t);
  return rc;
}
