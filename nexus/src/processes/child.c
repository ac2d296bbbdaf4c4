/* The child side of process contexts: a process started by a launcher
 * (nx_context_create, nxrun, or a module's spawn) tells it that it is ready,
 * learns its peers, and ends when told to. */
#include "processes/child.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "processes/boot.h"
#include "processes/chan.h"
#include "processes/uvloop.h"
#include "modules/dlist.h"
#include "base/trace.h"
#include "buffers/frame.h"
#include "engine/engine.h"
#include "progress/progress.h"
#include "services/ledger.h"
#include "nxu_key.h"

/* How long the watcher waits on a module's channel before it looks whether
 * it should stop (a socket is watched by the process layer's loop). */
#define WATCH_SLICE_MS 100

/* The nice value of the thread late modules join on. */
#define JOIN_NICE 10

/* This process was started as a process context: the channel up to its
 * creator, and what came down it. */

static struct {
  struct nxi_chan chan; /* to the creator */
  int have;             /* started as a process context: chan is open */
  int stopping;         /* child_finalize: the watcher ends */
  pthread_t watcher;    /* a module's channel: a thread waits on it */
  int watching;
  nx_mutex_t m;
  nx_cond_t c;
  int ready;
  int destroyed;
  int eof;
  uint8_t *peers; /* the PEERS message, once it came */
  size_t peers_len;
  /* A socket: the process layer's loop watches it (uvloop.c). What follows
   * is the loop's, but `closed`, which nxi_uvloop_set writes. */
  uv_poll_t poll;
  int polling; /* poll is started */
  int closed;  /* poll's close came back */
  uint8_t *rx; /* a stream's message so far: its 4-byte length, then it */
  size_t rx_have;
} up = {.chan = {.fd = -1}};

/* The creator's context id, from the PEERS message of a context it made
 * (one peer, no rank); 0 before it came, or under a launcher (nxrun),
 * which is no peer. Called with up.m held. */
static uint64_t creator_context(void) {
  uint32_t rank = 0, n = 0;
  size_t off = NXI_CTL_PEERS_HEAD;
  struct nxi_ctl_peer p;
  if (up.peers == NULL ||
      nxi_ctl_parse_peers_head(up.peers, up.peers_len, &rank, &n) != 0 ||
      rank != UINT32_MAX || n != 1 ||
      nxi_ctl_parse_peer(up.peers, up.peers_len, &off, &p) != 0)
    return 0;
  return p.context;
}

/* The channel ended (its peer closed it, it broke, or this process shut it
 * down): whoever waits hears it. */
static void up_ended(void) {
  nx_mutex_lock(&up.m);
  up.eof = 1;
  uint64_t gone = up.stopping || up.destroyed ? 0 : creator_context();
  nx_cond_broadcast(&up.c);
  nx_mutex_unlock(&up.m);
  /* The creator ended without nx_finalize (which destroys this context
   * first): whoever waits here hears it, as of any dead peer, whether or
   * not a module connected the two. */
  if (gone != 0)
    nxi_dlist_proc_failed(nxi_ctxid_proc(gone), NX_EPEERDEAD);
}

/* A message from the creator, `n` bytes. */
static void up_message(const uint8_t *buf, long n) {
  switch (buf[0]) {
  case NXI_CTL_PEERS: {
    uint8_t *copy = malloc((size_t)n);
    if (copy == NULL)
      break;
    memcpy(copy, buf, (size_t)n);
    nx_mutex_lock(&up.m);
    free(up.peers);
    up.peers = copy;
    up.peers_len = (size_t)n;
    nx_cond_broadcast(&up.c);
    nx_mutex_unlock(&up.m);
    break;
  }
  case NXI_CTL_DESTROY:
    for (unsigned g = 0; n >= NXI_CTL_DESTROY_LEN && g < NXI_FRAME_GENS; g++)
      nxi_ledger_confirm(nxu_rd32(buf + 1), g, nxu_rd64(buf + 5 + 8 * g));
    nx_mutex_lock(&up.m);
    up.destroyed = 1;
    nx_cond_broadcast(&up.c);
    nx_mutex_unlock(&up.m);
    break;
  case NXI_CTL_PEER_DEAD: {
    uint64_t context;
    if (nxi_ctl_parse_peer_dead(buf, (size_t)n, &context) == 0)
      nxi_dlist_proc_failed(nxi_ctxid_proc(context), NX_EPEERDEAD);
    break;
  }
  default: nxi_log(1, NULL, "control channel: unknown message %u", buf[0]);
  }
}

