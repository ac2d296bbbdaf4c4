/* Process contexts: nodes on this host or a module's launcher, starting
 * programs as contexts (fork/exec, or the module's spawn), the control channel
 * to their creator, and their ends. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "internal.h"

extern char **environ;

#define DESTROY_GRACE_MS 5000
#define KILL_GRACE_MS 2000
/* How long a watcher waits on a module's channel before it looks whether
 * it should stop (a socket's wait is ended by shutdown at once). */
#define WATCH_SLICE_MS 100

/* The control channel. */

int nxi_ctl_send(int fd, const void *msg, size_t len) {
  ssize_t n;
  do
    n = send(fd, msg, len, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == EPIPE || errno == ECONNRESET ? NX_EPEERDEAD : -errno;
  return (size_t)n == len ? 0 : NX_EIO;
}

long nxi_ctl_recv(int fd, uint8_t *buf, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r;
  do
    r = poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  if (r == 0)
    return NX_ETIMEDOUT;
  if (r < 0)
    return -errno;
  ssize_t n;
  do
    n = recv(fd, buf, NXI_CTL_MAX, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == ECONNRESET ? 0 : -errno;
  return n;
}

int nxi_chan_send(struct nxi_chan *ch, const void *msg, size_t len) {
  if (ch->fd >= 0)
    return nxi_ctl_send(ch->fd, msg, len);
  return ch->mod->ops->ctl_send(ch->mod->state, ch->ctl, msg, len);
}

long nxi_chan_recv(struct nxi_chan *ch, uint8_t *buf, int timeout_ms) {
  if (ch->fd >= 0)
    return nxi_ctl_recv(ch->fd, buf, timeout_ms);
  return ch->mod->ops->ctl_recv(ch->mod->state, ch->ctl, buf, NXI_CTL_MAX,
                                timeout_ms);
}

/* A module's channel has nothing to shut down: its waits are sliced
 * (WATCH_SLICE_MS) and the waiter checks its own stop flag. */
void nxi_chan_shutdown(struct nxi_chan *ch) {
  if (ch->fd >= 0)
    shutdown(ch->fd, SHUT_RDWR);
}

void nxi_chan_close(struct nxi_chan *ch, unsigned flags) {
  if (ch->fd >= 0)
    close(ch->fd);
  else if (ch->mod != NULL)
    ch->mod->ops->ctl_close(ch->mod->state, ch->ctl, flags);
  ch->fd = -1;
  ch->mod = NULL;
  ch->ctl = NULL;
}

static size_t put_peer(uint8_t *p, uint64_t ctx, uint64_t addr,
                       const struct nxi_dlist *dl) {
  nxi_le64(p, ctx);
  nxi_le64(p + 8, addr);
  nxi_le32(p + 16, (uint32_t)dl->len);
  memcpy(p + 20, dl->blob, dl->len);
  return 20 + dl->len;
}

/* This process's initial context as a peer entry; 0 if it does not fit. */
static size_t put_self(uint8_t *p, size_t cap) {
  nx_context_t *ctx = nxi_rt.initial;
  if (cap < 20 + nxi_rt.self_dl->len)
    return 0;
  return put_peer(p, ctx->id, (uint64_t)(uintptr_t)ctx->data, nxi_rt.self_dl);
}

size_t nxi_ctl_self_entry(uint8_t *p, size_t cap) { return put_self(p, cap); }

size_t nxi_ctl_ready_msg(uint8_t *buf, size_t cap) {
  if (cap < 1)
    return 0;
  buf[0] = NXI_CTL_READY;
  size_t n = put_self(buf + 1, cap - 1);
  return n == 0 ? 0 : 1 + n;
}

int nxi_ctl_parse_peer(const uint8_t *msg, size_t len, size_t *off,
                       struct nxi_ctl_peer *out) {
  if (len < *off || len - *off < 20)
    return NX_EPROTO;
  const uint8_t *p = msg + *off;
  out->context = nxi_rd64(p);
  out->address = nxi_rd64(p + 8);
  out->len = nxi_rd32(p + 16);
  if (len - *off - 20 < out->len || out->context == 0)
    return NX_EPROTO;
  out->blob = p + 20;
  *off += 20 + out->len;
  return 0;
}

int nxi_ctl_parse_ready(const uint8_t *msg, size_t len,
                        struct nxi_ctl_peer *out) {
  size_t off = 1;
  if (len < 1 || msg[0] != NXI_CTL_READY)
    return NX_EPROTO;
  return nxi_ctl_parse_peer(msg, len, &off, out);
}

/* A gp from a peer entry: interns its descriptor list. */
static int peer_gp(const struct nxi_ctl_peer *p, nx_gp_t *gp) {
  struct nxi_dlist *dl;
  int r = nxi_dlist_intern(p->blob, p->len, &dl);
  if (r < 0)
    return r;
  atomic_store(&dl->proc, (uint32_t)(p->context >> 32));
  gp->context = p->context;
  gp->address = p->address;
  gp->protos = dl;
  return 0;
}

/* Nodes. */

static int spec_is_local(const char *spec) {
  return strcmp(spec, "localhost") == 0 || strcmp(spec, "local") == 0;
}

/* The loaded module a spec such as "mpi:host=a,b" names, if it starts
 * processes (the loader checked that its launching slots come together). */
static struct nxi_module *spec_module(const char *spec) {
  size_t len = strcspn(spec, ":");
  int n = nxi_module_count_loaded();
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (strlen(m->name) == len && strncmp(m->name, spec, len) == 0)
      return m->ops->spawn != NULL ? m : NULL;
  }
  return NULL;
}

int nx_nodes_acquire(const char *spec, int count, nx_node_t *nodes) {
  if (spec == NULL || count < 0 || (count > 0 && nodes == NULL))
    return NX_EINVAL;
  if (!spec_is_local(spec)) {
    /* Nodes a module's launcher places processes on: the node keeps the
     * spec, which nx_context_create hands to the module. */
    if (spec[0] == '\0' || spec[0] == ':')
      return NX_EINVAL;
    if (!nxi_ready())
      return NX_ENOTINIT;
    struct nxi_module *m = spec_module(spec);
    if (m == NULL) {
      nxi_log(0, NULL,
              "nodes \"%s\": no loaded protocol module named \"%.*s\" starts "
              "processes (nxinfo tells which loaded and why not)",
              spec, (int)strcspn(spec, ":"), spec);
      return NX_ENOTSUP;
    }
    char why[256] = "not accepted by the module";
    int r = strlen(spec) < sizeof(nodes[0].host)
                ? m->ops->node_spec(m->state, spec, why, sizeof(why))
                : NX_EINVAL;
    if (strlen(spec) >= sizeof(nodes[0].host))
      snprintf(why, sizeof(why), "longer than %zu characters",
               sizeof(nodes[0].host) - 1);
    if (r < 0) {
      nxi_log(0, NULL, "nodes \"%s\": %s", spec, why);
      return r;
    }
  }
  for (int i = 0; i < count; i++) {
    memset(&nodes[i], 0, sizeof(nodes[i]));
    nodes[i].id = (uint32_t)i;
    snprintf(nodes[i].host, sizeof(nodes[i].host), "%s",
             spec_is_local(spec) ? "localhost" : spec);
  }
  return 0;
}

int nx_node_release(nx_node_t *node) { return node == NULL ? NX_EINVAL : 0; }

static int node_is_local(const nx_node_t *node) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  return strcmp(node->host, "localhost") == 0 ||
         strcmp(node->host, "local") == 0 || strcmp(node->host, host) == 0;
}

