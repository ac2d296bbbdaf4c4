/* The creator side of process contexts: starting a program as a context
 * (posix_spawn here, or a launcher module's spawn), the handshake that makes
 * its gp, watching it, and ending it. */
#include "processes/parent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "processes/boot.h"
#include "processes/chan.h"
#include "services/confirm.h"
#include "contexts/context.h"
#include "engine/engine.h"
#include "modules/dlist.h"
#include "buffers/frame.h"
#include "services/ledger.h"
#include "processes/node.h"
#include "processes/uvloop.h"
#include "nxu_key.h"
#include "nxu_opt.h"
#include "nxu_time.h"
#include "nxu_wire.h"
#include "base/trace.h"

extern char **environ;

#define DESTROY_GRACE_MS 5000
#define KILL_GRACE_MS 2000
/* After SIGKILL: a child still not gone then (stuck in the kernel) is let
 * go of, unreaped. */
#define GIVE_UP_MS 60000
/* Where the kernel has no pidfd (Linux before 5.3): how often a child that
 * is dead or ending is looked at. */
#define REAP_LOOK_MS 10

/* The creator side: children started with nx_context_create, watched by
 * the process layer's loop (uvloop.c): the socket of each (a child that
 * dies is noticed, and its routes failed, even when no RSR goes to it),
 * the pidfd of each it forked (readable once the child has exited: it is
 * reaped then, by waitpid on its pid alone, never waitpid(-1) and never
 * through SIGCHLD, which belong to the program), and a timer for the
 * handshake's deadline, then for the stages of its end. A child a module
 * spawned is not watched (no backend tells of its end: see docs/mpi.md)
 * and not reaped here (its launcher does that). The handles and the
 * ending list are the loop thread's alone: a thread that creates or ends a
 * child hands the loop its part (nxi_uvloop_call, or _post) and, where it
 * must, waits for a flag the loop sets (nxi_uvloop_wait). The list of
 * children ready and watched is under kids_lock: the creating thread puts
 * a child on it and nx_context_destroy takes it off without waiting for
 * the loop's thread, which on a busy machine may not run for a while. */

struct child {
  struct child *next;
  pid_t pid; /* 0: a module or a PMIx server started it */
  struct nxi_chan chan;
  uint32_t proc;    /* its process, once it is ready */
  uint64_t context; /* its initial context */
  int dead;         /* its channel closed */
  int reaped;       /* waitpid returned it */
  int status;
  int signalled; /* the signal nexus sent it to end it (0: none) */
  int quiet;     /* NX_CREATE_QUIET_END: its end is logged at level 1 */
  int pidfd;     /* readable once it has exited; -1: none */
  int on_loop;   /* its handles were made (a socket channel) */
  /* The loop's: */
  uv_poll_t chan_poll;  /* its channel: READY, JOIN, its close */
  uv_poll_t pid_poll;   /* its pidfd */
  uv_timer_t timer;     /* the handshake's deadline, then the end's stages */
  uv_timer_t reap_look; /* without a pidfd: whether it exited */
  int end_stage;        /* 0 asked, 1 SIGTERM sent, 2 SIGKILL sent */
  int grace_ms;         /* from the ask to SIGTERM */
  int ending;           /* asked to end: gone once reaped */
  int closing;          /* handles not yet closed */
  int waited;           /* a thread waits for `gone`, then frees it */
  /* The handshake: its first message, for the creating thread. */
  uint8_t *rx;
  size_t rx_have;
  long rx_len; /* its length, 0 (closed) or a negative code */
  int hs_ms;
  /* Flags of nxi_uvloop_set: */
  int hs_done;
  int gone;
};

static pthread_mutex_t kids_lock = PTHREAD_MUTEX_INITIALIZER;
static struct child *kids;   /* ready and watched: under kids_lock */
static struct child *ending; /* asked to end by nx_context_destroy */
/* Whether this run handed the loop a child (nxi_parent_finalize). */
static atomic_int used;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A process forked (without exec) from a creator: the children are its
 * parent's, and so is the loop that watched them (uvloop.c forgets it).
 * It starts with none; one it creates goes on a loop of its own. */
static void forget_kids(void) {
  kids = ending = NULL;
  atomic_store(&used, 0);
  pthread_mutex_unlock(&kids_lock);
}

static void lock_kids(void) { pthread_mutex_lock(&kids_lock); }
static void unlock_kids(void) { pthread_mutex_unlock(&kids_lock); }

static void register_fork(void) {
  pthread_atfork(lock_kids, unlock_kids, forget_kids);
}

/* Marks this run as one with children, before the loop gets the first. */
static void use_loop(void) {
  pthread_once(&fork_once, register_fork);
  atomic_store(&used, 1);
}

static void report_exit(const struct child *c) {
  /* Its end, when it is the child's own doing: printed, unless its creator
   * reports ends itself (NX_CREATE_QUIET_END: NX_DEBUG level 1). */
  int level = c->quiet ? 1 : 0;
  char who[64];
  if (c->proc != 0)
    snprintf(who, sizeof(who), "process context %#x (pid %d)", c->proc,
             (int)c->pid);
  else
    snprintf(who, sizeof(who), "process context being created (pid %d)",
             (int)c->pid);
  if (WIFSIGNALED(c->status) && WTERMSIG(c->status) == c->signalled)
    nxi_log(1, NULL,
            "%s ended by nexus with signal %d (it did not exit when "
            "asked)",
            who, c->signalled); /* ours: not the child's fault */
  else if (WIFSIGNALED(c->status))
    nxi_log(level, NULL, "%s was killed by signal %d", who,
            WTERMSIG(c->status));
  else if (WIFEXITED(c->status) && WEXITSTATUS(c->status) != 0)
    nxi_log(level, NULL, "%s exited with status %d", who,
            WEXITSTATUS(c->status));
}

/* A child someone else reaped (the program's own waitpid(-1)) counts as
 * reaped: its pid may be another process's by now, never to be
 * signalled. */