/* A module's channel: a thread waits on it, in slices (the module's recv
 * cannot be woken otherwise). */
static void *watch(void *arg) {
  (void)arg;
  uint8_t *buf = malloc(NXI_CTL_MAX);
  for (;;) {
    long n = buf != NULL ? nxi_chan_recv(&up.chan, buf, WATCH_SLICE_MS) : 0;
    if (n == NX_ETIMEDOUT) {
      nx_mutex_lock(&up.m);
      int stop = up.stopping;
      nx_mutex_unlock(&up.m);
      if (!stop)
        continue;
      n = 0;
    }
    if (n <= 0) {
      up_ended();
      break;
    }
    up_message(buf, n);
  }
  free(buf);
  return NULL;
}

/* A socket, on the loop: what can be read without waiting. A packet
 * channel (NX_CTL_FD) brings a message a packet; a stream (NX_CTL_TCP)
 * brings each after its length (ctl.h), read as it comes, so that a
 * creator that stalls mid-message holds up nobody. 1 while the channel
 * lasts, 0 once it ended (or broke: a malformed length ends it too). */
static int up_read(void) {
  uint8_t *b = up.rx;
  for (;;) {
    long n;
    if (!up.chan.stream) {
      do
        n = recv(up.chan.fd, b, NXI_CTL_MAX, MSG_DONTWAIT);
      while (n < 0 && errno == EINTR);
      if (n > 0) {
        up_message(b, n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 1;
      return 0; /* closed, reset or broken */
    }
    n = nxi_ctl_recv_stream_part(up.chan.fd, b, &up.rx_have);
    if (n > 0)
      up_message(b + 4, n);
    else
      return n == NX_EAGAIN;
  }
}

static void on_up(uv_poll_t *h, int status, int events) {
  (void)events;
  if (status == 0 && up_read())
    return;
  uv_poll_stop(h);
  up.polling = 0;
  up_ended();
}

static void watch_start(void *arg) {
  int *r = arg;
  uv_loop_t *loop = nxi_uvloop();
  up.rx_have = 0;
  up.closed = 0;
  if (uv_poll_init_socket(loop, &up.poll, up.chan.fd) != 0) {
    *r = NX_EAGAIN;
    return;
  }
  up.polling = 1;
  uv_poll_start(&up.poll, UV_READABLE | UV_DISCONNECT, on_up);
  *r = 0;
}

static void on_poll_closed(uv_handle_t *h) {
  (void)h;
  nxi_uvloop_set(&up.closed, 1);
}

static void watch_stop(void *arg) {
  (void)arg;
  if (up.poll.loop != nxi_uvloop()) {
    /* A loop this process forgot (forked from the one that watched). */
    nxi_uvloop_set(&up.closed, 1);
    return;
  }
  if (up.polling)
    uv_poll_stop(&up.poll);
  up.polling = 0;
  uv_close((uv_handle_t *)&up.poll, on_poll_closed);
}

/* Connects to `ip`:`port` within 2 s; the socket, or -1. */
static int connect_within(const char *ip, int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
    return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    if (errno != EINPROGRESS || poll(&p, 1, 2000) <= 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      close(fd);
      return -1;
    }
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

/* NX_CTL_TCP (parent.c, a creator that started this process through
 * PMIx): "<token>:<port>:<ip>,<ip>...". Connects to the first address
 * that answers and proves itself with the token. */
static int tcp_chan(const char *v) {
  uint8_t token[16];
  char addrs[4096], hex[33];
  int port = 0;
  if (strlen(v) < 34 || strlen(v) >= sizeof(addrs) || v[32] != ':')
    return -1;
  memcpy(hex, v, 32);
  hex[32] = '\0';
  if (nxu_hex_decode(hex, token, sizeof(token)) != 0 ||
      sscanf(v + 33, "%d:%4095s", &port, addrs) != 2 || port <= 0 ||
      port > 65535)
    return -1;
  char *save = NULL;
  for (char *ip = strtok_r(addrs, ",", &save); ip != NULL;
       ip = strtok_r(NULL, ",", &save)) {
    int fd = connect_within(ip, port);
    if (fd < 0)
      continue;
    if (nxi_ctl_send_stream(fd, token, sizeof(token)) == 0)
      return fd;
    close(fd);
  }
  return -1;
}

/* The channel a launcher gave this process: a socket in NX_CTL_FD, a TCP
 * connection back to the creator named in NX_CTL_TCP, or a module's
 * channel (a process the mpi module's spawn started). */
static struct nxi_chan creator_chan(void) {
  struct nxi_chan ch = {.fd = -1};
  const char *tcp = getenv("NX_CTL_TCP");
  if (tcp != NULL && tcp[0] != '\0') {
    char v[4200];
    snprintf(v, sizeof(v), "%s", tcp);
    /* Children this process starts get a channel of their own. */
    unsetenv("NX_CTL_TCP");
    ch.fd = tcp_chan(v);
    if (ch.fd < 0) {
      nxi_log(0, NULL,
              "NX_CTL_TCP: cannot reach the creator (or a malformed value); "
              "starting without one");
      return ch;
    }
    ch.stream = 1;
    return ch;
  }
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
    if (m->launch != NULL && m->launch->ctl_parent != NULL &&
        m->launch->ctl_parent(m->state, &ch.ctl) == 0) {
      ch.mod = m;
      break;
    }
  }
  return ch;
}

/* The thread the late modules join on (nxi_child_join_start). */
static struct {
  pthread_mutex_t lock; /* started, closed and running */
  pthread_t thread;
  int started; /* once per nx_init */
  int closed;  /* nx_finalize began: none starts */
  int running;
  atomic_int stop; /* nx_finalize: no more modules */
} joiner = {.lock = PTHREAD_MUTEX_INITIALIZER};

int nxi_child_defers(void) {
  const char *late = getenv("NX_CTL_LATE");
  const char *fd = getenv("NX_CTL_FD");
  return late != NULL && strcmp(late, "1") == 0 && fd != NULL && fd[0] != '\0';
}

/* Tells the creator this process's list now (JOIN), once READY has gone:
 * before it, READY carries the list as it is then. */
static void announce(void) {
  if (!up.have)
    return;
  uint8_t *buf = malloc(NXI_CTL_MAX);
  if (buf == NULL)
    return;
  nx_mutex_lock(&up.m);
  if (up.ready && !up.destroyed && !up.eof && !up.stopping) {
    buf[0] = NXI_CTL_JOIN;
    size_t len = nxi_chan_self_entry(buf + 1, NXI_CTL_MAX - 1);
    int r = len > 0 ? nxi_chan_send(&up.chan, buf, len + 1) : NX_ENOMEM;
    if (r < 0)
      nxi_log(1, NULL, "telling the creator of a module that joined: %s",
              nx_strerror(r));
  }
  nx_mutex_unlock(&up.m);
  free(buf);
}

/* One module came up: the engine watches it (and a sleeping driver wakes
 * to arm its wait fd), this process's list carries it, routes it serves
 * better than theirs switch to it, and then the creator hears of it: once
 * the creator's routes here have moved, this process's have too (an
 * answer to what came over the new route goes back over it). */
static void joined(struct nxi_module *m) {
  /* Measured and watched before it is published: the driver then finds it
   * whole. */
  uint64_t poll_ns = 0;
  int r = nxi_progress_watch_module(m, &poll_ns);
  nxi_module_publish(m, poll_ns);
  if (r < 0)
    return; /* said; it is polled all the same, but not announced */
  nxi_progress_wake_sleeper();
  r = nxi_dlist_self_add_module(m);
  if (r < 0) {
    nxi_log(0, m->name, "joined, but this process's list cannot carry it: %s",
            nx_strerror(r));
    return;
  }
  if (nxi_tracing())
    nxi_trace_name(NXT_DEF_MODULE, 0, 0, nxi_module_index(m), m->name);
  nxi_log(1, m->name, "joined after the process context was ready");
  nxi_dlist_upgrade(0);
  announce();
}

static void *join_main(void *arg) {
  (void)arg;
  /* Background work: on a busy host the threads on the critical path (this
   * process's own start, its creator's next one) go first. Linux's nice
   * is per thread. */
  if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), JOIN_NICE) != 0)
    nxi_log(1, NULL, "the thread modules join on keeps its priority");
  struct nxi_module *m;
  int r;
  while (!atomic_load(&joiner.stop) && (r = nxi_modules_join_next(&m)) >= 0)
    if (r > 0)
      joined(m);
  return NULL;
}

