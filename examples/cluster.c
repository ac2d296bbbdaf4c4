/* The multi-process demo, run under nxrun: process contexts (two from nxrun,
 * one created on a node), in-process contexts inside each, global pointers
 * passed in buffers, RSRs both ways, and a table of the protocol each pair of
 * contexts uses. The created process loads only tcp (and local), so the table
 * mixes the best shared module (ucx, ofi, ... when built) with tcp. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nexus.h"

#define LOCALS 2 /* in-process contexts besides the initial one */
#define MAX_CTX 16

/* What the initial context of the coordinating process (rank 0) collects. */
static struct {
  nx_mutex_t m;
  nx_cond_t c;
  int nctx;
  nx_gp_t ctx[MAX_CTX];
  char name[MAX_CTX][32];
  char proto[MAX_CTX][MAX_CTX][16];
  int results;
  int quit;
} st;

static nx_gp_t mine[LOCALS + 1]; /* this process's contexts */

static void fail(const char *what, int r) {
  fprintf(stderr, "cluster: %s: %s\n", what, nx_strerror(r));
  exit(1);
}

static void check(const char *what, int r) {
  if (r < 0)
    fail(what, r);
}

/* Names travel as fixed arrays of NAME chars. */
#define NAME 16

static void put_name(nx_buffer_t *b, const char *s) {
  char name[NAME] = {0};
  snprintf(name, sizeof(name), "%s", s);
  check("put", nx_put_char_array(b, name, NAME));
}

static int get_name(nx_buffer_t *b, char name[NAME]) {
  int r = nx_get_char_array(b, name, NAME);
  name[NAME - 1] = '\0';
  return r;
}

/* "probe" (in every context): learn how we reach `target`, then say hello
 * to it, carrying the answer and who wants the result. */
static void on_probe(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t target = NX_GP_NULL, report = NX_GP_NULL;
  int32_t from, to;
  if (nx_get_int32(buf, &from) < 0 || nx_get_int32(buf, &to) < 0 ||
      nx_get_gp(buf, &target) < 0 || nx_get_gp(buf, &report) < 0)
    return;
  const char *p = nx_gp_protocol(&target);
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &target, "hello", 64) == 0) {
    nx_put_int32(out, from);
    nx_put_int32(out, to);
    put_name(out, p != NULL ? p : "none");
    nx_put_gp(out, &report);
    nx_rsr_send(out);
  }
  nx_gp_release(&target);
  nx_gp_release(&report);
}

/* "hello" (in every context): pass the finding on to the coordinator. */
static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t from, to;
  char proto[NAME];
  nx_gp_t report = NX_GP_NULL;
  if (nx_get_int32(buf, &from) < 0 || nx_get_int32(buf, &to) < 0 ||
      get_name(buf, proto) < 0 || nx_get_gp(buf, &report) < 0)
    return;
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &report, "result", 64) == 0) {
    nx_put_int32(out, from);
    nx_put_int32(out, to);
    put_name(out, proto);
    nx_rsr_send(out);
  }
  nx_gp_release(&report);
}

/* "result" (coordinator): record one cell of the table. */
static void on_result(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t from, to;
  char proto[NAME];
  if (nx_get_int32(buf, &from) < 0 || nx_get_int32(buf, &to) < 0 || from < 0 ||
      to < 0 || from >= MAX_CTX || to >= MAX_CTX || get_name(buf, proto) < 0)
    return;
  nx_mutex_lock(&st.m);
  snprintf(st.proto[from][to], sizeof(st.proto[0][0]), "%s", proto);
  st.results++;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* "list" (initial contexts): answer with gps to all our contexts. */
static void on_list(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t report = NX_GP_NULL;
  char tag[NAME];
  if (get_name(buf, tag) < 0 || nx_get_gp(buf, &report) < 0)
    return;
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &report, "listed", 512) == 0) {
    put_name(out, tag);
    nx_put_int32(out, LOCALS + 1);
    for (int i = 0; i <= LOCALS; i++)
      nx_put_gp(out, &mine[i]);
    nx_rsr_send(out);
  }
  nx_gp_release(&report);
}

/* "listed" (coordinator): add another process's contexts. */
static void on_listed(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  char tag[NAME];
  int32_t n = 0;
  if (get_name(buf, tag) < 0 || nx_get_int32(buf, &n) < 0)
    return;
  nx_mutex_lock(&st.m);
  for (int i = 0; i < n && st.nctx < MAX_CTX; i++) {
    if (nx_get_gp(buf, &st.ctx[st.nctx]) < 0)
      break;
    snprintf(st.name[st.nctx], sizeof(st.name[0]), "%s.%d", tag, i);
    st.nctx++;
  }
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&st.m);
  st.quit = 1;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

static int register_common(nx_context_t *ctx, void *arg) {
  (void)arg;
  int r =
      nx_handler_register(ctx, "probe", on_probe, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "hello", on_hello, NX_HANDLER_THREADED, NULL);
  return r;
}

/* Every process: its initial context plus LOCALS in-process ones. */
static void setup_process(void) {
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  nx_context_t *self = nx_context_self();
  check("register", register_common(self, NULL));
  check("register", nx_handler_register(self, "result", on_result,
                                        NX_HANDLER_NONTHREADED, NULL));
  check("register", nx_handler_register(self, "listed", on_listed,
                                        NX_HANDLER_NONTHREADED, NULL));
  check("register", nx_handler_register(self, "quit", on_quit,
                                        NX_HANDLER_NONTHREADED, NULL));
  check("gp", nx_gp_make(NULL, &mine[0]));
  for (int i = 1; i <= LOCALS; i++)
    check("nx_context_create_local",
          nx_context_create_local(register_common, NULL, &mine[i]));
  /* Last: "list" reads mine[], on the thread that runs handlers. Nobody
   * can send it before this process is ready (nx_context_serve or
   * nx_context_peers, after this), but that order runs through other
   * processes, which ThreadSanitizer cannot see; the registration is an
   * order it can (test_multi under TSan saw mine[0] written "after"). */
  check("register", nx_handler_register(self, "list", on_list,
                                        NX_HANDLER_NONTHREADED, NULL));
}