/* The child side: this process was started as a process context. */

static struct {
  struct nxi_chan chan; /* to the creator */
  int have;             /* started as a process context: chan is open */
  int stopping;         /* child_finalize: the watcher ends */
  pthread_t watcher;
  int watching;
  nx_mutex_t m;
  nx_cond_t c;
  int ready;
  int destroyed;
  int eof;
  uint8_t *peers; /* the PEERS message, once it came */
  size_t peers_len;
} me = {.chan = {.fd = -1}};

static void *watch(void *arg) {
  (void)arg;
  uint8_t *buf = malloc(NXI_CTL_MAX);
  for (;;) {
    long n = buf != NULL ? nxi_chan_recv(&me.chan, buf, WATCH_SLICE_MS) : 0;
    if (n == NX_ETIMEDOUT) {
      nx_mutex_lock(&me.m);
      int stop = me.stopping;
      nx_mutex_unlock(&me.m);
      if (!stop)
        continue;
      n = 0;
    }
    if (n <= 0) {
      nx_mutex_lock(&me.m);
      me.eof = 1;
      nx_cond_broadcast(&me.c);
      nx_mutex_unlock(&me.m);
      break;
    }
    switch (buf[0]) {
    case NXI_CTL_PEERS: {
      uint8_t *copy = malloc((size_t)n);
      if (copy == NULL)
        break;
      memcpy(copy, buf, (size_t)n);
      nx_mutex_lock(&me.m);
      free(me.peers);
      me.peers = copy;
      me.peers_len = (size_t)n;
      nx_cond_broadcast(&me.c);
      nx_mutex_unlock(&me.m);
      break;
    }
    case NXI_CTL_DESTROY:
      nx_mutex_lock(&me.m);
      me.destroyed = 1;
      nx_cond_broadcast(&me.c);
      nx_mutex_unlock(&me.m);
      break;
    case NXI_CTL_PEER_DEAD:
      if (n >= 9)
        nxi_gp_proc_failed((uint32_t)(nxi_rd64(buf + 1) >> 32), NX_EPEERDEAD);
      break;
    default:
      nxi_log(1, NULL, "control channel: unknown message %u", buf[0]);
    }
  }
  free(buf);
  return NULL;
}

