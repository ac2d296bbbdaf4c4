/* NX_TRACE's records of what goes wrong, made to happen in real runs
 * (docs/tracing.md): real process contexts over real modules, their logs
 * read back afterwards with trace_format.h's nxt_decode.
 *
 *   trace_real loss NXTRACE    a child that handled pings is stopped, then
 *                              killed: the creator records one PROC_LOSS
 *                              naming it, the child's log reads up to its
 *                              threads' last writes, and nxtrace reads
 *                              the folder
 *   trace_real wait            a send waits for tcp's full queue to a
 *                              stopped child: WAIT_BEGIN and WAIT_END
 *   trace_real wait-sends      the same run; the SEND records are exactly
 *                              the RSRs nx_rsr_send accepted
 *   trace_real fallback [M2]   tcp's connection to the child is destroyed
 *                              (ss -K) while M2 reaches it too: FALLBACK
 *   trace_real hop [M2]        a member that has M2 only sends to one that
 *                              has tcp only, through a gateway: HOP
 * M2 is ucx or ofi: by default ucx where it loads, else ofi.
 *   trace_real child|member    the process contexts these create
 * Exit 0 when every check held (the failed ones are printed), 77 when the
 * run cannot be made here (the reason is printed). */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "base/trace_format.h"
#include "expect.h"
#include "nexus.h"

#define N_PINGS 2000     /* the loss child's runs: 160 KB of records */
#define SINK_BYTES 65536 /* each RSR that fills tcp's queue */
#define SINK_MAX 20000   /* far more than 1 MiB of queue and sockets */
#define N_HOP 50         /* RSRs through the gateway */
#define TIMEOUT_S 30
#define SKIP 77

static int failures;
#define CHECK NXT_CHECK /* expect.h */

static void skip(const char *why) {
  printf("SKIPPED: %s\n", why);
  fflush(stdout);
  exit(SKIP);
}

/* ---- What the processes exchange ----
 *
 * Counters and gps that handlers set and main waits for, under `m`. */
static nx_mutex_t m;
static nx_cond_t c;
static long pongs, sinks, counted = -1, child_pid, hop_seen;
static long joined;
static int resumed, have_gw, have_peer, lost, lost_err;
static uint64_t lost_ctx;
static nx_gp_t creator, gw_gp, peer_gp, member_gp[2];
static pthread_mutex_t gp_lock = PTHREAD_MUTEX_INITIALIZER;

static void bump(long *v) {
  nx_mutex_lock(&m);
  (*v)++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* Waits until *v >= want (`m` taken here); 0 when the time ran out. Waits
 * in nx_cond_timedwait, which drives progress (NX_PROGRESS=poll). */
static int wait_for(long *v, long want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += TIMEOUT_S;
  nx_mutex_lock(&m);
  while (*v < want && nx_cond_timedwait(&c, &m, &until) != NX_ETIMEDOUT)
    ;
  int ok = *v >= want;
  nx_mutex_unlock(&m);
  return ok;
}

static int wait_flag(int *flag) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += TIMEOUT_S;
  nx_mutex_lock(&m);
  while (!*flag && nx_cond_timedwait(&c, &m, &until) != NX_ETIMEDOUT)
    ;
  int ok = *flag;
  nx_mutex_unlock(&m);
  return ok;
}

/* Sends `handler` with one int64 (or none if `with` is 0) to `to`. */
static int send_int(const nx_gp_t *to, const char *handler, int with, int64_t v,
                    unsigned flags) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, to, handler, 16);
  if (r == 0 && with && (r = nx_put_int64(b, v)) != 0)
    nx_buffer_release(b);
  if (r == 0)
    r = nx_rsr_send_flags(b, flags);
  return r;
}

static int send_gp(const nx_gp_t *to, const char *handler, const nx_gp_t *gp) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, to, handler, nx_sizeof_gp(gp));
  if (r == 0 && (r = nx_put_gp(b, gp)) != 0)
    nx_buffer_release(b);
  if (r == 0)
    r = nx_rsr_send(b);
  return r;
}

/* The creator's gp in a child, set before nx_context_ready tells the
 * creator it is ready (so no RSR of the creator's runs before it). */
static void to_creator(const char *handler, int64_t v) {
  pthread_mutex_lock(&gp_lock);
  send_int(&creator, handler, 1, v, 0);
  pthread_mutex_unlock(&gp_lock);
}

/* The child's handlers. */
static void on_ping(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  to_creator("pong", 0);
}
static void on_pid(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  to_creator("pid", (int64_t)getpid());
}
static void on_sink(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  bump(&sinks);
}
static void on_count(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  nx_mutex_lock(&m);
  long n = sinks;
  nx_mutex_unlock(&m);
  to_creator("count", n);
}

/* The creator's. */
static void on_pong(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  bump(&pongs);
}
static void on_value(nx_context_t *x, void *a, nx_buffer_t *b, long *into) {
  (void)x, (void)a;
  int64_t v;
  if (nx_get_int64(b, &v) != 0)
    return;
  nx_mutex_lock(&m);
  *into = (long)v;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}