static void try_reap(struct child *c) {
  if (c->reaped || c->pid == 0)
    return;
  pid_t r = waitpid(c->pid, &c->status, WNOHANG);
  if (r == c->pid) {
    c->reaped = 1;
    report_exit(c);
  } else if (r < 0 && errno == ECHILD) {
    c->reaped = 1;
    c->status = 0;
  }
}

/* A JOIN from child `proc` (a module of it came up after READY): its
 * lists here gain the module's descriptor, and their routes switch to it
 * where it is better. A JOIN that names another process, or is
 * malformed, is ignored (said at NX_DEBUG level 1). */
static void take_join(uint32_t proc, const uint8_t *msg, size_t len) {
  struct nxi_ctl_peer p;
  int r = nxi_ctl_parse_join(msg, len, &p);
  if (r == 0 && nxi_ctxid_proc(p.context) != proc)
    r = NX_EPROTO;
  if (r == 0)
    r = nxi_dlist_gain(proc, p.blob, p.len);
  if (r < 0)
    nxi_log(1, NULL, "process context %#x: a bad JOIN message (%s) ignored",
            proc, nx_strerror(r));
  else if (r > 0)
    nxi_dlist_upgrade(proc);
}

/* Everything below up to the handshake runs on the loop's thread. */

/* A child that is gone (reaped, or let go of) and whose handles are
 * closed: its thread frees it, or the loop does. */
static void child_gone(struct child *c) {
  if (c->pidfd >= 0)
    close(c->pidfd);
  c->pidfd = -1;
  if (c->waited) {
    nxi_uvloop_set(&c->gone, 1);
    return;
  }
  nxi_chan_close(&c->chan, c->dead ? NX_CTL_ABANDON : 0);
  free(c);
}

static void handle_closed(uv_handle_t *h) {
  struct child *c = h->data;
  if (--c->closing == 0)
    child_gone(c);
}

static void close_handle(struct child *c, void *handle) {
  uv_handle_t *h = handle;
  if (h->type == UV_UNKNOWN_HANDLE || uv_is_closing(h))
    return; /* never made, or closing */
  c->closing++;
  uv_close(h, handle_closed);
}