/* Starts the joining thread once (nx_context_ready, or nx_init when there
 * is no creator to be ready for). */
static void join_start(void) {
  pthread_mutex_lock(&joiner.lock);
  if (joiner.started || joiner.closed || nxi_modules_joining() == 0) {
    pthread_mutex_unlock(&joiner.lock);
    return;
  }
  joiner.started = 1;
  atomic_store(&joiner.stop, 0);
  int inline_join = pthread_create(&joiner.thread, NULL, join_main, NULL) != 0;
  joiner.running = !inline_join;
  pthread_mutex_unlock(&joiner.lock);
  if (inline_join)
    join_main(NULL); /* no thread: they join now, on this one */
}

void nxi_child_join_start(void) {
  /* A process context's modules join once it is ready: until then none
   * can reach it, and its start (the creator's wait) goes first. */
  if (!up.have)
    join_start();
}

void nxi_child_join_stop(void) {
  pthread_mutex_lock(&joiner.lock);
  joiner.closed = 1;
  int running = joiner.running;
  joiner.running = 0;
  pthread_mutex_unlock(&joiner.lock);
  if (!running)
    return;
  atomic_store(&joiner.stop, 1);
  pthread_join(joiner.thread, NULL);
}

int nxi_child_init(void) {
  unsetenv("NX_CTL_LATE"); /* children this process starts are told anew */
  pthread_mutex_lock(&joiner.lock);
  joiner.started = joiner.closed = 0; /* a new nx_init */
  pthread_mutex_unlock(&joiner.lock);
  struct nxi_chan ch = creator_chan();
  if (ch.fd < 0 && ch.mod == NULL)
    return 0;
  up.chan = ch;
  up.have = 1;
  up.ready = up.destroyed = up.eof = up.stopping = 0;
  up.peers = NULL;
  nx_mutex_init(&up.m);
  nx_cond_init(&up.c);
  int r = NX_ENOMEM;
  if (ch.fd >= 0) {
    /* A socket: the process layer's loop watches it. */
    if ((up.rx = malloc(4 + NXI_CTL_MAX)) != NULL &&
        nxi_uvloop_call(watch_start, &r) != 0)
      r = NX_EAGAIN;
  } else if (pthread_create(&up.watcher, NULL, watch, NULL) == 0) {
    up.watching = 1;
    r = 0;
  } else {
    r = NX_EAGAIN;
  }
  if (r < 0) {
    free(up.rx);
    up.rx = NULL;
    nxi_chan_close(&up.chan, NX_CTL_ABANDON);
    nx_cond_destroy(&up.c);
    nx_mutex_destroy(&up.m);
    up.have = 0;
    return r;
  }
  return 1;
}