static void wait_until(int *counter, int target) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  nx_mutex_lock(&st.m);
  while (*counter < target)
    if (nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT) {
      nx_mutex_unlock(&st.m);
      fprintf(stderr, "cluster: timed out waiting for answers\n");
      exit(1);
    }
  nx_mutex_unlock(&st.m);
}

static void ask_for_list(const nx_gp_t *who, const char *tag) {
  nx_buffer_t *b;
  check("rsr", nx_rsr_init_name(&b, who, "list", 128));
  put_name(b, tag);
  nx_put_gp(b, &mine[0]);
  check("send", nx_rsr_send(b));
}

static int coordinate(const char *self_exe, nx_gp_t *peers, int npeers) {
  /* A third process context, on a node acquired for it. */
  nx_node_t node;
  check("nx_nodes_acquire", nx_nodes_acquire("localhost", 1, &node));
  /* It loads only tcp and local (see main): everyone must reach it by tcp. */
  char *const wargv[] = {(char *)self_exe, (char *)"worker",
                         (char *)"tcp,local", NULL};
  nx_gp_t worker;
  check("nx_context_create",
        nx_context_create(&node, self_exe, wargv, &worker));

  /* Gather every context's gp, in buffers sent by their processes. */
  int expect = (npeers + 1) * (LOCALS + 1);
  for (int p = 0; p < npeers; p++) {
    char tag[NAME];
    snprintf(tag, sizeof(tag), "p%d", p);
    ask_for_list(&peers[p], tag);
  }
  ask_for_list(&worker, "worker");
  wait_until(&st.nctx, expect);

  /* Every ordered pair: X probes Y; Y reports to us. */
  int n = st.nctx;
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++) {
      if (x == y)
        continue;
      nx_buffer_t *b;
      check("rsr", nx_rsr_init_name(&b, &st.ctx[x], "probe", 256));
      nx_put_int32(b, x);
      nx_put_int32(b, y);
      nx_put_gp(b, &st.ctx[y]);
      nx_put_gp(b, &mine[0]);
      check("send", nx_rsr_send(b));
    }
  wait_until(&st.results, n * (n - 1));

  printf("\nthe protocol an RSR from each context (row) to each other "
         "(column) took:\n%-10s",
         "");
  for (int y = 0; y < n; y++)
    printf(" %-9s", st.name[y]);
  printf("\n");
  for (int x = 0; x < n; x++) {
    printf("%-10s", st.name[x]);
    for (int y = 0; y < n; y++)
      printf(" %-9s", x == y ? "-" : st.proto[x][y]);
    printf("\n");
  }
  int local = 0, remote = 0;
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++)
      if (x != y)
        strcmp(st.proto[x][y], "local") == 0 ? local++ : remote++;
  printf("\n%d pairs in one process used local, %d across processes used "
         "another protocol; %d RSRs in all.\n",
         local, remote, n * (n - 1) * 3 + 2 * (npeers + 1));

  /* What carries the routes from here to each other process underneath. */
  printf("\nfrom p0, underneath:\n");
  for (int y = 0; y < n; y++) {
    char info[256] = "";
    if (y % (LOCALS + 1) != 0 || strncmp(st.name[y], "p0.", 3) == 0)
      continue;
    if (nx_gp_protocol_info(&st.ctx[y], info, sizeof(info)) < 0 &&
        info[0] == '\0')
      snprintf(info, sizeof(info), "?");
    printf("  to %-9s %s\n", st.name[y], info);
  }

  check("nx_context_destroy", nx_context_destroy(&worker));
  nx_gp_release(&worker);
  for (int p = 1; p < npeers; p++) {
    nx_buffer_t *b;
    check("rsr", nx_rsr_init_name(&b, &peers[p], "quit", 0));
    check("send", nx_rsr_send(b));
  }
  for (int i = 0; i < st.nctx; i++)
    nx_gp_release(&st.ctx[i]);
  return 0;
}

int main(int argc, char **argv) {
  /* A worker may be told which modules to load; NX_PROTOCOLS is read by
   * nx_init, before any thread exists. */
  if (argc > 2 && strcmp(argv[1], "worker") == 0)
    setenv("NX_PROTOCOLS", argv[2], 1);
  check("nx_init", nx_init(&argc, &argv));
  setup_process();
  if (argc > 1 && strcmp(argv[1], "worker") == 0) {
    /* A process context made by nx_context_create: serve until destroyed. */
    nx_context_serve();
  } else {
    nx_gp_t *peers;
    int n, rank;
    int r = nx_context_peers(&peers, &n, &rank);
    if (r == NX_ENOENT) {
      fprintf(stderr,
              "cluster: run me under nxrun, e.g. "
              "build/nexus/tools/nxrun -n 2 %s\n",
              argv[0]);
      return 2;
    }
    check("nx_context_peers", r);
    if (rank == 0) {
      printf("cluster demo: %d processes from nxrun, 1 created on a node, "
             "%d in-process contexts in each\n",
             n, LOCALS);
      coordinate(argv[0], peers, n);
    } else {
      wait_until(&st.quit, 1);
    }
    for (int i = 0; i < n; i++)
      nx_gp_release(&peers[i]);
    free(peers);
  }
  for (int i = 0; i <= LOCALS; i++)
    nx_gp_release(&mine[i]);
  return nx_finalize() == 0 ? 0 : 1;
}