/* The end of a child asked to end: off the list, its handles closed. */
static void finish(struct child *c) {
  for (struct child **pp = &ending; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  close_handle(c, &c->chan_poll);
  close_handle(c, &c->pid_poll);
  close_handle(c, &c->timer);
  close_handle(c, &c->reap_look);
  if (c->closing == 0)
    child_gone(c);
}

/* Without a pidfd (or with one readable before waitpid had the child):
 * whether it exited, every REAP_LOOK_MS while it is dead or ending. */
static void on_reap_look(uv_timer_t *t) {
  struct child *c = t->data;
  try_reap(c);
  if (!c->reaped)
    return;
  uv_timer_stop(t);
  if (c->ending)
    finish(c);
}

static void look_for_exit(struct child *c) {
  if (!c->reaped && !uv_is_active((uv_handle_t *)&c->reap_look))
    uv_timer_start(&c->reap_look, on_reap_look, REAP_LOOK_MS, REAP_LOOK_MS);
}

/* Its pidfd is readable: it has exited. */
static void on_exit_fd(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  struct child *c = h->data;
  try_reap(c);
  uv_poll_stop(h); /* readable for good: once is enough */
  if (!c->reaped)
    look_for_exit(c);
  else if (c->ending)
    finish(c);
}

/* The stages of its end: SIGTERM once the grace after the ask is over,
 * SIGKILL 2 s later, and GIVE_UP_MS after that it is let go of. A pidfd
 * names this child alone, whatever became of its pid. */
static void on_stage(uv_timer_t *t) {
  struct child *c = t->data;
  try_reap(c);
  if (c->reaped || c->end_stage >= 2) {
    finish(c);
    return;
  }
  c->signalled = c->end_stage == 0 ? SIGTERM : SIGKILL;
  if (c->pidfd < 0 ||
      syscall(SYS_pidfd_send_signal, c->pidfd, c->signalled, NULL, 0) != 0)
    kill(c->pid, c->signalled);
  c->end_stage++;
  uv_timer_start(t, on_stage, c->end_stage == 1 ? KILL_GRACE_MS : GIVE_UP_MS,
                 0);
}

/* nxi_uvloop_call: a child asked to end (and on no list) is reaped within
 * its stages; one that is waited for is left to its thread, one that is
 * not goes on the ending list and is freed here. */
static void end_child(void *arg) {
  struct child *c = arg;
  c->ending = 1;
  c->end_stage = 0;
  if (!c->waited) {
    c->next = ending;
    ending = c;
  }
  try_reap(c);
  if (c->pid == 0 || c->reaped) {
    finish(c);
    return;
  }
  uv_timer_start(&c->timer, on_stage, (uint64_t)c->grace_ms, 0);
  if (c->pidfd < 0)
    look_for_exit(c);
}

/* After READY: JOINs, and its close. */
static void on_chan(uv_poll_t *h, int status, int events) {
  (void)events;
  static uint8_t msg[NXI_CTL_MAX]; /* the loop's thread alone */
  struct child *c = h->data;
  ssize_t got;
  while (status == 0 &&
         (got = recv(c->chan.fd, msg, NXI_CTL_MAX, MSG_DONTWAIT)) != 0) {
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (got < 0 && errno != EINTR)
      break;
    /* After READY only JOIN matters (a stream channel's bytes are not
     * framed here: a PMIx child sends nothing after READY). */
    if (got > 0 && !c->chan.stream)
      take_join(c->proc, msg, (size_t)got);
  }
  uv_poll_stop(h);
  c->dead = 1;
  try_reap(c);
  if (c->pid != 0 && c->pidfd < 0)
    look_for_exit(c);
  nxi_dlist_proc_failed(c->proc, NX_EPEERDEAD);
}

/* nxi_uvloop_post: a child with a socket channel whose handshake is done
 * (on the list already) is watched. */
static void watch_kid(void *arg) {
  struct child *c = arg;
  uv_poll_start(&c->chan_poll, UV_READABLE | UV_DISCONNECT, on_chan);
}

/* nxi_uvloop_post: a child nx_context_destroy took off the list is no
 * longer watched, and is ended. Its channel may have closed meanwhile
 * (on_chan): its lists failed with NX_ENOCONTEXT first, which stays the
 * code. */
static void end_taken(void *arg) {
  struct child *c = arg;
  if (c->on_loop)
    uv_poll_stop(&c->chan_poll);
  end_child(c);
}

/* The child of process `proc`, taken off the list, or NULL. */
static struct child *take_kid(uint32_t proc) {
  pthread_mutex_lock(&kids_lock);
  struct child **pp = &kids;
  while (*pp != NULL && (*pp)->proc != proc)
    pp = &(*pp)->next;
  struct child *c = *pp;
  if (c != NULL)
    *pp = c->next;
  pthread_mutex_unlock(&kids_lock);
  return c;
}

/* The handshake's end: the creating thread takes it from here. */
static void hs_end(struct child *c, long len) {
  c->rx_len = len;
  uv_poll_stop(&c->chan_poll);
  uv_timer_stop(&c->timer);
  nxi_uvloop_set(&c->hs_done, 1);
}

static void on_hs_late(uv_timer_t *t) { hs_end(t->data, NX_ETIMEDOUT); }

/* What the channel has of the first message: a packet, or on a stream its
 * length and then its bytes, read no further than that message. Once a
 * stream's message has begun, its rest has the whole time again. */
static void on_hs_readable(uv_poll_t *h, int status, int events) {
  (void)events;
  struct child *c = h->data;
  if (status < 0) {
    hs_end(c, NX_EIO);
    return;
  }
  if (!c->chan.stream) {
    ssize_t n = recv(c->chan.fd, c->rx, NXI_CTL_MAX, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    if (n < 0 && errno == ECONNRESET)
      n = 0;
    hs_end(c, n < 0 ? NX_EIO : n);
    return;
  }
  size_t before = c->rx_have;
  long n = nxi_ctl_recv_stream_part(c->chan.fd, c->rx, &c->rx_have);
  if (n == NX_EAGAIN) {
    if (before == 0 && c->rx_have > 0)
      uv_timer_start(&c->timer, on_hs_late, (uint64_t)c->hs_ms, 0);
    return;
  }
  if (n > 0)
    memmove(c->rx, c->rx + 4, (size_t)n);
  hs_end(c, n);
}

/* nxi_uvloop_call: a child with a socket channel gets its handles; its
 * first message is waited for, at most c->hs_ms. */
static void hs_begin(void *arg) {
  struct child *c = arg;
  uv_loop_t *loop = nxi_uvloop();
  c->on_loop = 1;
  uv_timer_init(loop, &c->timer);
  uv_timer_init(loop, &c->reap_look);
  c->timer.data = c->reap_look.data = c;
  if (c->pid > 0) {
    c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
    if (c->pidfd >= 0 && uv_poll_init(loop, &c->pid_poll, c->pidfd) == 0) {
      c->pid_poll.data = c;
      uv_poll_start(&c->pid_poll, UV_READABLE, on_exit_fd);
    } else if (c->pidfd >= 0) {
      close(c->pidfd);
      c->pidfd = -1;
    }
  }
  if (uv_poll_init_socket(loop, &c->chan_poll, c->chan.fd) != 0) {
    c->rx_len = NX_EIO;
    nxi_uvloop_set(&c->hs_done, 1);
    return;
  }
  c->chan_poll.data = c;
  uv_poll_start(&c->chan_poll, UV_READABLE | UV_DISCONNECT, on_hs_readable);
  uv_timer_start(&c->timer, on_hs_late, (uint64_t)c->hs_ms, 0);
}

/* A child started through PMIx connects back to a socket its creator
 * listens on (pmix_child) and proves itself with its token, a 16-byte
 * stream message (ctl.h) before anything else. The loop waits for it: a
 * uv_poll on the listening socket and, per connection, a uv_poll and a
 * uv_timer, every connection read at once (one that stalls, or stops
 * mid-token, holds nobody up). The first whose message is the token is the
 * channel. One that sends other bytes or closes is closed at once, one
 * without its token within TOKEN_MS of its accept then, and every other
 * when the wait ends: with the channel, or NX_ETIMEDOUT at the create's
 * timeout. parent.c owns the descriptors (socket, accept4, close) and
 * closes each after the loop closed the handle on it; libuv's streams
 * would close them with a raw system call that ThreadSanitizer does not
 * see (docs/design.md, "The process layer's loop", item 4). */
#define TOKEN_MS 2000
/* Connections read at once; the rest wait in the kernel's backlog. */
#define BACK_CONNS 64
/* How long the listener rests when accept4 fails for want of descriptors
 * or memory (the socket stays readable: without a rest, the loop spins). */
#define BACK_REST_MS 100

struct back;

struct back_conn {
  struct back_conn *next;
  struct back *b;
  int fd; /* -1 once it is the channel */
  uv_poll_t poll;
  uv_timer_t timer;    /* TOKEN_MS from its accept */
  uint8_t got[4 + 16]; /* the message's length, then the token */
  size_t have;
  int closing; /* handles not yet closed */
};

/* The wait, on the creating thread's stack. The creating thread writes
 * ls and want before back_begin, ms and spawned before back_start; the
 * loop writes the rest, and `done` (nxi_uvloop_set) last. */
struct back {
  int ls;               /* the listening socket, which the thread closes */
  uint8_t want[4 + 16]; /* the token's message: its length, the token */
  int begun;            /* back_begin: 0, or NX_EAGAIN (not watched) */
  int ms;               /* the create's timeout, from the spawn's return */
  int spawned;          /* 0, or why the child was not started */
  uv_poll_t poll;       /* ls */
  uv_timer_t deadline;  /* ms */
  uv_timer_t rest;      /* BACK_REST_MS after accept4 failed */
  int resting;
  int ending; /* back_end: no more connections */
  struct back_conn *conns;
  int nconns;
  int handles; /* not yet closed, the connections' too */
  int fd;      /* the channel, or -1 */
  int r;       /* 0, or why there is none */
  int done;    /* every handle closed: the thread takes it from here */
};

static void on_back_listen(uv_poll_t *h, int status, int events);

/* The listening socket is watched unless the listener rests, BACK_CONNS
 * connections are read or the wait is over. */
static void back_watch(struct back *b) {
  if (b->ending)
    return;
  if (!b->resting && b->nconns < BACK_CONNS)
    uv_poll_start(&b->poll, UV_READABLE, on_back_listen);
  else
    uv_poll_stop(&b->poll);
}

/* A handle's close came back: after the last, b is the thread's again. */
static void back_closed(uv_handle_t *h) {
  struct back *b = h->data;
  if (--b->handles == 0)
    nxi_uvloop_set(&b->done, 1); /* b may be gone from here */
}

static void back_conn_closed(uv_handle_t *h) {
  struct back_conn *k = h->data;
  struct back *b = k->b;
  if (--k->closing == 0) {
    if (k->fd >= 0)
      close(k->fd); /* no handle watches it now */
    free(k);
  }
  if (--b->handles == 0)
    nxi_uvloop_set(&b->done, 1);
}

/* The connection is done with (the channel, refused, late or closed): its
 * handles close, then its socket unless it is the channel. */
static void back_conn_end(struct back_conn *k) {
  struct back *b = k->b;
  if (k->closing > 0)
    return;
  for (struct back_conn **pp = &b->conns; *pp != NULL; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  b->nconns--;
  k->closing = 2;
  uv_close((uv_handle_t *)&k->poll, back_conn_closed);
  uv_close((uv_handle_t *)&k->timer, back_conn_closed);
  back_watch(b); /* one more may come */
}

static void back_conn_drop(struct back_conn *k, const char *why) {
  nxi_log(1, NULL,
          "a connection to the port a process started through PMIx connects "
          "back to: %s; closed",
          why);
  back_conn_end(k);
}

/* The wait is over, with b->fd as the channel (r 0) or none: every
 * connection and the listener's handles close, then `done` is set. */
static void back_end(struct back *b, int r) {
  if (b->ending)
    return;
  b->ending = 1;
  b->r = r;
  while (b->conns != NULL)
    back_conn_end(b->conns);
  uv_close((uv_handle_t *)&b->poll, back_closed);
  uv_close((uv_handle_t *)&b->deadline, back_closed);
  uv_close((uv_handle_t *)&b->rest, back_closed);
}

/* What the connection has sent of its token, read as far as it goes
 * without waiting; nothing past the token (the child's READY follows it
 * on what becomes the channel). Compared once whole, in constant time. */
static void back_conn_read(struct back_conn *k) {
  while (k->have < sizeof(k->got)) {
    ssize_t n =
        recv(k->fd, k->got + k->have, sizeof(k->got) - k->have, MSG_DONTWAIT);
    if (n > 0) {
      k->have += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    back_conn_drop(k, "it closed before its token");
    return;
  }
  struct back *b = k->b;
  if (!nxu_key_equal(k->got, b->want, sizeof(k->got))) {
    atomic_fetch_add(&nxi_rt.drop_bad_frame, 1); /* as attach's wrong keys */
    back_conn_drop(k, "not its token");
    return;
  }
  b->fd = k->fd;
  k->fd = -1; /* the channel: its handles close, not it */
  back_end(b, 0);
}

static void on_back_conn(uv_poll_t *h, int status, int events) {
  (void)events;
  if (status < 0)
    back_conn_drop(h->data, "it broke");
  else
    back_conn_read(h->data);
}

static void on_token_late(uv_timer_t *t) {
  back_conn_drop(t->data, "no token within 2 s");
}

/* A new connection, `fd`: its token is read as it comes. */
static void back_conn_begin(struct back *b, int fd) {
  uv_loop_t *loop = nxi_uvloop();
  struct back_conn *k = calloc(1, sizeof(*k));
  if (k == NULL || uv_poll_init_socket(loop, &k->poll, fd) != 0) {
    free(k);
    close(fd);
    return;
  }
  uv_timer_init(loop, &k->timer);
  k->b = b;
  k->fd = fd;
  k->poll.data = k->timer.data = k;
  k->next = b->conns;
  b->conns = k;
  b->nconns++;
  b->handles += 2;
  uv_timer_start(&k->timer, on_token_late, TOKEN_MS, 0);
  uv_poll_start(&k->poll, UV_READABLE, on_back_conn);
  back_conn_read(k);
}

static void on_back_rest(uv_timer_t *t) {
  struct back *b = t->data;
  b->resting = 0;
  back_watch(b);
}

/* The listening socket is readable: every connection waiting is accepted,
 * up to BACK_CONNS read at once. */
static void on_back_listen(uv_poll_t *h, int status, int events) {
  (void)events;
  struct back *b = h->data;
  int fd, rest = status != 0;
  while (!rest && !b->ending && b->nconns < BACK_CONNS) {
    if ((fd = nxi_chan_accept(b->ls, &rest)) >= 0)
      back_conn_begin(b, fd); /* may end the wait */
    else if (!rest)
      return; /* none waits */
  }
  if (b->ending)
    return;
  if (b->nconns < BACK_CONNS) {
    b->resting = 1;
    uv_timer_start(&b->rest, on_back_rest, BACK_REST_MS, 0);
  }
  back_watch(b);
}

static void on_back_late(uv_timer_t *t) { back_end(t->data, NX_ETIMEDOUT); }

/* nxi_uvloop_call, before the spawn: the loop watches the listening
 * socket (b->begun stays 0), or cannot (NX_EAGAIN). */
static void back_begin(void *arg) {
  struct back *b = arg;
  uv_loop_t *loop = nxi_uvloop();
  if (uv_poll_init_socket(loop, &b->poll, b->ls) != 0) {
    b->begun = NX_EAGAIN;
    return;
  }
  uv_timer_init(loop, &b->deadline);
  uv_timer_init(loop, &b->rest);
  b->poll.data = b->deadline.data = b->rest.data = b;
  b->handles = 3;
  back_watch(b);
}

/* nxi_uvloop_call, once the spawn returned: the wait has the create's
 * timeout from now, or ends if the spawn failed (or it is over already). */
static void back_start(void *arg) {
  struct back *b = arg;
  if (b->spawned < 0)
    back_end(b, b->spawned);
  else if (!b->ending)
    uv_timer_start(&b->deadline, on_back_late, (uint64_t)b->ms, 0);
}

/* Everything from here runs on the program's threads. */

/* Ends child c, which is on no list, within its stages from `grace_ms`
 * on, and waits until it is gone (or let go of). */
static void end_and_wait(struct child *c, int grace_ms) {
  if (!c->on_loop) {
    if (c->pid > 0) { /* forked, but the loop never came (no thread) */
      kill(c->pid, SIGKILL);
      waitpid(c->pid, &c->status, 0);
    }
    return;
  }
  c->waited = 1;
  c->grace_ms = grace_ms;
  nxi_uvloop_call(end_child, c); /* the loop runs: c is on it */
  nxi_uvloop_wait(&c->gone);
}

/* The first message on a child's channel, into `buf` (NXI_CTL_MAX + 4
 * bytes): its length, 0 when the channel closed, or a negative code.
 * A socket's is read by the loop; a module's channel waits in the module. */
static long first_message(struct child *c, uint8_t *buf, int timeout_ms) {
  if (c->chan.fd < 0)
    return nxi_chan_recv(&c->chan, buf, timeout_ms);
  c->rx = buf;
  c->hs_ms = timeout_ms;
  use_loop();
  int r = nxi_uvloop_post(hs_begin, c); /* then one wait, for its end */
  if (r < 0)
    return r;
  nxi_uvloop_wait(&c->hs_done);
  c->rx = NULL;
  return c->rx_len;
}

/* "NX_KEY=<32 hex digits>": the computation's key, for a child. */
static void key_var(char *buf, size_t cap) {
  if (cap < 8 + 2 * NX_KEY_SIZE)
    return;
  memcpy(buf, "NX_KEY=", 7);
  nxu_hex_encode(nxi_rt.key, NX_KEY_SIZE, buf + 7);
}

/* Whether `var` ("NAME=...") sets a name that is in `vars` (NULL-ended
 * "NAME=value" entries, or NULL). */
static int var_in(const char *var, char *const *vars) {
  size_t len = strcspn(var, "=");
  for (size_t i = 0; vars != NULL && vars[i] != NULL; i++)
    if (strncmp(vars[i], var, len) == 0 && vars[i][len] == '=')
      return 1;
  return 0;
}

/* The child's environment: ours (unless NX_CREATE_ENV_ONLY), without
 * launcher variables and those `extra` sets, then `extra`, plus its
 * channel, the computation's key and NX_CTL_LATE. Built before the spawn. */
static char **child_env(int fd, const nx_context_attr_t *attr) {
  char *const *extra = attr->env;
  size_t n = 0, x = 0;
  while (!(attr->flags & NX_CREATE_ENV_ONLY) && environ[n] != NULL)
    n++;
  while (extra != NULL && extra[x] != NULL)
    x++;
  char **env = calloc(n + x + 4, sizeof(char *));
  if (env == NULL)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "NX_CTL_FD=", 10) != 0 &&
        strncmp(environ[i], "NX_CTL_LATE=", 12) != 0 &&
        strncmp(environ[i], "NX_KEY=", 7) != 0 &&
        strncmp(environ[i], "NX_RANK=", 8) != 0 &&
        strncmp(environ[i], "NX_SIZE=", 8) != 0 &&
        strncmp(environ[i], "NX_PROC_ID=", 11) != 0 &&
        !var_in(environ[i], extra))
      env[k++] = environ[i];
  for (size_t i = 0; i < x; i++)
    env[k++] = extra[i];
  static char fd_var[32];
  static char key[8 + 2 * NX_KEY_SIZE];
  snprintf(fd_var, sizeof(fd_var), "NX_CTL_FD=%d", fd);
  key_var(key, sizeof(key));
  env[k++] = fd_var;
  env[k++] = key;
  /* This creator takes modules that join after READY (the loop reads
   * their JOIN): the child may leave its slow ones for later. */
  env[k++] = "NX_CTL_LATE=1";
  return env;
}

/* NX_CREATE_TIMEOUT, checked at nx_init (nxu_opt_check_all). */
static int create_timeout_ms(void) {
  uint64_t s = 30;
  char why[128];
  nxu_opt_number("NX_CREATE_TIMEOUT", &s, why, sizeof(why));
  return (int)s * 1000;
}

/* Starts a child with posix_spawn and a socket pair as its channel. glibc
 * spawns with clone(CLONE_VM | CLONE_VFORK): the child shares this
 * process's memory until its exec, so no page table is copied and no page
 * of ours is left copy-on-write (a fork did both, and the larger the
 * creator, the more it cost). An exec that fails is posix_spawnp's return
 * value; glibc reaps that child itself. */
static int fork_child(const char *exe, char *const argv[],
                      const nx_context_attr_t *attr, struct child *c) {
  static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&create_lock); /* child_env's static strings */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    pthread_mutex_unlock(&create_lock);
    return NX_EAGAIN;
  }
  char **env = child_env(sv[1], attr);
  int r = NX_ENOMEM;
  posix_spawn_file_actions_t fa;
  if (env == NULL || posix_spawn_file_actions_init(&fa) != 0)
    goto err_free;
  /* A dup2 onto itself clears close-on-exec, in the child alone (glibc
   * 2.29; POSIX.1-2024): the channel's end is the one descriptor the child
   * keeps. */
  pid_t pid = -1;
  int e = posix_spawn_file_actions_adddup2(&fa, sv[1], sv[1]);
  if (e == 0)
    e = posix_spawnp(&pid, exe, &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) {
    /* No process could be made, or the program could not be started. */
    r = e == EAGAIN || e == ENOMEM ? NX_EAGAIN : NX_ENOENT;
    goto err_free;
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

/* What a launcher passes on to a child (NULL-ended): the entries of
 * `attr`, then `a` and `b` (either may be NULL). Free the array only. */
static char **launcher_env(const nx_context_attr_t *attr, char *a, char *b) {
  size_t x = 0;
  while (attr->env != NULL && attr->env[x] != NULL)
    x++;
  char **env = calloc(x + 3, sizeof(*env));
  if (env == NULL)
    return NULL;
  for (size_t i = 0; i < x; i++)
    env[i] = attr->env[i];
  env[x] = a;
  env[x + (a != NULL)] = b;
  return env;
}

/* Starts a child through module m's launcher; its channel is the
 * module's. Besides what the launcher gives it, it gets the key. */
static int spawn_child(struct nxi_module *m, const nx_node_t *node,
                       const char *exe, char *const argv[],
                       const nx_context_attr_t *attr, int timeout_ms,
                       struct child *c) {
  char key[8 + 2 * NX_KEY_SIZE];
  key_var(key, sizeof(key));
  char **env = launcher_env(attr, key, NULL);
  if (env == NULL)
    return NX_ENOMEM;
  void *ctl = NULL;
  int r = m->launch->spawn(m->state, node->host, node->id, exe, argv,
                           (const char *const *)env, timeout_ms, &ctl);
  free(env);
  if (r < 0)
    return r;
  c->pid = 0;
  c->reaped = 1; /* nothing for us to reap */
  c->chan.mod = m;
  c->chan.ctl = ctl;
  return 0;
}

/* Where `exe` is on this host (a name without '/' is searched in PATH),
 * into `out`. Open MPI's mpirun ends the whole job when a program it is
 * asked to spawn cannot be run, so a PMIx child's program is looked for
 * here first. */
static int find_exe(const char *exe, char *out, size_t cap) {
  if (strchr(exe, '/') != NULL) {
    if (strlen(exe) >= cap || access(exe, X_OK) != 0)
      return NX_ENOENT;
    strcpy(out, exe);
    return 0;
  }
  const char *path = getenv("PATH");
  if (path == NULL || path[0] == '\0')
    path = "/usr/local/bin:/usr/bin:/bin";
  while (*path != '\0') {
    size_t len = strcspn(path, ":");
    if (len > 0 && len + 1 + strlen(exe) < cap) {
      snprintf(out, cap, "%.*s/%s", (int)len, path, exe);
      if (access(out, X_OK) == 0)
        return 0;
    }
    path += len + (path[len] == ':');
  }
  return NX_ENOENT;
}

/* "NX_CTL_TCP=<token>:<port>:<ip>,<ip>...": where a child started through
 * PMIx connects back to (every IPv4 address of this host that is up) and
 * the 16-byte token (hex) it proves itself with. */
static int tcp_var(char *buf, size_t cap, const uint8_t *token, int port) {
  int n = snprintf(buf, cap, "NX_CTL_TCP=");
  nxu_hex_encode(token, 16, buf + n);
  n += 32;
  n += snprintf(buf + n, cap - (size_t)n, ":%d:", port);
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return NX_EIO;
  int count = 0;
  for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
        !(i->ifa_flags & IFF_UP))
      continue;
    char ip[INET_ADDRSTRLEN];
    const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;
    if (inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip)) == NULL ||
        (size_t)n + strlen(ip) + 2 >= cap)
      continue;
    n += snprintf(buf + n, cap - (size_t)n, "%s%s", count ? "," : "", ip);
    count++;
  }
  freeifaddrs(ifs);
  return count > 0 ? 0 : NX_EUNREACH;
}