static void on_child_pid(nx_context_t *x, void *a, nx_buffer_t *b) {
  on_value(x, a, b, &child_pid);
}
static void on_counted(nx_context_t *x, void *a, nx_buffer_t *b) {
  on_value(x, a, b, &counted);
}
/* Runs while the creator's send waits for the full queue (poll mode:
 * nobody else drives): the stopped child goes on. */
static void on_resume(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  nx_mutex_lock(&m);
  if (child_pid > 0 && kill((pid_t)child_pid, SIGCONT) == 0)
    resumed = 1;
  nx_mutex_unlock(&m);
}
static void on_member(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a;
  int64_t who;
  if (nx_get_int64(b, &who) != 0 || who < 0 || who > 1)
    return;
  nx_mutex_lock(&m);
  if (nx_get_gp(b, &member_gp[who]) == 0)
    joined++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}
static void on_hops(nx_context_t *x, void *a, nx_buffer_t *b) {
  on_value(x, a, b, &hop_seen);
}

/* A process lost: handler 0, a context id whose low half is 0. */
static void on_error(int err, uint64_t ctx, uint32_t handler, void *arg) {
  (void)arg;
  if (handler != 0 || (uint32_t)ctx != 0)
    return;
  nx_mutex_lock(&m);
  lost++;
  lost_err = err;
  lost_ctx = ctx;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* ---- The process contexts ---- */

static int child_start(void) {
  nx_context_t *self = nx_context_self();
  nx_gp_t *peers;
  int n;
  if (nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "pid", on_pid, NX_HANDLER_NONTHREADED, NULL) !=
          0 ||
      nx_handler_register(self, "sink", on_sink, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "count", on_count, NX_HANDLER_NONTHREADED,
                          NULL) != 0)
    return -1;
  pthread_mutex_lock(&gp_lock);
  int ok = nx_context_peers(&peers, &n, NULL) == 0 && n == 1;
  if (ok) {
    creator = peers[0];
    free(peers);
  }
  pthread_mutex_unlock(&gp_lock);
  return ok ? 0 : -1;
}

/* The child of loss, wait and fallback: answers until destroyed. */
static int child_main(void) {
  if (nx_init(NULL, NULL) != 0 || child_start() != 0)
    return 1;
  int r = nx_context_serve();
  nx_gp_release(&creator);
  nx_finalize();
  return r == 0 ? 0 : 1;
}

/* The gateway's new gp, and the peer's, come from the creator. */
static void take_gp(nx_buffer_t *b, nx_gp_t *gp, int *have) {
  nx_mutex_lock(&m);
  if (nx_get_gp(b, gp) == 0)
    *have = 1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}
static void on_gw(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a;
  take_gp(b, &gw_gp, &have_gw);
}
static void on_peer(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a;
  take_gp(b, &peer_gp, &have_peer);
}
static void on_seq(nx_context_t *x, void *a, nx_buffer_t *b) {
  (void)x, (void)a, (void)b;
  nx_mutex_lock(&m);
  long n = ++sinks;
  nx_mutex_unlock(&m);
  if (n == N_HOP)
    to_creator("hops", n);
}

/* A member of the gateway (hop): joins it when the creator names it,
 * answers with a gp to itself made after (which carries the gateway),
 * and, as member 0, sends N_HOP "seq" RSRs to the peer the creator
 * names. */
static int member_main(int who) {
  nx_gp_t me;
  if (nx_init(NULL, NULL) != 0)
    return 1;
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "gw", on_gw, NX_HANDLER_NONTHREADED, NULL) !=
          0 ||
      nx_handler_register(self, "peer", on_peer, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "seq", on_seq, NX_HANDLER_NONTHREADED, NULL) !=
          0 ||
      child_start() != 0 || nx_context_ready() != 0 || !wait_flag(&have_gw) ||
      nx_gateway_use(&gw_gp) != 0 || nx_gp_make(NULL, &me) != 0)
    return 1;
  nx_buffer_t *b;
  pthread_mutex_lock(&gp_lock);
  int r = nx_rsr_init_name(&b, &creator, "member", 16 + nx_sizeof_gp(&me));
  if (r == 0 && (r = nx_put_int64(b, who)) == 0 && (r = nx_put_gp(b, &me)) == 0)
    r = nx_rsr_send(b);
  pthread_mutex_unlock(&gp_lock);
  nx_gp_release(&me);
  if (r != 0)
    return 1;
  if (who == 0) {
    if (!wait_flag(&have_peer))
      return 1;
    for (int i = 0; i < N_HOP && r == 0; i++)
      r = send_int(&peer_gp, "seq", 1, i, 0);
    nx_gp_release(&peer_gp);
  }
  int s = nx_context_serve();
  nx_gp_release(&gw_gp);
  nx_gp_release(&creator);
  nx_finalize();
  return r == 0 && s == 0 ? 0 : 1;
}

/* ---- Reading the logs ---- */

/* A log read whole: its records (names skipped), each one's thread. */
struct log {
  struct nxt_file_hdr h;
  struct nxt_rec *r;
  uint64_t *thread;
  char mod_name[256][16]; /* NXT_DEF_MODULE names by index */
  size_t n, chunks;
  int whole; /* every chunk whole, and nothing after the last */
};

