/* Process contexts started through PMIx (PMIx_Spawn; docs/pmix.md,
 * "Starting processes"): under Open MPI's mpirun, one process that joined
 * through PMIx creates process contexts on a "pmix" node.
 *
 *   pmix_spawn parent   under mpirun -np 1: nodes "pmix" and
 *                       "pmix:host=NAME" are acquired, bad specs refused;
 *                       a missing program is NX_ENOENT (the job goes on);
 *                       a child gets the environment given to it, answers
 *                       an RSR and is destroyed; a child that exits on its
 *                       own is reported lost (NX_EPEERDEAD, handler 0);
 *                       connections without the token to the port a child
 *                       connects back to are read at once and closed, and
 *                       hold its own up no more than their 2 s; a child
 *                       that never connects back is NX_ETIMEDOUT at the
 *                       create's timeout.
 *   pmix_spawn plain    started by hand: "pmix" nodes are NX_ENOTSUP.
 *   pmix_spawn child    what the parent starts (serves until destroyed).
 *   pmix_spawn exiting  the same, but ends 300 ms after it is ready.
 *   pmix_spawn rogue    a child that first connects to its creator's port
 *                       as others might (NX_CTL_TCP), then serves.
 *   pmix_spawn silent   a child that exits at once, never connecting back.
 * Exit 0 when every check passed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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

/* A rogue child's findings ("" in the others), for its answer. */
static char rogue_report[160];

/* The child: answers "ping" with what it was given and how it started. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply;
  if (nx_get_gp(b, &reply) != 0)
    return;
  const char *v = getenv("NXT_V");
  char text[256] = "";
  nx_mutex_lock(&m);
  snprintf(text, sizeof(text), "NXT_V=%s boot=%s%s", v ? v : "-",
           nx_bootstrap(), rogue_report);
  nx_mutex_unlock(&m);
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &reply, "pong", 512) == 0) {
    if (nx_put_char_array(out, text, sizeof(text)) == 0)
      nx_rsr_send(out);
    else
      nx_buffer_release(out);
  }
  nx_gp_release(&reply);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A connection to the port in NX_CTL_TCP ("<token>:<port>:<ip>,..."): to
 * the first address that answers, or -1. */
static int connect_back(const char *v) {
  char addrs[4096];
  int port = 0;
  if (strlen(v) < 34 || v[32] != ':' ||
      sscanf(v + 33, "%d:%4095s", &port, addrs) != 2)
    return -1;
  char *save = NULL;
  for (char *ip = strtok_r(addrs, ",", &save); ip != NULL;
       ip = strtok_r(NULL, ",", &save)) {
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && inet_pton(AF_INET, ip, &sa.sin_addr) == 1 &&
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
      return fd;
    if (fd >= 0)
      close(fd);
  }
  return -1;
}

/* How many of the n connections the creator closed (end of file) within
 * `ms`, read and discarded as it goes. */
static int closed_within(const int *fds, int n, int ms) {
  int closed[16] = {0}, count = 0;
  uint64_t end = now_ms() + (uint64_t)ms;
  while (count < n) {
    uint64_t now = now_ms();
    if (now >= end)
      break;
    struct pollfd p[16];
    for (int i = 0; i < n; i++)
      p[i] = (struct pollfd){.fd = closed[i] ? -1 : fds[i], .events = POLLIN};
    if (poll(p, (nfds_t)n, (int)(end - now)) <= 0)
      continue;
    for (int i = 0; i < n; i++) {
      char junk[64];
      if (!closed[i] && p[i].revents != 0 &&
          recv(fds[i], junk, sizeof(junk), MSG_DONTWAIT) <= 0) {
        closed[i] = 1;
        count++;
      }
    }
  }
  return count;
}

/* Before its nx_init connects back, the rogue child connects to the same
 * port as others might: 6 connections that send nothing or stop 14 bytes
 * into the token's 20-byte message, one with a wrong token, one that shuts
 * its side at once; each must be closed within 2 s of its accept (4 s
 * given), which a creator reading one connection at a time (2 s each)
 * misses. Two more stall while nx_init's own connection comes: closed once
 * it is the channel, or after their 2 s. The findings go into the answer
 * to "ping" (rogue_report). */
static int before[8], after[2] = {-1, -1};