/* Starts a child through the PMIx server this process joined
 * (PMIx_Spawn); its channel is a TCP connection it makes back to us,
 * proven by a token that only its environment holds. The loop waits for
 * that connection (struct back) from before the spawn, so that one made
 * meanwhile is read at once; the create's timeout runs from the spawn's
 * return, as the handshake's does. */
static int pmix_child(const nx_node_t *node, const char *exe,
                      char *const argv[], const nx_context_attr_t *attr,
                      int timeout_ms, struct child *c) {
  char path[4096];
  int r = find_exe(exe, path, sizeof(path));
  if (r < 0)
    return r;
  uint8_t token[16];
  if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token))
    return NX_EIO;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t salen = sizeof(sa);
  if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(ls, 8) != 0 || getsockname(ls, (struct sockaddr *)&sa, &salen)) {
    if (ls >= 0)
      close(ls);
    return NX_EAGAIN;
  }
  struct back b = {.ls = ls, .fd = -1};
  nxu_le32(b.want, sizeof(token));
  memcpy(b.want + 4, token, sizeof(token));
  /* nx_context_create is never on the loop's thread (NX_EBUSY there), so
   * the call hands the loop the wait; without a loop, nothing is spawned
   * for want of one. */
  if (nxi_uvloop_call(back_begin, &b) < 0 || b.begun < 0) {
    close(ls);
    return NX_EAGAIN;
  }
  /* PMIx_Spawn copies the variables: they may live on this stack. */
  char tcp[4096], key[8 + 2 * NX_KEY_SIZE];
  key_var(key, sizeof(key));
  r = tcp_var(tcp, sizeof(tcp), token, ntohs(sa.sin_port));
  char **env = r == 0 ? launcher_env(attr, key, tcp) : NULL;
  if (r == 0 && env == NULL)
    r = NX_ENOMEM;
  if (r == 0) {
    const char *host =
        strncmp(node->host, "pmix:host=", 10) == 0 ? node->host + 10 : NULL;
    r = nxi_pmix_spawn(path, argv, env, host);
  }
  free(env);
  b.ms = timeout_ms;
  b.spawned = r;
  /* The loop runs (it watches ls): this call fails only if nx_finalize
   * closed it meanwhile, and then nothing is left to wait for. */
  if (nxi_uvloop_call(back_start, &b) < 0) {
    close(ls);
    return NX_EAGAIN;
  }
  nxi_uvloop_wait(&b.done);
  close(ls); /* its handle is closed */
  if (r == 0)
    r = b.r;
  if (r < 0) {
    if (b.fd >= 0)
      close(b.fd);
    return r;
  }
  c->pid = 0;
  c->reaped = 1; /* its launcher reaps it */
  c->chan.fd = b.fd;
  c->chan.stream = 1;
  return 0;
}