static void log_add(struct log *l, const struct nxt_rec *r, uint64_t thread,
                    size_t *cap) {
  if (l->n == *cap) {
    *cap = *cap ? *cap * 2 : 1024;
    l->r = realloc(l->r, *cap * sizeof(*l->r));
    l->thread = realloc(l->thread, *cap * sizeof(*l->thread));
    if (l->r == NULL || l->thread == NULL)
      abort();
  }
  l->r[l->n] = *r;
  l->thread[l->n++] = thread;
}

/* Reads `path`: 0, or -1 when its header is not a log's. A chunk cut
 * short, or one whose records do not fill it exactly, leaves l->whole 0;
 * the whole chunks before it are read. */
static int read_log(const char *path, struct log *l) {
  memset(l, 0, sizeof(*l));
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return -1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  uint8_t *all = size > 0 ? malloc((size_t)size) : NULL;
  int got = all != NULL && fread(all, 1, (size_t)size, f) == (size_t)size;
  fclose(f);
  if (!got || (size_t)size < sizeof(l->h)) {
    free(all);
    return -1;
  }
  memcpy(&l->h, all, sizeof(l->h));
  if (memcmp(l->h.magic, NXT_MAGIC, 8) != 0 || l->h.version != NXT_VERSION) {
    free(all);
    return -1;
  }
  size_t at = sizeof(l->h), cap = 0;
  l->whole = 1;
  while (at < (size_t)size) {
    struct nxt_chunk ch;
    if ((size_t)size - at < sizeof(ch)) {
      l->whole = 0;
      break;
    }
    memcpy(&ch, all + at, sizeof(ch));
    at += sizeof(ch);
    if (ch.magic != NXT_CHUNK_MAGIC || ch.bytes % 8 != 0 ||
        ch.bytes > (size_t)size - at) {
      l->whole = 0;
      break;
    }
    struct nxt_dstate st = {ch.thread, ch.runs0};
    for (uint32_t k = 0; k < ch.bytes;) {
      struct nxt_rec r;
      size_t len =
          nxt_decode(all + at + k, ch.bytes - k, 0, l->h.proc_id, &st, &r);
      if (len == 0) {
        l->whole = 0;
        break;
      }
      if (r.type == NXT_DEF_MODULE)
        snprintf(l->mod_name[r.module], sizeof(l->mod_name[0]), "%.*s",
                 (int)r.bytes, (const char *)all + at + k + sizeof(r));
      if (r.type != NXT_CLOCK && r.type < NXT_DEF_HANDLER)
        r.t = nxt_ns(&ch, r.t);
      log_add(l, &r, ch.thread, &cap);
      k += (uint32_t)len;
    }
    if (!l->whole)
      break;
    at += ch.bytes;
    l->chunks++;
  }
  free(all);
  return 0;
}

static void free_log(struct log *l) {
  free(l->r);
  free(l->thread);
}

/* The logs of the folder; each must be whole (even a killed process's:
 * test_loss stops it first). */
#define MAX_LOGS 8
static size_t read_logs(const char *dir, struct log *logs) {
  size_t n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1024];
  while (d != NULL && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 4, ".nxt") != 0)
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (n == MAX_LOGS || read_log(path, &logs[n]) != 0) {
      CHECK(0, "%s: not a log", path);
      continue;
    }
    CHECK(logs[n].whole, "%s: a chunk cut short after %zu whole ones", path,
          logs[n].chunks);
    n++;
  }
  if (d != NULL)
    closedir(d);
  return n;
}

static struct log *log_of(struct log *logs, size_t n, uint64_t ctx) {
  for (size_t i = 0; i < n; i++)
    if (logs[i].h.proc_id == (uint32_t)(ctx >> 32))
      return &logs[i];
  return NULL;
}

/* Records of `type` (with `handler` if not 0) in `l`. */
static size_t count(const struct log *l, uint8_t type, uint32_t handler) {
  size_t k = 0;
  for (size_t i = 0; i < l->n; i++)
    k += l->r[i].type == type && (handler == 0 || l->r[i].handler == handler);
  return k;
}

static const char *mod_name(const struct log *l, uint8_t module) {
  return module == 0xff ? "(none)" : l->mod_name[module];
}

static int rm_one(const char *p, const struct stat *s, int flag,
                  struct FTW *f) {
  (void)s, (void)flag, (void)f;
  return remove(p);
}
static void rm_tree(const char *dir) {
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- The creator's side ---- */

static char dir[512];

static void make_dir(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof(dir), "%s/nx-trace-real-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  setenv("NX_TRACE", dir, 1);
}

static void creator_init(void) {
  int r = nx_init(NULL, NULL);
  if (r != 0) {
    fprintf(stderr, "nx_init: %s\n", nx_strerror(r));
    exit(1);
  }
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "pid", on_child_pid, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "count", on_counted, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "resume", on_resume, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "member", on_member, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "hops", on_hops, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_error_cb_set(on_error, NULL) != 0) {
    fprintf(stderr, "registering the handlers failed\n");
    exit(1);
  }
}

/* Whether module `name` loaded here. */
static int loaded(const char *name) {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t mi;
    if (nx_module_info(i, &mi) == 0 && strcmp(mi.name, name) == 0)
      return mi.loaded;
  }
  return 0;
}