void nxi_child_finalize(void) {
  nxi_child_join_stop(); /* it may tell the creator: before the channel
                          * closes (nx_finalize stopped it already) */
  if (!up.have)
    return;
  nx_mutex_lock(&up.m);
  up.stopping = 1;
  int gone = up.eof && !up.destroyed;
  nx_mutex_unlock(&up.m);
  if (up.rx != NULL) {
    /* The loop lets the socket go before it is closed. */
    nxi_uvloop_call(watch_stop, NULL);
    nxi_uvloop_wait(&up.closed);
    free(up.rx);
    up.rx = NULL;
  }
  nxi_chan_shutdown(&up.chan); /* ends a module channel's watcher */
  if (up.watching)
    pthread_join(up.watcher, NULL);
  up.watching = 0;
  /* A module's close may wait for the creator's (MPI's disconnect): not
   * when the creator is known to be gone. */
  nxi_chan_close(&up.chan, gone ? NX_CTL_ABANDON : 0);
  up.have = 0;
  free(up.peers);
  up.peers = NULL;
  nx_cond_destroy(&up.c);
  nx_mutex_destroy(&up.m);
}

int nx_context_ready(void) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (!up.have)
    return NX_ENOENT;
  nx_mutex_lock(&up.m);
  int r = 0;
  if (!up.ready) {
    uint8_t *buf = malloc(NXI_CTL_MAX);
    size_t len = 0;
    if (buf != NULL) {
      buf[0] = NXI_CTL_READY;
      len = nxi_chan_self_entry(buf + 1, NXI_CTL_MAX - 1);
      len = len != 0 ? len + 1 : 0;
    }
    r = len == 0 ? NX_ENOMEM : nxi_chan_send(&up.chan, buf, len);
    free(buf);
    if (r == 0)
      up.ready = 1;
  }
  nx_mutex_unlock(&up.m);
  if (r == 0)
    join_start(); /* the slow modules, now that the creator has its gp */
  return r;
}