/* Waits for the child's READY, makes its gp, and tells the child who its
 * creator is (its one peer). The same for every kind of channel. */
static int handshake(struct child *c, int timeout_ms, nx_gp_t *gp) {
  uint8_t *buf = malloc(NXI_CTL_MAX + 4);
  long n = buf != NULL ? first_message(c, buf, timeout_ms) : NX_ENOMEM;
  struct nxi_ctl_peer ready;
  int r;
  if (n == 0)
    r = NX_EPEERDEAD;
  else if (n < 0)
    r = (int)n;
  else
    r = nxi_ctl_parse_ready(buf, (size_t)n, &ready);
  nx_gp_t child_gp = NX_GP_NULL;
  if (r == 0)
    r = nxi_chan_peer_gp(&ready, &child_gp);
  if (r == 0) {
    nxi_ctl_put_peers_head(buf, UINT32_MAX, 1);
    size_t len = nxi_chan_self_entry(buf + NXI_CTL_PEERS_HEAD,
                                     NXI_CTL_MAX - NXI_CTL_PEERS_HEAD);
    r = len > 0 ? nxi_chan_send(&c->chan, buf, NXI_CTL_PEERS_HEAD + len)
                : NX_ENOMEM;
    if (r < 0)
      nx_gp_release(&child_gp);
  }
  free(buf);
  if (r == 0)
    *gp = child_gp;
  /* A malformed READY (a bad or truncated descriptor list included) is
   * the child's fault: NX_EPEERDEAD, as process.h promises. */
  return r == NX_EPROTO || r == NX_ERANGE ? NX_EPEERDEAD : r;
}