static void rogue_connect(void) {
  const char *v = getenv("NX_CTL_TCP");
  uint8_t msg[20] = {16, 0, 0, 0};
  for (int i = 0; v != NULL && i < 16; i++)
    if (sscanf(v + 2 * i, "%2hhx", &msg[4 + i]) != 1)
      v = NULL;
  for (int i = 0; i < 8; i++)
    before[i] = v != NULL ? connect_back(v) : -1;
  for (int i = 0; i < 8; i++)
    if (before[i] < 0) {
      snprintf(rogue_report, sizeof(rogue_report),
               " rogue: cannot connect to NX_CTL_TCP");
      return;
    }
  ssize_t w = send(before[1], msg, 14, MSG_NOSIGNAL); /* stalls mid-way */
  msg[4] ^= 0xff;
  w += send(before[2], msg, sizeof(msg), MSG_NOSIGNAL); /* not the token */
  msg[4] ^= 0xff;
  if (w != 14 + (ssize_t)sizeof(msg) || shutdown(before[3], SHUT_WR) != 0) {
    snprintf(rogue_report, sizeof(rogue_report), " rogue: cannot send");
    return;
  }
  int early = closed_within(before, 8, 4000);
  for (int i = 0; i < 8; i++)
    close(before[i]);
  for (int i = 0; i < 2; i++)
    after[i] = connect_back(v);
  if (after[1] >= 0 && send(after[1], msg, 10, MSG_NOSIGNAL) != 10) {
    close(after[1]);
    after[1] = -1;
  }
  snprintf(rogue_report, sizeof(rogue_report), " rogue: %d of 8 closed", early);
}

/* After its nx_init: whether the two that stalled while it connected are
 * closed (at most 3 s, as their own 2 s allow), into rogue_report before
 * the creator can send "ping". */
static void rogue_after(void) {
  int late =
      after[0] >= 0 && after[1] >= 0 ? closed_within(after, 2, 3000) : -1;
  for (int i = 0; i < 2; i++)
    if (after[i] >= 0)
      close(after[i]);
  nx_mutex_lock(&m);
  size_t len = strlen(rogue_report);
  snprintf(rogue_report + len, sizeof(rogue_report) - len,
           ", then %d of 2 closed", late);
  nx_mutex_unlock(&m);
}

static int child(int exiting, int rogue) {
  nx_mutex_init(&m);
  if (rogue)
    rogue_connect();
  if (nx_init(NULL, NULL) != 0)
    return 2;
  if (rogue)
    rogue_after();
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

  /* Connections to the port the child connects back to, from the child
   * itself before its own: each is read at once and closed (within its
   * 2 s, or when the child's own comes), and the create succeeds within
   * its timeout of 10 s. A creator reading one at a time (2 s for each that
   * stalls, 6 of them before the child's own) timed out. */
  char *const argv_rogue[] = {(char *)"pmix_spawn", (char *)"rogue", NULL};
  nx_context_attr_t ten = {NULL, 0, 10000};
  nx_stats_t before, after;
  CHECK(nx_stats_get(&before) == 0);
  if (CHECK(nx_context_create_attr(&node, self, argv_rogue, &ten, &gp) == 0)) {
    /* Of its connections, the one with a wrong token is bad input. */
    CHECK(nx_stats_get(&after) == 0 &&
          after.drop_bad_frame - before.drop_bad_frame == 1);
    nx_buffer_t *b;
    CHECK(nx_rsr_init_name(&b, &gp, "ping", 256) == 0 &&
          nx_put_gp(b, &me) == 0 && nx_rsr_send(b) == 0);
    if (CHECK(wait_answer(2))) {
      nx_mutex_lock(&m);
      CHECK(strcmp(answer, "NXT_V=- boot=creator rogue: 8 of 8 closed, then "
                           "2 of 2 closed") == 0);
      fprintf(stderr, "pmix_spawn: the rogue child answered \"%s\"\n", answer);
      nx_mutex_unlock(&m);
    }
    CHECK(nx_context_destroy(&gp) == 0);
    nx_gp_release(&gp);
  }

  /* A child that exits at once, never connecting back: NX_ETIMEDOUT at
   * the create's timeout, not before and not much later. */
  char *const argv_silent[] = {(char *)"pmix_spawn", (char *)"silent", NULL};
  nx_context_attr_t short_wait = {NULL, 0, 1500};
  uint64_t t0 = now_ms();
  CHECK(nx_context_create_attr(&node, self, argv_silent, &short_wait, &gp) ==
        NX_ETIMEDOUT);
  uint64_t took = now_ms() - t0;
  CHECK(took >= 1500 && took < 10000);
  fprintf(stderr, "pmix_spawn: a child that never connected back: %llu ms\n",
          (unsigned long long)took);

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
    return child(0, 0);
  if (strcmp(mode, "exiting") == 0)
    return child(1, 0);
  if (strcmp(mode, "rogue") == 0)
    return child(0, 1);
  if (strcmp(mode, "silent") == 0)
    return 0;
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
  fprintf(stderr,
          "usage: pmix_spawn parent|plain|child|exiting|rogue|silent\n");
  return 2;
}