/* The module besides tcp for fallback and hop: `want` if given, else ucx,
 * else ofi (TSan builds have no ucx), whichever loads with tcp here;
 * skipped (77) when none does. Probed before NX_TRACE is set: no log. */
static const char *second_module(const char *want) {
  static char protos[64];
  const char *names[] = {"ucx", "ofi"};
  for (int i = 0; i < 2; i++) {
    if (want != NULL && strcmp(want, names[i]) != 0)
      continue;
    snprintf(protos, sizeof(protos), "tcp,%s,local", names[i]);
    setenv("NX_PROTOCOLS", protos, 1);
    if (nx_init(NULL, NULL) != 0)
      continue;
    int ok = loaded("tcp") && loaded(names[i]);
    nx_finalize();
    if (ok)
      return names[i];
  }
  skip(want != NULL ? "tcp and that module do not both load here"
                    : "tcp does not load here with ucx or ofi");
  return NULL;
}

/* Starts `self` ROLE as a process context on this host, with `env`. */
static int create(const char *self, const char *role, char *const *env,
                  nx_gp_t *gp) {
  nx_node_t node;
  int r = nx_nodes_acquire("localhost", 1, &node);
  char *argv[] = {(char *)self, (char *)role, NULL};
  nx_context_attr_t attr = {env, 0, 0};
  if (r == 0) {
    r = nx_context_create_attr(&node, self, argv, &attr, gp);
    nx_node_release(&node);
  }
  if (r != 0)
    fprintf(stderr, "creating %s: %s\n", role, nx_strerror(r));
  return r;
}

/* The child's pid, which it tells (child_pid, 0 if it did not). */
static long ask_pid(const nx_gp_t *child) {
  CHECK(send_int(child, "pid", 0, 0, 0) == 0, "asking the child's pid");
  wait_for(&child_pid, 1);
  return child_pid;
}

/* The state letter of /proc/PID/task/TID/stat. */
static char task_state(long pid, const char *tid) {
  char path[320], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/task/%s/stat", pid, tid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return '?';
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* after the command's name */
  return p != NULL && p[1] == ' ' ? p[2] : '?';
}

/* Stops process `pid` and waits until every thread of it is stopped
 * (none is in the middle of a write then: a stop waits for the system
 * call). Returns 1, or 0 after TIMEOUT_S. */