static void kill_and_reap(struct child *c, int grace_ms);

/* Whether `attr` is well formed (nx_context_create_attr). */
static int attr_ok(const nx_context_attr_t *attr) {
  if ((attr->flags & ~(NX_CREATE_ENV_ONLY | NX_CREATE_QUIET_END)) != 0 ||
      attr->timeout_ms < 0)
    return 0;
  for (size_t i = 0; attr->env != NULL && attr->env[i] != NULL; i++) {
    const char *v = attr->env[i];
    const char *eq = strchr(v, '=');
    if (eq == NULL || eq == v || strchr(v, '\n') != NULL ||
        strncmp(v, "NX_KEY=", 7) == 0 || strncmp(v, "NX_CTL_FD=", 10) == 0 ||
        strncmp(v, "NX_CTL_TCP=", 11) == 0 ||
        strncmp(v, "NX_CTL_LATE=", 12) == 0)
      return 0;
  }
  return 1;
}

int nx_context_create(const nx_node_t *node, const char *exe,
                      char *const argv[], nx_gp_t *gp) {
  return nx_context_create_attr(node, exe, argv, NULL, gp);
}

int nx_context_create_attr(const nx_node_t *node, const char *exe,
                           char *const argv[], const nx_context_attr_t *attr,
                           nx_gp_t *gp) {
  static const nx_context_attr_t defaults = {NULL, 0, 0};
  if (attr == NULL)
    attr = &defaults;
  if (node == NULL || exe == NULL || exe[0] == '\0' || gp == NULL ||
      !attr_ok(attr))
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (nxi_uvloop_here())
    return NX_EBUSY; /* its handshake needs this thread */
  struct nxi_module *m = NULL;
  int pmix = 0;
  if (!nxi_node_is_local(node) &&
      (m = nxi_module_launcher(node->host)) == NULL) {
    if (!nxi_node_spec_pmix(node->host) || !nxi_boot_pmix())
      return NX_ENOTSUP;
    pmix = 1;
  }
  if ((m != NULL || pmix) && (attr->flags & NX_CREATE_ENV_ONLY))
    return NX_ENOTSUP; /* a launcher gives its processes its environment */
  char *const default_argv[] = {(char *)exe, NULL};
  if (argv == NULL || argv[0] == NULL)
    argv = default_argv;
  struct child *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NX_ENOMEM;
  c->chan.fd = -1;
  c->pidfd = -1;
  c->quiet = (attr->flags & NX_CREATE_QUIET_END) != 0;
  int timeout_ms =
      attr->timeout_ms > 0 ? attr->timeout_ms : create_timeout_ms();
  uint64_t start = nxu_now_ms();
  int r = m != NULL ? spawn_child(m, node, exe, argv, attr, timeout_ms, c)
          : pmix    ? pmix_child(node, exe, argv, attr, timeout_ms, c)
                    : fork_child(exe, argv, attr, c);
  if (r < 0) {
    free(c);
    return r;
  }
  if (nxi_tracing())
    nxi_trace_event(NXT_PROC_CREATE, 0, 0, 0, 0, 0xff, 0, (uint32_t)c->pid, 0);
  uint64_t spent = nxu_now_ms() - start;
  nx_gp_t child_gp = NX_GP_NULL;
  r = handshake(c, spent < (uint64_t)timeout_ms ? timeout_ms - (int)spent : 1,
                &child_gp);
  if (r == NX_ETIMEDOUT)
    nxi_log(0, NULL,
            "process context %s (pid %d) started but did not call "
            "nx_context_ready or nx_context_serve within %d s "
            "(NX_CREATE_TIMEOUT): nx_context_create returns NX_ETIMEDOUT "
            "and ends it",
            exe, (int)c->pid, timeout_ms / 1000);
  if (r == 0) {
    c->context = child_gp.context;
    c->proc = nxi_ctxid_proc(c->context);
    use_loop();
    /* Watched from the loop, posted before any later call of ours; a
     * module's child has no handles there, and nx_context_destroy frees
     * it on the destroying thread, so nothing is posted that could read
     * it after that. */
    r = c->on_loop ? nxi_uvloop_post(watch_kid, c) : 0;
    if (r < 0) {
      nx_gp_release(&child_gp);
    } else {
      pthread_mutex_lock(&kids_lock);
      c->next = kids;
      kids = c;
      pthread_mutex_unlock(&kids_lock);
    }
  }
  if (r < 0) {
    kill_and_reap(c, 0); /* it failed us already: no grace */
    nxi_chan_close(&c->chan, NX_CTL_ABANDON);
    free(c);
    return r;
  }
  if (nxi_tracing())
    nxi_trace_event(NXT_PROC_READY, 0, child_gp.context, 0, 0, 0xff, 0,
                    (uint32_t)c->pid, 0);
  *gp = child_gp;
  return 0;
}