/* The channel a launcher gave this process: a socket in NX_CTL_FD, or
 * a module's channel (a process the mpi module's spawn started). */
static struct nxi_chan creator_chan(void) {
  struct nxi_chan ch = {.fd = -1};
  const char *s = getenv("NX_CTL_FD");
  if (s != NULL && s[0] != '\0') {
    char *end;
    long fd = strtol(s, &end, 10);
    /* Children this process starts get a channel of their own. */
    unsetenv("NX_CTL_FD");
    if (*end != '\0' || fd < 0 || fcntl((int)fd, F_GETFD) < 0) {
      nxi_log(0, NULL, "NX_CTL_FD=%s is not an open descriptor; ignored", s);
      return ch;
    }
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    ch.fd = (int)fd;
    return ch;
  }
  int n = nxi_module_count_loaded();
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (m->ops->ctl_parent != NULL &&
        m->ops->ctl_parent(m->state, &ch.ctl) == 0) {
      ch.mod = m;
      break;
    }
  }
  return ch;
}

static int child_init(void) {
  struct nxi_chan ch = creator_chan();
  if (ch.fd < 0 && ch.mod == NULL)
    return 0;
  me.chan = ch;
  me.have = 1;
  me.ready = me.destroyed = me.eof = me.stopping = 0;
  me.peers = NULL;
  nx_mutex_init(&me.m);
  nx_cond_init(&me.c);
  if (pthread_create(&me.watcher, NULL, watch, NULL) != 0) {
    nxi_chan_close(&me.chan, NX_CTL_ABANDON);
    me.have = 0;
    return NX_EAGAIN;
  }
  me.watching = 1;
  return 0;
}

static void child_finalize(void) {
  if (!me.have)
    return;
  nx_mutex_lock(&me.m);
  me.stopping = 1;
  int gone = me.eof && !me.destroyed;
  nx_mutex_unlock(&me.m);
  nxi_chan_shutdown(&me.chan); /* ends the watcher's recv */
  if (me.watching)
    pthread_join(me.watcher, NULL);
  me.watching = 0;
  /* A module's close may wait for the creator's (MPI's disconnect): not
   * when the creator is known to be gone. */
  nxi_chan_close(&me.chan, gone ? NX_CTL_ABANDON : 0);
  me.have = 0;
  free(me.peers);
  me.peers = NULL;
  nx_cond_destroy(&me.c);
  nx_mutex_destroy(&me.m);
}

int nx_context_ready(void) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (!me.have)
    return NX_ENOENT;
  nx_mutex_lock(&me.m);
  int r = 0;
  if (!me.ready) {
    uint8_t *buf = malloc(NXI_CTL_MAX);
    size_t len = buf != NULL ? nxi_ctl_ready_msg(buf, NXI_CTL_MAX) : 0;
    r = len == 0 ? NX_ENOMEM : nxi_chan_send(&me.chan, buf, len);
    free(buf);
    if (r == 0)
      me.ready = 1;
  }
  nx_mutex_unlock(&me.m);
  return r;
}

