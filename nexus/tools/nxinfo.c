/* nxinfo: says how this process was bootstrapped and lists the protocol
 * modules it finds (loaded ones in order of preference, then those skipped
 * and why), or with --config every NX_* setting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nexus.h"
#include "nxu_opt.h"

static void usage(FILE *f) {
  fprintf(f, "usage: nxinfo [--config]\n"
             "  (no option)  the bootstrap (nxrun, creator, mpi, pmix or "
             "none) and the\n"
             "               protocol modules found: loaded ones in order "
             "of preference,\n"
             "               then the skipped ones with the reason\n"
             "  --config     every NX_* environment variable: its value here, "
             "its default\n"
             "               and its meaning; a malformed value is marked\n"
             "  --help       this text\n");
}

/* Prints the table of settings; returns 1 if a value set here is malformed. */
static int print_config(void) {
  int bad = 0;
  printf("%-20s %-6s %-22s %s\n", "variable", "used by", "value (default)",
         "meaning");
  for (size_t i = 0; i < nxu_opt_count; i++) {
    const struct nxu_opt *o = &nxu_opts[i];
    const char *v = getenv(o->name);
    char why[256] = "";
    int set = v != NULL && v[0] != '\0';
    if (set && nxu_opt_check(o, v, why, sizeof(why)) < 0)
      bad = 1;
    char value[64];
    if (!set)
      snprintf(value, sizeof(value), o->def[0] == '(' ? "%s" : "(%s)",
               o->def); /* defaults that are words come in brackets */
    else if (strcmp(o->name, "NX_KEY") == 0)
      snprintf(value, sizeof(value), "(set, not shown)");
    else
      snprintf(value, sizeof(value), "%s", v);
    printf("%-20s %-6s %-22s %s\n", o->name, o->who, value, o->meaning);
    if (why[0] != '\0')
      printf("%-20s error: %s\n", "", why);
  }
  return bad;
}

static void print_module(const nx_module_info_t *m) {
  if (m->loaded) {
    printf("%-8s %-8s %-5d %-4d %-6u %s\n", m->name, "loaded", m->rank, m->cost,
           m->wire_version, m->path);
    printf("%-8s %-8s backend: %s; descriptor: %s; idle poll: %u ns\n", "", "",
           m->backend[0] ? m->backend : "-", m->descriptor, m->poll_ns);
  } else {
    printf("%-8s %-8s %-5s %-4s %-6s %s: %s\n", m->name, "skipped", "-", "-",
           "-", nx_err_name(m->error), m->reason);
  }
}

int main(int argc, char **argv) {
  int config = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--config") != 0) {
      fprintf(stderr, "nxinfo: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
    config = 1;
  }
  if (config)
    return print_config();
  int r = nx_init(NULL, NULL);
  if (r < 0) {
    fprintf(stderr, "nxinfo: nx_init failed: %s (%s)\n", nx_strerror(r),
            nx_err_name(r));
    return 1;
  }
  nx_node_t node;
  nx_node_self(&node);
  printf("nexus %s on %s\n", nx_version(), node.host);
  printf("bootstrap: %s\n", nx_bootstrap());
  int n = nx_module_count();
  printf("%-8s %-8s %-5s %-4s %-6s %s\n", "module", "status", "rank", "cost",
         "wire", "details");
  /* Loaded modules by rank (the order routes prefer), then the others. */
  for (int rank = 0; rank < n; rank++)
    for (int i = 0; i < n; i++) {
      nx_module_info_t m;
      if (nx_module_info(i, &m) == 0 && m.loaded && m.rank == rank)
        print_module(&m);
    }
  for (int i = 0; i < n; i++) {
    nx_module_info_t m;
    if (nx_module_info(i, &m) == 0 && !m.loaded)
      print_module(&m);
  }
  nx_finalize();
  return 0;
}