/* Asks the child to end: a destroy message with how many of its RSRs ran
 * here, so that its nx_finalize need not ask (a creator in MPI's
 * disconnect may not answer; ledger.h). The loop never writes on a
 * channel: this thread may. */
static void ask_to_end(struct child *c) {
  uint8_t msg[NXI_CTL_DESTROY_LEN] = {NXI_CTL_DESTROY};
  nxu_le32(msg + 1, nxi_rt.proc_id);
  for (unsigned g = 0; g < NXI_FRAME_GENS; g++)
    nxu_le64(msg + 5 + 8 * g, nxi_ledger_handled_from(c->proc, g));
  nxi_chan_send(&c->chan, msg, sizeof(msg));
}

/* Asks the child to end, gives it `grace_ms`, then insists, and waits
 * until it is reaped. A child a module spawned is only asked: its
 * launcher reaps it, and closing its channel (MPI's disconnect) waits
 * until it has let go. */
static void kill_and_reap(struct child *c, int grace_ms) {
  ask_to_end(c);
  end_and_wait(c, grace_ms);
}

static int process_destroy(uint64_t context) {
  uint32_t proc = nxi_ctxid_proc(context);
  /* Tracing: the clock offset to it at its end, while it still answers
   * (nothing if it is not a peer this process sent to). */
  if (nxi_eng_me.handlers == 0)
    nxi_confirm_clock_end(proc, 50);
  struct child *c = atomic_load(&used) ? take_kid(proc) : NULL;
  if (c == NULL)
    return NX_ENOCONTEXT;
  /* What this process sent it runs before it is asked to end (ledger.h);
   * what does not, in time, is reported when it is gone. */
  if (nxi_eng_me.handlers == 0)
    nxi_confirm_flush_proc(proc, DESTROY_GRACE_MS);
  /* Its lists fail before it ends: a module that sees its connections
   * close would call it dead (NX_EPEERDEAD) first, and the first code a
   * list fails with is the one RSRs and the error callback get. */
  nxi_dlist_proc_failed(proc, NX_ENOCONTEXT);
  ask_to_end(c);
  if (!c->on_loop) {
    /* A module's child: its launcher reaps it, and closing its channel
     * (MPI's disconnect) waits until it has let go. */
    nxi_chan_close(&c->chan, 0);
    free(c);
    return 0;
  }
  /* A child with a socket is left to the loop, which reaps it (nx_finalize
   * waits for what is left): the creator does not wait for the child's
   * modules to tear down (ucx's worker: about a millisecond). This may be
   * the loop's thread (an error callback), which must not wait for
   * itself. */
  c->grace_ms = DESTROY_GRACE_MS;
  if (nxi_uvloop_post(end_taken, c) < 0)
    nxi_uvloop_call(end_taken, c); /* no memory: wait for it instead */
  return 0;
}