int nx_context_serve(void) {
  int r = nx_context_ready();
  if (r < 0)
    return r;
  nx_mutex_lock(&me.m);
  while (!me.destroyed && !me.eof)
    nx_cond_wait(&me.c, &me.m);
  r = me.destroyed ? 0 : NX_EPEERDEAD;
  nx_mutex_unlock(&me.m);
  return r;
}

/* Without a launcher's channel, a module may know the job (mpirun's ranks). */
static int job_peers(nx_gp_t **gps, int *count, int *rank) {
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < nmods; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    if (m->ops->job_peers == NULL)
      continue;
    size_t cap = 20 + nxi_rt.self_dl->len;
    uint8_t *mine = malloc(cap);
    if (mine == NULL)
      return NX_ENOMEM;
    size_t len = put_self(mine, cap);
    void *all = NULL;
    size_t *lens = NULL;
    int n = 0, me_rank = -1;
    int r = m->ops->job_peers(m->state, mine, len, &all, &lens, &n, &me_rank);
    free(mine);
    if (r == NX_ENOENT)
      continue;
    if (r < 0)
      return r;
    nx_gp_t *out = n > 0 ? calloc((size_t)n, sizeof(*out)) : NULL;
    size_t off = 0;
    r = out != NULL ? 0 : NX_ENOMEM;
    for (int k = 0; r == 0 && k < n; k++) {
      struct nxi_ctl_peer p;
      size_t at = 0;
      r = nxi_ctl_parse_peer((const uint8_t *)all + off, lens[k], &at, &p);
      if (r == 0)
        r = peer_gp(&p, &out[k]);
      off += lens[k];
    }
    free(all);
    free(lens);
    if (r < 0) {
      for (int k = 0; out != NULL && k < n; k++)
        nx_gp_release(&out[k]);
      free(out);
      return r;
    }
    *gps = out;
    *count = n;
    if (rank != NULL)
      *rank = me_rank;
    return 0;
  }
  return NX_ENOENT;
}

