/* Process contexts started through PMIx (PMIx_Spawn; docs/pmix.md,
 * "Starting processes"): under Open MPI's mpirun, one process that joined
 * through PMIx creates process contexts on a "pmix" node.
 *
 *   pmix_spawn parent   under mpirun -np 1: nodes "pmix" and
 *                       "pmix:host=NAME" are acquired, bad specs refused;
 *                       a missing program is NX_ENOENT (the job goes on);
 *                       a child gets the environment given to it, answers
 *                       an RSR and is destroyed; a child that exits on its
 *                       own is reported lost (NX_EPEERDEAD, handler 0).
 *   pmix_spawn plain    started by hand: "pmix" nodes are NX_ENOTSUP.
 *   pmix_spawn child    what the parent starts (serves until destroyed).
 *   pmix_spawn exiting  the same, but ends 300 ms after it is ready.
 * Exit 0 when every check passed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"

static int failed;

static int check(int ok, const char *what, int line) {
  if (!ok) {
    fprintf(stderr, "pmix_spawn:%d: check failed: %s\n", line, what);
    failed = 1;
  }
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "pmix_spawn: timed out\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(3);
}

/* The parent's view of answers and losses. */
static nx_mutex_t m;
static nx_cond_t c;
static char answer[256];
static int answered;
static uint64_t lost_ctx;
static int lost_err;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  char text[256] = "";
  int r = nx_get_char_array(b, text, sizeof(text));
  text[sizeof(text) - 1] = '\0';
  nx_mutex_lock(&m);
  snprintf(answer, sizeof(answer), "%s", r == 0 ? text : "(unreadable)");
  answered++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (handler != 0)
    return;
  nx_mutex_lock(&m);
  lost_ctx = context;
  lost_err = err;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* The child: answers "ping" with what it was given and how it started. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply;
  if (nx_get_gp(b, &reply) != 0)
    return;
  const char *v = getenv("NXT_V");
  char text[256] = "";
  snprintf(text, sizeof(text), "NXT_V=%s boot=%s", v ? v : "-", nx_bootstrap());
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &reply, "pong", 512) == 0) {
    if (nx_put_char_array(out, text, sizeof(text)) == 0)
      nx_rsr_send(out);
    else
      nx_buffer_release(out);
  }
  nx_gp_release(&reply);
}

static int child(int exiting) {
  if (nx_init(NULL, NULL) != 0)
    return 2;
  nx_handler_register(nx_context_self(), "ping", on_ping,
                      NX_HANDLER_NONTHREADED, NULL);
  if (exiting) {
    if (nx_context_ready() != 0)
      return 4;
    usleep(300 * 1000);
    _exit(0); /* without nx_finalize: its creator must notice */
  }
  int r = nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 5;
}

static int wait_answer(int n) {
  nx_mutex_lock(&m);
  for (int i = 0; i < 200 && answered < n; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    nx_cond_timedwait(&c, &m, &ts);
  }
  int ok = answered >= n;
  nx_mutex_unlock(&m);
  return ok;
}

static int parent(const char *self) {
  CHECK(nx_init(NULL, NULL) == 0);
  CHECK(strcmp(nx_bootstrap(), "pmix") == 0);
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  int h = nx_error_cb_add(on_error, NULL);
  CHECK(h > 0);

  nx_node_t node, named;
  CHECK(nx_nodes_acquire("pmix", 1, &node) == 0);
  char host[64] = "localhost", spec[80];
  gethostname(host, sizeof(host) - 1);
  snprintf(spec, sizeof(spec), "pmix:host=%s", host);
  CHECK(nx_nodes_acquire(spec, 1, &named) == 0);
  CHECK(nx_nodes_acquire("pmix:host=", 1, &named) == NX_EINVAL);
  CHECK(nx_nodes_acquire("pmix:hosts=a", 1, &named) == NX_EINVAL);
  CHECK(nx_nodes_acquire("pmix:host=a,b", 1, &named) == NX_EINVAL);
  CHECK(nx_nodes_acquire(spec, 1, &named) == 0);

  /* A program that is not there: refused here, and the job goes on. */
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_context_create(&node, "/nonexistent/program", NULL, &gp) ==
        NX_ENOENT);
  CHECK(nx_context_create(&node, "no-such-program-in-path", NULL, &gp) ==
        NX_ENOENT);
  nx_context_attr_t only = {NULL, NX_CREATE_ENV_ONLY, 0};
  CHECK(nx_context_create_attr(&node, self, NULL, &only, &gp) == NX_ENOTSUP);

  /* A child with an environment of ours, on the named host. */
  char *const env[] = {(char *)"NXT_V=42", NULL};
  nx_context_attr_t attr = {env, 0, 0};
  char *const argv[] = {(char *)"pmix_spawn", (char *)"child", NULL};
  nx_gp_t me = NX_GP_NULL;
  CHECK(nx_gp_make(NULL, &me) == 0);
  if (CHECK(nx_context_create_attr(&named, self, argv, &attr, &gp) == 0)) {
    nx_buffer_t *b;
    CHECK(nx_rsr_init_name(&b, &gp, "ping", 256) == 0 &&
          nx_put_gp(b, &me) == 0 && nx_rsr_send(b) == 0);
    if (CHECK(wait_answer(1))) {
      nx_mutex_lock(&m);
      CHECK(strcmp(answer, "NXT_V=42 boot=creator") == 0);
      fprintf(stderr, "pmix_spawn: the child answered \"%s\"\n", answer);
      nx_mutex_unlock(&m);
    }
    CHECK(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
  }

  /* A child that ends on its own is reported lost. */
  char *const argv2[] = {(char *)"pmix_spawn", (char *)"exiting", NULL};
  nx_gp_t gone = NX_GP_NULL;
  if (CHECK(nx_context_create(&node, self, argv2, &gone) == 0)) {
    uint64_t prefix = nx_gp_context(&gone) & ~(uint64_t)0xffffffffu;
    nx_mutex_lock(&m);
    for (int i = 0; i < 100 && lost_ctx != prefix; i++) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      nx_cond_timedwait(&c, &m, &ts);
    }
    CHECK(lost_ctx == prefix);
    CHECK(lost_err == NX_EPEERDEAD);
    nx_mutex_unlock(&m);
    nx_context_destroy(&gone); /* already gone: any code, no hang */
    nx_gp_release(&gone);
  }
  nx_gp_release(&me);
  CHECK(nx_error_cb_remove(h) == 0);
  CHECK(nx_finalize() == 0);
  printf("pmix_spawn: %s\n", failed ? "FAILED" : "passed");
  return failed;
}

static int plain(void) {
  CHECK(nx_init(NULL, NULL) == 0);
  nx_node_t node;
  CHECK(strcmp(nx_bootstrap(), "pmix") != 0);
  CHECK(nx_nodes_acquire("pmix", 1, &node) == NX_ENOTSUP);
  CHECK(nx_finalize() == 0);
  printf("pmix_spawn plain: %s\n", failed ? "FAILED" : "passed");
  return failed;
}

int main(int argc, char **argv) {
  signal(SIGALRM, on_alarm);
  alarm(100);
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "child") == 0)
    return child(0);
  if (strcmp(mode, "exiting") == 0)
    return child(1);
  if (strcmp(mode, "plain") == 0)
    return plain();
  if (strcmp(mode, "parent") == 0) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
      return 2;
    self[n] = '\0';
    return parent(self);
  }
  fprintf(stderr, "usage: pmix_spawn parent|plain|child|exiting\n");
  return 2;
}