int nx_context_destroy(const nx_gp_t *gp) {
  if (gp == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (gp->context == nxi_rt.initial->id)
    return NX_EBUSY;
  if (nxi_ctxid_proc(gp->context) != nxi_rt.proc_id)
    return process_destroy(gp->context);
  return nxi_context_destroy_local(gp->context);
}

/* nxi_uvloop_call: both lists, for nxi_parent_finalize. Those asked to end
 * already are now waited for; the others are no longer watched. */
struct all {
  struct child *kids, *ending;
};

static void take_all(void *arg) {
  struct all *a = arg;
  pthread_mutex_lock(&kids_lock);
  a->kids = kids;
  kids = NULL;
  pthread_mutex_unlock(&kids_lock);
  a->ending = ending;
  ending = NULL;
  for (struct child *c = a->kids; c != NULL; c = c->next)
    if (c->on_loop)
      uv_poll_stop(&c->chan_poll);
  for (struct child *c = a->ending; c != NULL; c = c->next)
    c->waited = 1;
}

void nxi_parent_finalize(void) {
  struct all a = {NULL, NULL};
  if (!atomic_exchange(&used, 0) || nxi_uvloop_call(take_all, &a) < 0)
    return;
  /* Those destroyed already are waited for first: they were asked to end
   * earlier, and most have by now. */
  while (a.ending != NULL) {
    struct child *c = a.ending;
    a.ending = c->next;
    nxi_uvloop_wait(&c->gone);
    nxi_chan_close(&c->chan, c->dead ? NX_CTL_ABANDON : 0);
    free(c);
  }
  while (a.kids != NULL) {
    struct child *c = a.kids;
    a.kids = c->next;
    kill_and_reap(c, DESTROY_GRACE_MS);
    nxi_chan_close(&c->chan, c->dead ? NX_CTL_ABANDON : 0);
    free(c);
  }
}