int nx_context_serve(void) {
  int r = nx_context_ready();
  if (r < 0)
    return r;
  nx_mutex_lock(&up.m);
  while (!up.destroyed && !up.eof)
    nx_cond_wait(&up.c, &up.m);
  r = up.destroyed ? 0 : NX_EPEERDEAD;
  nx_mutex_unlock(&up.m);
  return r;
}

/* Without a launcher's channel, a module may know the job (mpirun's ranks),
 * or the PMIx server this process runs under (boot.c). */
static int job_peers(nx_gp_t **gps, int *count, int *rank) {
  size_t cap = NXI_CTL_ENTRY_HEAD + nxi_rt.self_dl->len + NXI_DESC_MAX_LEN;
  uint8_t *mine = malloc(cap);
  if (mine == NULL)
    return NX_ENOMEM;
  size_t len = nxi_chan_self_entry(mine, cap);
  void *all = NULL;
  size_t *lens = NULL;
  int n = 0, me_rank = -1;
  int r = nxi_boot_gather(mine, len, &all, &lens, &n, &me_rank);
  free(mine);
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
      r = nxi_chan_peer_gp(&p, &out[k]);
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

int nx_context_peers(nx_gp_t **gps, int *count, int *rank) {
  if (gps == NULL || count == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (!up.have) {
    int r = job_peers(gps, count, rank);
    if (r == NX_ENOENT)
      nxi_boot_no_job();
    return r;
  }
  int r = nx_context_ready();
  if (r < 0)
    return r;
  nx_mutex_lock(&up.m);
  while (up.peers == NULL && !up.eof)
    nx_cond_wait(&up.c, &up.m);
  if (up.peers == NULL) {
    nx_mutex_unlock(&up.m);
    return NX_EPEERDEAD;
  }
  const uint8_t *msg = up.peers;
  size_t len = up.peers_len;
  uint32_t n = 0, my_rank = UINT32_MAX;
  nxi_ctl_parse_peers_head(msg, len, &my_rank, &n);
  nx_gp_t *out = n > 0 && n < 1u << 20 ? calloc(n, sizeof(*out)) : NULL;
  size_t off = NXI_CTL_PEERS_HEAD;
  r = out != NULL ? 0 : (n == 0 ? NX_EPROTO : NX_ENOMEM);
  for (uint32_t i = 0; r == 0 && i < n; i++) {
    struct nxi_ctl_peer p;
    r = nxi_ctl_parse_peer(msg, len, &off, &p);
    if (r == 0)
      r = nxi_chan_peer_gp(&p, &out[i]);
  }
  nx_mutex_unlock(&up.m);
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