int nx_context_peers(nx_gp_t **gps, int *count, int *rank) {
  if (gps == NULL || count == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (!me.have)
    return job_peers(gps, count, rank);
  int r = nx_context_ready();
  if (r < 0)
    return r;
  nx_mutex_lock(&me.m);
  while (me.peers == NULL && !me.eof)
    nx_cond_wait(&me.c, &me.m);
  if (me.peers == NULL) {
    nx_mutex_unlock(&me.m);
    return NX_EPEERDEAD;
  }
  const uint8_t *msg = me.peers;
  size_t len = me.peers_len;
  uint32_t n = len >= 9 ? nxi_rd32(msg + 5) : 0;
  uint32_t my_rank = len >= 9 ? nxi_rd32(msg + 1) : UINT32_MAX;
  nx_gp_t *out = n > 0 && n < 1u << 20 ? calloc(n, sizeof(*out)) : NULL;
  size_t off = 9;
  r = out != NULL ? 0 : (n == 0 ? NX_EPROTO : NX_ENOMEM);
  for (uint32_t i = 0; r == 0 && i < n; i++) {
    struct nxi_ctl_peer p;
    r = nxi_ctl_parse_peer(msg, len, &off, &p);
    if (r == 0)
      r = peer_gp(&p, &out[i]);
  }
  nx_mutex_unlock(&me.m);
  if (r < 0) {
    for (uint32_t i = 0; out != NULL && i < n; i++)
      nx_gp_release(&out[i]);
    free(out);
    return r;
  }
  *gps = out;
  *count = (int)n;
  if (rank != NULL)
    *rank = my_rank == UINT32_MAX ? -1 : (int)my_rank;
  return 0;
}

/* The creator side: children started with nx_context_create. A monitor
 * thread watches the sockets of those it forked, so a child that dies is
 * noticed (and its routes failed) even when no RSR goes to it. A child a
 * module spawned is not watched (no backend tells of its end: see
 * docs/mpi.md) and not reaped here (its launcher does that). */

struct child {
  struct child *next;
  pid_t pid; /* 0: a module spawned it */
  struct nxi_chan chan;
  uint32_t proc;
  int dead;   /* its channel closed */
  int reaped; /* waitpid returned it */
  int status;
};

static pthread_mutex_t kids_lock = PTHREAD_MUTEX_INITIALIZER;
static struct child *kids;
static pthread_t monitor;
static int monitoring;
static int wake_pipe[2] = {-1, -1};

static void report_exit(const struct child *c) {
  char who[64];
  if (c->proc != 0)
    snprintf(who, sizeof(who), "process context %#x (pid %d)", c->proc,
             (int)c->pid);
  else
    snprintf(who, sizeof(who), "process context being created (pid %d)",
             (int)c->pid);
  if (WIFSIGNALED(c->status))
    nxi_log(0, NULL, "%s was killed by signal %d", who, WTERMSIG(c->status));
  else if (WIFEXITED(c->status) && WEXITSTATUS(c->status) != 0)
    nxi_log(0, NULL, "%s exited with status %d", who, WEXITSTATUS(c->status));
}

/* Kids lock held. */
static void try_reap(struct child *c, int options) {
  if (c->reaped)
    return;
  pid_t r = waitpid(c->pid, &c->status, options);
  if (r == c->pid) {
    c->reaped = 1;
    report_exit(c);
  }
}

static void *monitor_main(void *arg) {
  (void)arg;
  struct pollfd *fds = NULL;
  struct child **who = NULL;
  size_t cap = 0;
  for (;;) {
    size_t n = 0;
    pthread_mutex_lock(&kids_lock);
    size_t want = 1;
    for (struct child *c = kids; c != NULL; c = c->next)
      want++;
    if (want > cap) {
      struct pollfd *f = realloc(fds, want * sizeof(*fds));
      struct child **w = f != NULL ? realloc(who, want * sizeof(*who)) : NULL;
      if (f != NULL)
        fds = f;
      if (w != NULL) {
        who = w;
        cap = want;
      }
    }
    if (cap == 0) {
      pthread_mutex_unlock(&kids_lock);
      break;
    }
    fds[n].fd = wake_pipe[0];
    fds[n].events = POLLIN;
    who[n++] = NULL;
    for (struct child *c = kids; c != NULL && n < cap; c = c->next) {
      if (c->dead) {
        try_reap(c, WNOHANG);
        continue;
      }
      if (c->chan.fd < 0)
        continue;
      fds[n].fd = c->chan.fd;
      fds[n].events = POLLIN;
      who[n++] = c;
    }
    pthread_mutex_unlock(&kids_lock);
    int r = poll(fds, (nfds_t)n, 100);
    if (r < 0 && errno != EINTR)
      break;
    if (fds[0].revents & POLLIN) {
      char c;
      if (read(wake_pipe[0], &c, 1) <= 0 || c == 'q')
        break;
    }
    for (size_t i = 1; i < n; i++) {
      if (fds[i].revents == 0)
        continue;
      uint8_t buf[64];
      ssize_t got = recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (got > 0 || (got < 0 && errno == EAGAIN))
        continue; /* nothing the creator needs after READY */
      pthread_mutex_lock(&kids_lock);
      struct child *c = who[i];
      uint32_t proc = c->proc;
      int was_dead = c->dead;
      c->dead = 1;
      try_reap(c, WNOHANG);
      pthread_mutex_unlock(&kids_lock);
      if (!was_dead)
        nxi_gp_proc_failed(proc, NX_EPEERDEAD);
    }
  }
  free(fds);
  free(who);
  return NULL;
}

static int ensure_monitor(void) {
  if (monitoring)
    return 0;
  if (pipe2(wake_pipe, O_CLOEXEC) < 0)
    return NX_EAGAIN;
  if (pthread_create(&monitor, NULL, monitor_main, NULL) != 0) {
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    return NX_EAGAIN;
  }
  monitoring = 1;
  return 0;
}

static void poke_monitor(char c) {
  if (monitoring) {
    ssize_t w = write(wake_pipe[1], &c, 1);
    (void)w;
  }
}

/* "NX_KEY=<32 hex digits>": the computation's key, for a child. */
static void key_var(char *buf, size_t cap) {
  int off = snprintf(buf, cap, "NX_KEY=");
  for (unsigned i = 0; i < NX_KEY_SIZE; i++)
    off += snprintf(buf + off, cap - (size_t)off, "%02x", nxi_rt.key[i]);
}

/* The child's environment: ours, without launcher variables, plus its
 * channel and the computation's key. Built before fork: the child may only
 * call async-signal-safe functions. */
static char **child_env(int fd) {
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = calloc(n + 3, sizeof(char *));
  if (env == NULL)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "NX_CTL_FD=", 10) != 0 &&
        strncmp(environ[i], "NX_KEY=", 7) != 0 &&
        strncmp(environ[i], "NX_RANK=", 8) != 0 &&
        strncmp(environ[i], "NX_SIZE=", 8) != 0)
      env[k++] = environ[i];
  static char fd_var[32];
  static char key[8 + 2 * NX_KEY_SIZE];
  snprintf(fd_var, sizeof(fd_var), "NX_CTL_FD=%d", fd);
  key_var(key, sizeof(key));
  env[k++] = fd_var;
  env[k++] = key;
  return env;
}

