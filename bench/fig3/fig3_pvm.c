/* The PVM side of the Nexus paper's Figure 3: an array of doubles circulated
 * with pvm_send and pvm_recv between a master and the task it spawns, through
 * pvmd or routed directly, XDR-encoded or raw. */
#include <limits.h>
#include <pvm3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../bench_args.h"
#include "fig3.h"

/* Usage: fig3_pvm --route pvmd|direct --encoding xdr|raw [--size N]
 *                 [--iters N] [--warm N] [--reps N] [--poll]
 * Needs a running pvmd (bench/run starts a private one; PVM_TMP and
 * PVM_ROOT name it). The master spawns this program again as the echo task
 * ("--task ROUTE ENCODING"); every message is the count as one int and
 * then the doubles, packed with pvm_pkdouble after pvm_initsend(ENCODING),
 * as the paper's PVM program did. With "direct" both sides set
 * PvmRoute to PvmRouteDirect (a task-to-task TCP connection); with "pvmd"
 * they keep PVM's default, which sends every message through the pvmds.
 * With --poll both sides receive by calling pvm_nrecv until the message is
 * there (a program that polls between pieces of work), not pvm_recv. */

#define MAX_DOUBLES (FIG3_MAX_BYTES / sizeof(double))
#define TAG_PING 1
#define TAG_PONG 2
#define TAG_QUIT 3

static double out_buf[MAX_DOUBLES];
static double in_buf[MAX_DOUBLES];
static int poll_recv; /* --poll */

static void check(int rc, const char *what) {
  if (rc < 0) {
    /* pvm_perror prints PVM's own words for the code. */
    pvm_perror((char *)what);
    pvm_exit();
    fig3_die("%s failed (%d)", what, rc);
  }
}

/* Packs and sends `count` doubles of `src` with tag `tag`. */
static void send_array(int tid, int tag, int encoding, const double *src,
                       int count) {
  check(pvm_initsend(encoding), "pvm_initsend");
  check(pvm_pkint(&count, 1, 1), "pvm_pkint");
  if (count > 0)
    check(pvm_pkdouble((double *)src, count, 1), "pvm_pkdouble");
  check(pvm_send(tid, tag), "pvm_send");
}

/* pvm_recv, or with --poll pvm_nrecv until a message matches. */
static int receive(int tid, int tag) {
  if (!poll_recv)
    return pvm_recv(tid, tag);
  int bufid;
  while ((bufid = pvm_nrecv(tid, tag)) == 0)
    ;
  return bufid;
}

/* Receives a message with tag `tag` from `tid` and unpacks its doubles
 * into `dst`; returns the count. */
static int recv_array(int tid, int tag, double *dst) {
  check(receive(tid, tag), "pvm_recv");
  int count;
  check(pvm_upkint(&count, 1, 1), "pvm_upkint");
  if (count < 0 || (size_t)count > MAX_DOUBLES)
    fig3_die("a message with %d doubles", count);
  if (count > 0)
    check(pvm_upkdouble(dst, count, 1), "pvm_upkdouble");
  return count;
}

struct ping {
  int tid, encoding, count;
};

static void ping_once(void *arg) {
  const struct ping *p = arg;
  send_array(p->tid, TAG_PING, p->encoding, out_buf, p->count);
  recv_array(p->tid, TAG_PONG, in_buf);
}

/* The echo task: answers every ping with the same array until QUIT. */
static int task_main(int direct, int encoding) {
  if (pvm_mytid() < 0)
    return 1;
  int parent = pvm_parent();
  if (parent < 0) {
    pvm_exit();
    return 1;
  }
  if (direct)
    pvm_setopt(PvmRoute, PvmRouteDirect);
  for (;;) {
    int bufid = receive(parent, -1);
    int bytes, tag, src;
    check(bufid, "pvm_recv");
    check(pvm_bufinfo(bufid, &bytes, &tag, &src), "pvm_bufinfo");
    if (tag != TAG_PING)
      break;
    int count;
    check(pvm_upkint(&count, 1, 1), "pvm_upkint");
    if (count < 0 || (size_t)count > MAX_DOUBLES)
      break;
    if (count > 0)
      check(pvm_upkdouble(in_buf, count, 1), "pvm_upkdouble");
    send_array(parent, TAG_PONG, encoding, in_buf, count);
  }
  pvm_exit();
  return 0;
}