static int stop_all(long pid) {
  if (kill((pid_t)pid, SIGSTOP) != 0)
    return 0;
  for (int tries = 0; tries < TIMEOUT_S * 1000; tries++) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (d == NULL)
      return 0;
    int all = 1, any = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (e->d_name[0] != '.') {
        any = 1;
        all &= task_state(pid, e->d_name) == 'T';
      }
    closedir(d);
    if (any && all)
      return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

/* Runs `nxtrace DIR`; its exit status, its summary's "losses" and
 * "truncated chunks" rows in *losses and *truncated (-1: missing). */
static int run_nxtrace(const char *nxtrace, long *losses, long *truncated) {
  char cmd[2048], line[512];
  snprintf(cmd, sizeof(cmd), "'%s' '%s'", nxtrace, dir);
  *losses = *truncated = -1;
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  while (fgets(line, sizeof(line), p) != NULL) {
    fputs(line, stdout);
    sscanf(line, " losses %ld", losses);
    sscanf(line, " truncated chunks %ld", truncated);
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* loss: a child that handled N_PINGS pings is stopped, then killed. */
static int test_loss(const char *self, const char *nxtrace) {
  make_dir();
  creator_init();
  nx_gp_t child;
  if (create(self, "child", NULL, &child) != 0)
    return 1;
  uint64_t me = nx_context_id(nx_context_self()), child_id = child.context;
  for (int i = 0; i < N_PINGS; i++)
    CHECK(send_int(&child, "ping", 0, 0, 0) == 0, "ping %d", i);
  CHECK(wait_for(&pongs, N_PINGS), "%ld of %d pongs", pongs, N_PINGS);
  long pid = ask_pid(&child);
  CHECK(pid > 0, "the child did not say its pid");
  /* Stopped first, so that the kill finds no thread in a write: then
   * its log holds whole chunks only, as docs/tracing.md says it does. */
  int stopped = pid > 0 && stop_all(pid);
  CHECK(stopped, "child %ld: not every thread stopped", pid);
  if (pid > 0)
    kill((pid_t)pid, SIGKILL);
  int heard = wait_flag(&lost);
  CHECK(heard && lost_ctx == (child_id & ~0xffffffffull),
        "the loss of the child was not reported (%d reports, last %#llx)", lost,
        (unsigned long long)lost_ctx);
  int err = lost_err;
  nx_gp_release(&child);
  CHECK(nx_finalize() == 0, "nx_finalize");

  struct log logs[MAX_LOGS];
  size_t n = read_logs(dir, logs);
  struct log *mine = log_of(logs, n, me), *its = log_of(logs, n, child_id);
  CHECK(n == 2 && mine != NULL && its != NULL,
        "%zu logs, not this process's "
        "and the child's",
        n);
  if (mine != NULL) {
    size_t k = count(mine, NXT_PROC_LOSS, 0);
    CHECK(k == 1, "%zu PROC_LOSS records, not 1", k);
    for (size_t i = 0; i < mine->n; i++) {
      const struct nxt_rec *r = &mine->r[i];
      if (r->type != NXT_PROC_LOSS)
        continue;
      CHECK(r->peer >> 32 == child_id >> 32 && r->ctx == 0,
            "PROC_LOSS names process %#llx (context %#llx), not the "
            "child's %#llx",
            (unsigned long long)(r->peer >> 32), (unsigned long long)r->ctx,
            (unsigned long long)(child_id >> 32));
      CHECK((int)r->aux == -err && err < 0,
            "PROC_LOSS says error %u, the error callback heard %d (%s)", r->aux,
            err, nx_strerror(err));
    }
    CHECK(count(mine, NXT_FINALIZE, 0) == 1, "this process's log has no "
                                             "FINALIZE");
  }
  if (its != NULL) {
    /* Killed: what each thread wrote is there, whole; the rest is lost.
     * Its N_PINGS runs made 160 KB of records on at most three threads
     * that drive (the progress thread, the one in nx_context_serve, a
     * waiter): some buffer of 16 KiB filled and was written. */
    uint32_t ping = nx_handler_id("ping");
    size_t runs = 0;
    for (size_t i = 0; i < its->n; i++) {
      const struct nxt_rec *r = &its->r[i];
      if (r->type != NXT_BEGIN || r->handler != ping)
        continue;
      runs++;
      CHECK(r->ctx == child_id && r->peer == me,
            "a ping run in %#llx from %#llx", (unsigned long long)r->ctx,
            (unsigned long long)r->peer);
    }
    CHECK(its->chunks >= 1 && runs >= 1 && runs <= N_PINGS,
          "the dead child's log: %zu chunks, %zu of its %d ping runs",
          its->chunks, runs, N_PINGS);
    CHECK(count(its, NXT_FINALIZE, 0) == 0, "a killed child finalized?");
    /* Names are written as they are made: a dead process's log names its
     * handlers and modules. */
    int tcp_named = 0;
    for (int k = 0; k < 255; k++)
      tcp_named |= strcmp(its->mod_name[k], "tcp") == 0;
    CHECK(count(its, NXT_DEF_HANDLER, ping) == 1 && tcp_named,
          "the dead child's log does not name its handler \"ping\" (%zu "
          "names) or its module tcp (%d)",
          count(its, NXT_DEF_HANDLER, ping), tcp_named);
    CHECK(its->h.pid == (uint64_t)pid,
          "the child's log names pid %llu, not %ld",
          (unsigned long long)its->h.pid, pid);
    printf("trace_real loss: the dead child's log has %zu chunks, %zu of "
           "%d ping runs; the loss: %s\n",
           its->chunks, runs, N_PINGS, nx_strerror(err));
  }
  for (size_t i = 0; i < n; i++)
    free_log(&logs[i]);
  /* nxtrace reads the folder: the summary counts the one loss, and no
   * chunk cut short. */
  long losses, truncated;
  int st = run_nxtrace(nxtrace, &losses, &truncated);
  CHECK(st == 0, "nxtrace %s exited %d", dir, st);
  CHECK(losses == 1 && truncated == 0,
        "nxtrace's summary: losses %ld (1), truncated chunks %ld (0)", losses,
        truncated);
  rm_tree(dir);
  return failures != 0;
}

/* The child answers a ping, and is reached over tcp. */
static void answers_over_tcp(const nx_gp_t *child) {
  CHECK(send_int(child, "ping", 0, 0, 0) == 0 && wait_for(&pongs, 1),
        "the child did not answer");
  const char *via = nx_gp_protocol(child);
  CHECK(via != NULL && strcmp(via, "tcp") == 0, "the child is reached over %s",
        via != NULL ? via : "nothing");
}

/* wait: the child is stopped, tcp's queue to it is filled (NX_RSR_NONBLOCK
 * until NX_EAGAIN), and a blocking send must wait. Nobody drives here but
 * this thread (NX_PROGRESS=poll), so the queue stays full until it does,
 * in the wait, and runs "resume", which lets the child go on. */
static int test_wait(const char *self, int check_sends) {
  setenv("NX_PROGRESS", "poll", 1);
  setenv("NX_TCP_QUEUE_MAX", "1m", 1);
  make_dir();
  creator_init();
  if (!loaded("tcp"))
    skip("the tcp module did not load");
  char *env[] = {"NX_PROGRESS=thread", NULL};
  nx_gp_t child, me_gp;
  if (create(self, "child", env, &child) != 0 || nx_gp_make(NULL, &me_gp) != 0)
    return 1;
  uint64_t me = nx_context_id(nx_context_self()), child_id = child.context;
  answers_over_tcp(&child);
  long pid = ask_pid(&child);
  CHECK(pid > 0 && stop_all(pid), "the child (pid %ld) did not stop", pid);
  if (failures != 0) {
    if (pid > 0)
      kill((pid_t)pid, SIGKILL); /* not left stopped */
    return 1;
  }
  static uint8_t payload[SINK_BYTES];
  long accepted = 0;
  int r = 0;
  for (; accepted < SINK_MAX; accepted++) {
    nx_buffer_t *b;
    if ((r = nx_rsr_init_name(&b, &child, "sink", SINK_BYTES + 16)) != 0 ||
        (r = nx_put_bytes(b, payload, SINK_BYTES)) != 0 ||
        (r = nx_rsr_send_flags(b, NX_RSR_NONBLOCK)) != 0)
      break;
  }
  CHECK(r == NX_EAGAIN, "after %ld RSRs of %d bytes: %s, not NX_EAGAIN",
        accepted, SINK_BYTES, nx_strerror(r));
  /* Queued here, run by whoever drives next: the waiting send. */
  CHECK(send_int(&me_gp, "resume", 0, 0, 0) == 0, "resume");
  nx_buffer_t *b;
  r = nx_rsr_init_name(&b, &child, "sink", SINK_BYTES + 16);
  if (r == 0 && (r = nx_put_bytes(b, payload, SINK_BYTES)) == 0)
    r = nx_rsr_send(b);
  CHECK(r == 0, "the blocking send: %s", nx_strerror(r));
  accepted += r == 0;
  nx_mutex_lock(&m);
  int res = resumed;
  nx_mutex_unlock(&m);
  CHECK(res, "the blocking send returned without running \"resume\"");
  if (!res)
    kill((pid_t)pid, SIGCONT);
  CHECK(send_int(&child, "count", 0, 0, 0) == 0 && wait_for(&counted, accepted),
        "the child counted %ld of %ld sinks", counted, accepted);
  CHECK(nx_context_destroy(&child) == 0, "destroying the child");
  nx_gp_release(&child);
  nx_gp_release(&me_gp);
  CHECK(nx_finalize() == 0, "nx_finalize");

  struct log logs[MAX_LOGS];
  size_t n = read_logs(dir, logs);
  struct log *mine = log_of(logs, n, me);
  CHECK(n == 2 && mine != NULL, "%zu logs", n);
  if (mine != NULL) {
    /* Each wait of this thread (sends from this context to the child,
     * over tcp) begins and ends; "resume" ran inside one of them. */
    uint32_t resume = nx_handler_id("resume");
    size_t begins = 0, ends = 0, around = 0;
    uint64_t resume_t = 0;
    for (size_t i = 0; i < mine->n; i++)
      if (mine->r[i].type == NXT_BEGIN && mine->r[i].handler == resume)
        resume_t = mine->r[i].t;
    for (size_t i = 0; i < mine->n; i++) {
      const struct nxt_rec *w = &mine->r[i];
      if (w->type != NXT_WAIT_BEGIN && w->type != NXT_WAIT_END)
        continue;
      CHECK(w->ctx == me && w->peer == child_id &&
                strcmp(mod_name(mine, w->module), "tcp") == 0,
            "a wait of %#llx for %#llx over %s", (unsigned long long)w->ctx,
            (unsigned long long)w->peer, mod_name(mine, w->module));
      if (w->type == NXT_WAIT_END)
        continue;
      begins++;
      /* Its end: the next wait record of its thread. */
      for (size_t j = i + 1; j < mine->n; j++) {
        if (mine->thread[j] != mine->thread[i] ||
            (mine->r[j].type != NXT_WAIT_BEGIN &&
             mine->r[j].type != NXT_WAIT_END))
          continue;
        if (mine->r[j].type == NXT_WAIT_END) {
          ends++;
          around += resume_t >= w->t && resume_t <= mine->r[j].t;
        }
        break;
      }
    }
    CHECK(begins >= 1 && ends == begins &&
              count(mine, NXT_WAIT_END, 0) == begins,
          "%zu WAIT_BEGIN, %zu WAIT_END after them, %zu in all", begins, ends,
          count(mine, NXT_WAIT_END, 0));
    CHECK(resume_t != 0 && around == 1,
          "\"resume\" ran in %zu waits (its run %s)", around,
          resume_t ? "recorded" : "missing");
    /* The send that waited is recorded as its module took it, after
     * what ran during its wait: each thread's stamps never go back. */
    for (size_t i = 0; i < mine->n; i++)
      for (size_t j = i + 1; j < mine->n; j++)
        if (mine->thread[j] == mine->thread[i] &&
            mine->r[j].type < NXT_DEF_HANDLER) {
          CHECK(mine->r[i].type >= NXT_DEF_HANDLER ||
                    mine->r[j].t >= mine->r[i].t,
                "record %zu (type %u) stamped before record %zu (type %u) "
                "of its thread",
                j, mine->r[j].type, i, mine->r[i].type);
          break;
        }
    size_t sends = 0;
    uint32_t sink = nx_handler_id("sink");
    for (size_t i = 0; i < mine->n; i++)
      sends += mine->r[i].type == NXT_SEND && mine->r[i].handler == sink &&
               mine->r[i].peer == child_id;
    printf("trace_real wait: %ld sinks accepted (one refused), %zu waits, %zu "
           "SEND records\n",
           accepted, begins, sends);
    /* An RSR refused with NX_EAGAIN was never sent. */
    if (check_sends)
      CHECK(sends == (size_t)accepted,
            "%zu SEND records of \"sink\", but nx_rsr_send accepted %ld "
            "(one more was refused with NX_EAGAIN)",
            sends, accepted);
  }
  for (size_t i = 0; i < n; i++)
    free_log(&logs[i]);
  rm_tree(dir);
  return failures != 0;
}

/* A loopback port nobody uses now (the socket is closed: a race with
 * another program taking it is possible, and fails nx_init loudly). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in in = {0};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(in);
  int port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&in, sizeof(in)) == 0 &&
      getsockname(fd, (struct sockaddr *)&in, &len) == 0)
    port = ntohs(in.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

/* Destroys every established TCP socket to or from the two ports with
 * ss -K (SOCK_DESTROY). Returns how many it listed, or -1 without ss. */
static int ss_kill(int p1, int p2) {
  char cmd[512], line[512];
  snprintf(cmd, sizeof(cmd),
           "ss -K -t -n state established '( sport = :%d or dport = :%d or "
           "sport = :%d or dport = :%d )' 2>&1",
           p1, p1, p2, p2);
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  int n = 0;
  while (fgets(line, sizeof(line), p) != NULL) {
    printf("ss: %s", line);
    n += strstr(line, "127.0.0.1:") != NULL;
  }
  int st = pclose(p);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? n : -1;
}

/* fallback: tcp carries the RSRs to the child until its connection is
 * destroyed; a second module (ucx or ofi) reaches the child too, and the
 * route fails over to it. */
static int test_fallback(const char *self, const char *want) {
  if (geteuid() != 0)
    skip("not root: ss -K needs CAP_NET_ADMIN");
  int p1 = free_port(), p2 = free_port();
  char listen1[64], listen2[64];
  snprintf(listen1, sizeof(listen1), "127.0.0.1:%d", p1);
  snprintf(listen2, sizeof(listen2), "NX_TCP_LISTEN=127.0.0.1:%d", p2);
  const char *m2 = second_module(want);
  setenv("NX_TCP_LISTEN", listen1, 1);
  /* RSRs the destroyed connection swallowed are reported by nx_finalize
   * once its bound passes: 3 s, not the default minute. */
  setenv("NX_FINALIZE_MS", "3000", 1);
  make_dir();
  creator_init();
  char *env[] = {listen2, NULL};
  nx_gp_t child;
  if (create(self, "child", env, &child) != 0)
    return 1;
  uint64_t me = nx_context_id(nx_context_self()), child_id = child.context;
  answers_over_tcp(&child);
  const char *via = NULL;
  int killed = ss_kill(p1, p2);
  if (killed <= 0) {
    nx_context_destroy(&child);
    nx_gp_release(&child);
    nx_finalize();
    rm_tree(dir);
    skip(killed < 0 ? "ss -K failed (no iproute2, or a kernel without "
                      "CONFIG_INET_DIAG_DESTROY)"
                    : "ss -K found no connection to destroy");
  }
  /* Pings until one is answered over m2. Those in flight when tcp broke
   * may be lost (reported to the error callback), not counted here. */
  int over_m2 = 0;
  for (int i = 0; i < TIMEOUT_S * 10 && !over_m2; i++) {
    long before = pongs;
    CHECK(send_int(&child, "ping", 0, 0, 0) == 0, "ping %d after the kill", i);
    via = nx_gp_protocol(&child);
    nx_mutex_lock(&m);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    while (pongs == before && nx_cond_timedwait(&c, &m, &until) == 0)
      ;
    over_m2 = pongs > before && via != NULL && strcmp(via, m2) == 0;
    nx_mutex_unlock(&m);
  }
  CHECK(over_m2, "no ping was answered over %s after the kill (route %s)", m2,
        via != NULL ? via : "none");
  CHECK(lost == 0, "the child was reported lost");
  CHECK(nx_context_destroy(&child) == 0, "destroying the child");
  nx_gp_release(&child);
  nx_finalize(); /* may time out on RSRs tcp swallowed */

  struct log logs[MAX_LOGS];
  size_t n = read_logs(dir, logs);
  struct log *mine = log_of(logs, n, me), *its = log_of(logs, n, child_id);
  CHECK(n == 2 && mine != NULL && its != NULL, "%zu logs", n);
  /* Each side's connection broke (one destroyed, the other reset), and
   * each side's route to the other failed over from tcp to m2. */
  for (int side = 0; side < 2; side++) {
    const struct log *l = side == 0 ? mine : its;
    uint64_t other = side == 0 ? child_id : me;
    if (l == NULL)
      continue;
    size_t k = count(l, NXT_FALLBACK, 0);
    CHECK(k >= 1, "no FALLBACK record in the %s's log",
          side == 0 ? "creator" : "child");
    for (size_t i = 0; i < l->n; i++) {
      const struct nxt_rec *r = &l->r[i];
      if (r->type != NXT_FALLBACK)
        continue;
      CHECK(r->peer == (other & ~0xffffffffull) && r->ctx == 0 &&
                strcmp(mod_name(l, r->module), m2) == 0 && r->aux < 0xff &&
                strcmp(mod_name(l, (uint8_t)r->aux), "tcp") == 0,
            "FALLBACK of %#llx to %s from %s, not %#llx's from tcp to %s",
            (unsigned long long)r->peer, mod_name(l, r->module),
            r->aux < 0xff ? mod_name(l, (uint8_t)r->aux) : "(none)",
            (unsigned long long)(other & ~0xffffffffull), m2);
    }
    CHECK(count(l, NXT_PROC_LOSS, 0) == 0, "a PROC_LOSS, not a fallback");
    printf("trace_real fallback: %zu FALLBACK records in the %s's log\n", k,
           side == 0 ? "creator" : "child");
  }
  for (size_t i = 0; i < n; i++)
    free_log(&logs[i]);
  rm_tree(dir);
  return failures != 0;
}

/* hop: the creator (tcp, M2: ucx or ofi) starts a gateway G (both),
 * member 0 (M2
 * only) and member 1 (tcp only); the members join G and member 0 sends
 * N_HOP RSRs to member 1, which can only go through G. */
static int test_hop(const char *self, const char *want) {
  const char *m2 = second_module(want);
  make_dir();
  creator_init();
  char a_protos[64];
  snprintf(a_protos, sizeof(a_protos), "NX_PROTOCOLS=%s,local", m2);
  char *gw_env[] = {"NX_GATEWAY=1", NULL};
  char *a_env[] = {a_protos, NULL};
  char *b_env[] = {"NX_PROTOCOLS=tcp,local", NULL};
  nx_gp_t g, a, b;
  if (create(self, "child", gw_env, &g) != 0 ||
      create(self, "member0", a_env, &a) != 0 ||
      create(self, "member1", b_env, &b) != 0)
    return 1;
  CHECK(send_gp(&a, "gw", &g) == 0 && send_gp(&b, "gw", &g) == 0,
        "telling the members the gateway");
  CHECK(wait_for(&joined, 2), "%ld of 2 members joined the gateway", joined);
  if (failures != 0)
    return 1;
  uint64_t a_id = member_gp[0].context, b_id = member_gp[1].context;
  CHECK(send_gp(&a, "peer", &member_gp[1]) == 0, "telling member 0 its peer");
  CHECK(wait_for(&hop_seen, N_HOP), "member 1 ran %ld of %d", hop_seen, N_HOP);
  uint64_t g_id = g.context;
  CHECK(nx_context_destroy(&a) == 0 && nx_context_destroy(&b) == 0 &&
            nx_context_destroy(&g) == 0,
        "destroying the children");
  nx_gp_release(&a);
  nx_gp_release(&b);
  nx_gp_release(&g);
  nx_gp_release(&member_gp[0]);
  nx_gp_release(&member_gp[1]);
  CHECK(nx_finalize() == 0, "nx_finalize");

  struct log logs[MAX_LOGS];
  size_t n = read_logs(dir, logs);
  struct log *gl = log_of(logs, n, g_id);
  CHECK(n == 4 && gl != NULL, "%zu logs", n);
  uint32_t seq = nx_handler_id("seq");
  if (gl != NULL) {
    /* Every one of member 0's RSRs, and nothing else of the program's. */
    size_t k = count(gl, NXT_HOP, 0), over_tcp = 0;
    CHECK(k == N_HOP && count(gl, NXT_HOP, seq) == N_HOP,
          "%zu HOP records (%zu of \"seq\"), not %d", k,
          count(gl, NXT_HOP, seq), N_HOP);
    for (size_t i = 0; i < gl->n; i++) {
      const struct nxt_rec *r = &gl->r[i];
      if (r->type != NXT_HOP)
        continue;
      /* The next hop's module: tcp, or none when no route was made yet. */
      CHECK(r->peer == b_id && r->x == a_id && r->ctx == 0 &&
                (r->module == 0xff ||
                 strcmp(mod_name(gl, r->module), "tcp") == 0),
            "HOP to %#llx from %#llx over %s, not member 1's from member 0's "
            "over tcp",
            (unsigned long long)r->peer, (unsigned long long)r->x,
            mod_name(gl, r->module));
      CHECK(r->bytes >= 8, "a hop of %u bytes (an int64 at least)", r->bytes);
      over_tcp += r->module != 0xff;
    }
    CHECK(over_tcp >= 1, "no HOP names its next module");
    printf("trace_real hop: %zu HOP records, %zu naming tcp\n", k, over_tcp);
  }
  for (size_t i = 0; i < n; i++) {
    if (&logs[i] != gl)
      CHECK(count(&logs[i], NXT_HOP, 0) == 0, "process %#x recorded hops",
            logs[i].h.proc_id);
    free_log(&logs[i]);
  }
  rm_tree(dir);
  return failures != 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s loss NXTRACE | wait | wait-sends | fallback | "
            "hop\n",
            argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  nx_mutex_init(&m);
  nx_cond_init(&c);
  if (strcmp(mode, "child") == 0)
    return child_main();
  if (strcmp(mode, "member0") == 0 || strcmp(mode, "member1") == 0)
    return member_main(mode[6] - '0');
  if (strcmp(mode, "loss") == 0 && argc == 3)
    return test_loss(argv[0], argv[2]);
  if (strcmp(mode, "wait") == 0 || strcmp(mode, "wait-sends") == 0)
    return test_wait(argv[0], strcmp(mode, "wait-sends") == 0);
  if (strcmp(mode, "fallback") == 0)
    return test_fallback(argv[0], argc > 2 ? argv[2] : NULL);
  if (strcmp(mode, "hop") == 0)
    return test_hop(argv[0], argc > 2 ? argv[2] : NULL);
  fprintf(stderr, "%s: unknown mode %s\n", argv[0], mode);
  return 2;
}