static int create_timeout_ms(void) {
  const char *s = getenv("NX_CREATE_TIMEOUT");
  long v = s != NULL ? strtol(s, NULL, 10) : 30;
  return v > 0 && v < 86400 ? (int)v * 1000 : 30000;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Starts a child with fork/exec and a socket pair as its channel. */
static int fork_child(const char *exe, char *const argv[], struct child *c) {
  static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&create_lock); /* child_env's static strings */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    pthread_mutex_unlock(&create_lock);
    return NX_EAGAIN;
  }
  char **env = child_env(sv[1]);
  int r = env != NULL ? ensure_monitor() : NX_ENOMEM;
  if (r < 0)
    goto err_free;
  pid_t pid = fork();
  if (pid < 0) {
    r = NX_EAGAIN;
    goto err_free;
  }
  if (pid == 0) {
    /* The child: only async-signal-safe calls until exec. */
    fcntl(sv[1], F_SETFD, 0);
    execvpe(exe, argv, env);
    uint8_t msg[5] = {NXI_CTL_EXECFAIL};
    int e = errno;
    memcpy(msg + 1, &e, 4);
    send(sv[1], msg, sizeof(msg), MSG_NOSIGNAL);
    _exit(127);
  }
  close(sv[1]);
  free(env);
  pthread_mutex_unlock(&create_lock);
  c->pid = pid;
  c->chan.fd = sv[0];
  return 0;

err_free:
  pthread_mutex_unlock(&create_lock);
  free(env);
  close(sv[0]);
  close(sv[1]);
  return r;
}

/* Starts a child through module m's launcher; its channel is the
 * module's. Besides what the launcher gives it, it gets the key. */
static int spawn_child(struct nxi_module *m, const nx_node_t *node,
                       const char *exe, char *const argv[], int timeout_ms,
                       struct child *c) {
  char key[8 + 2 * NX_KEY_SIZE];
  key_var(key, sizeof(key));
  const char *const env[] = {key, NULL};
  void *ctl = NULL;
  int r = m->ops->spawn(m->state, node->host, node->id, exe, argv, env,
                        timeout_ms, &ctl);
  if (r < 0)
    return r;
  c->pid = 0;
  c->reaped = 1; /* nothing for us to reap */
  c->chan.mod = m;
  c->chan.ctl = ctl;
  return 0;
}

/* Waits for the child's READY, makes its gp, and tells the child who its
 * creator is (its one peer). The same for every kind of channel. */
static int handshake(struct child *c, int timeout_ms, nx_gp_t *gp) {
  uint8_t *buf = malloc(NXI_CTL_MAX);
  long n = buf != NULL ? nxi_chan_recv(&c->chan, buf, timeout_ms) : NX_ENOMEM;
  struct nxi_ctl_peer ready;
  int r;
  if (n > 0 && buf[0] == NXI_CTL_EXECFAIL)
    r = NX_ENOENT;
  else if (n == 0)
    r = NX_EPEERDEAD;
  else if (n < 0)
    r = (int)n;
  else
    r = nxi_ctl_parse_ready(buf, (size_t)n, &ready);
  nx_gp_t child_gp = NX_GP_NULL;
  if (r == 0)
    r = peer_gp(&ready, &child_gp);
  if (r == 0) {
    buf[0] = NXI_CTL_PEERS;
    nxi_le32(buf + 1, UINT32_MAX);
    nxi_le32(buf + 5, 1);
    size_t len = put_self(buf + 9, NXI_CTL_MAX - 9);
    r = len > 0 ? nxi_chan_send(&c->chan, buf, 9 + len) : NX_ENOMEM;
    if (r < 0)
      nx_gp_release(&child_gp);
  }
  free(buf);
  if (r == 0)
    *gp = child_gp;
  return r == NX_EPROTO ? NX_EPEERDEAD : r;
}