static const char usage[] =
    "usage: fig3_pvm --route pvmd|direct --encoding xdr|raw [--poll]\n"
    "                [--size BYTES] [--iters N] [--warm N] [--reps N] "
    "[--max-ms N]\n"
    "  The Figure 3 ping-pong between this PVM task and one it spawns, "
    "through\n"
    "  pvmd or direct, in XDR or raw encoding; prints one result line "
    "(bench/run\n"
    "  reads it). Needs a running pvmd (PVM_TMP).\n"
    "  --poll     receive with pvm_nrecv in a loop\n"
    "  --size     bytes per message, a multiple of 8 (default 8)\n"
    "  --iters    round trips per rep (default 1000)\n"
    "  --warm     round trips before timing (default 100)\n"
    "  --reps     timed reps (default 1)\n"
    "  --max-ms   stop a rep after this many ms (default 1000)\n";

int main(int argc, char **argv) {
  fig3_prog = "fig3_pvm";
  /* PVM's own messages would otherwise go to stdout, which bench/run
   * reads. */
  pvm_setopt(PvmAutoErr, 0);
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "--task") == 0) {
    poll_recv = argc == 5 && strcmp(argv[4], "poll") == 0;
    return task_main(strcmp(argv[2], "direct") == 0,
                     strcmp(argv[3], "raw") == 0 ? PvmDataRaw : PvmDataDefault);
  }
  struct fig3_opts o = {
      .size = 8, .iters = 1000, .warm = 100, .reps = 1, .max_ms = 1000};
  const char *route = NULL, *encoding = NULL;
  for (int i = 1; i < argc; i++) {
    int r = fig3_common_option(argc, argv, &i, &o);
    if (r < 0) {
      fputs(usage, stderr);
      return 2;
    }
    if (r > 0)
      continue;
    if (strcmp(argv[i], "--route") == 0 && i + 1 < argc)
      route = argv[++i];
    else if (strcmp(argv[i], "--encoding") == 0 && i + 1 < argc)
      encoding = argv[++i];
    else if (strcmp(argv[i], "--poll") == 0)
      poll_recv = 1;
    else if (bench_is_help(argv[i]))
      return bench_help(usage);
    else
      return bench_bad_arg(fig3_prog, argv[i], NULL, usage);
  }
  if (route == NULL || encoding == NULL)
    return bench_bad_arg(fig3_prog, route == NULL ? "--route" : "--encoding",
                         "is needed", usage);
  if (strcmp(route, "pvmd") != 0 && strcmp(route, "direct") != 0)
    return bench_bad_arg(fig3_prog, route, "not a route", usage);
  if (strcmp(encoding, "xdr") != 0 && strcmp(encoding, "raw") != 0)
    return bench_bad_arg(fig3_prog, encoding, "not an encoding", usage);
  int direct = strcmp(route, "direct") == 0;
  int enc = strcmp(encoding, "raw") == 0 ? PvmDataRaw : PvmDataDefault;

  if (pvm_mytid() < 0)
    fig3_skip("no pvmd to connect to (PVM_TMP=%s)",
              getenv("PVM_TMP") != NULL ? getenv("PVM_TMP") : "unset");
  if (direct)
    pvm_setopt(PvmRoute, PvmRouteDirect);
  char self_path[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
  if (len <= 0)
    fig3_die("readlink /proc/self/exe failed");
  self_path[len] = '\0';
  char *task_argv[] = {"--task", (char *)route, (char *)encoding,
                       poll_recv ? "poll" : NULL, NULL};
  int tid;
  int n = pvm_spawn(self_path, task_argv, PvmTaskDefault, "", 1, &tid);
  if (n != 1) {
    pvm_exit();
    fig3_die("pvm_spawn %s: %d (tid %d)", self_path, n, tid);
  }

  for (size_t i = 0; i < MAX_DOUBLES; i++)
    out_buf[i] = (double)i * 0.5;
  int count = (int)(o.size / sizeof(double));
  struct ping ping = {tid, enc, count};
  fig3_measure(&o, ping_once, &ping);
  int same = count == 0 ||
             memcmp(in_buf, out_buf, (size_t)count * sizeof(double)) == 0;
  check(pvm_initsend(PvmDataDefault), "pvm_initsend");
  check(pvm_send(tid, TAG_QUIT), "pvm_send");
  pvm_exit();
  if (!same)
    fig3_die("the array came back changed");
  return 0;
}