static void kill_and_reap(struct child *c, int grace_ms);

int nx_context_create(const nx_node_t *node, const char *exe,
                      char *const argv[], nx_gp_t *gp) {
  if (node == NULL || exe == NULL || exe[0] == '\0' || gp == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  struct nxi_module *m = NULL;
  if (!node_is_local(node) && (m = spec_module(node->host)) == NULL)
    return NX_ENOTSUP;
  char *const default_argv[] = {(char *)exe, NULL};
  if (argv == NULL || argv[0] == NULL)
    argv = default_argv;
  struct child *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NX_ENOMEM;
  c->chan.fd = -1;
  int timeout_ms = create_timeout_ms();
  uint64_t start = now_ms();
  int r = m != NULL ? spawn_child(m, node, exe, argv, timeout_ms, c)
                    : fork_child(exe, argv, c);
  if (r < 0) {
    free(c);
    return r;
  }
  uint64_t spent = now_ms() - start;
  nx_gp_t child_gp = NX_GP_NULL;
  r = handshake(c, spent < (uint64_t)timeout_ms ? timeout_ms - (int)spent : 1,
                &child_gp);
  if (r < 0) {
    kill_and_reap(c, 0); /* it failed us already: no grace */
    nxi_chan_close(&c->chan, NX_CTL_ABANDON);
    free(c);
    return r;
  }
  c->proc = (uint32_t)(child_gp.context >> 32);
  pthread_mutex_lock(&kids_lock);
  c->next = kids;
  kids = c;
  pthread_mutex_unlock(&kids_lock);
  poke_monitor('w');
  *gp = child_gp;
  return 0;
}

static int reap_within(struct child *c, int ms) {
  for (int waited = 0;; waited += 10) {
    pthread_mutex_lock(&kids_lock);
    try_reap(c, WNOHANG);
    int done = c->reaped;
    pthread_mutex_unlock(&kids_lock);
    if (done || waited >= ms)
      return done;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Asks the child to end, gives it `grace_ms`, then insists. A child a
 * module spawned is only asked: its launcher reaps it, and closing its
 * channel (MPI's disconnect) waits until it has let go. */
static void kill_and_reap(struct child *c, int grace_ms) {
  uint8_t msg = NXI_CTL_DESTROY;
  nxi_chan_send(&c->chan, &msg, 1);
  if (c->pid == 0 || reap_within(c, grace_ms))
    return;
  kill(c->pid, SIGTERM);
  if (reap_within(c, KILL_GRACE_MS))
    return;
  kill(c->pid, SIGKILL);
  reap_within(c, 60000);
}

int nxi_process_destroy(uint64_t context) {
  uint32_t proc = (uint32_t)(context >> 32);
  pthread_mutex_lock(&kids_lock);
  struct child **pp = &kids;
  while (*pp != NULL && (*pp)->proc != proc)
    pp = &(*pp)->next;
  struct child *c = *pp;
  if (c != NULL)
    *pp = c->next; /* the monitor no longer watches it */
  pthread_mutex_unlock(&kids_lock);
  if (c == NULL)
    return NX_ENOCONTEXT;
  poke_monitor('w');
  kill_and_reap(c, DESTROY_GRACE_MS);
  nxi_chan_close(&c->chan, 0);
  free(c);
  nxi_gp_proc_failed(proc, NX_ENOCONTEXT);
  return 0;
}

int nxi_process_init(void) { return child_init(); }

void nxi_process_finalize(void) {
  child_finalize();
  pthread_mutex_lock(&kids_lock);
  struct child *list = kids;
  kids = NULL;
  pthread_mutex_unlock(&kids_lock);
  if (monitoring) {
    poke_monitor('q');
    pthread_join(monitor, NULL);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    monitoring = 0;
  }
  while (list != NULL) {
    struct child *c = list;
    list = c->next;
    kill_and_reap(c, DESTROY_GRACE_MS);
    nxi_chan_close(&c->chan, c->dead ? NX_CTL_ABANDON : 0);
    free(c);
  }
}
