/* A spawned task's stdout and stderr. With pvm_catchout: each line goes
 * to the task that caught them, which writes it with PVM's prefix
 * ("[t<tid>] ", with a BEGIN and an EOF line per task) or, with
 * PvmShowTids 0, as it came. Without: written to the task log, as PVM's
 * pvmd writes its tasks' output to its log, $PVM_TMP/pvml.<uid>. Either
 * way the task's descriptors 1 and 2 point at a pipe from its first PVM
 * call; tasks it spawns send theirs to the same tid unless it calls
 * pvm_catchout itself.
 *
 * Who reads the pipe. PVM's pvmd reads a task's output until the task's
 * process ends, so what it writes after pvm_exit, or what exit() flushes
 * (C stdio buffers, gfortran's units), still comes with the prefix and
 * before the EOF. No code of a process runs after exit's last flush, so
 * the reader must live elsewhere: a task on the catching task's host
 * hands the pipe's read end to it (a Unix socket, SCM_RIGHTS), where the
 * keeper thread below reads it until every write end has closed, that is
 * until the task's process (and whatever it started that kept the
 * descriptors) has ended, and only then writes the EOF line. Where the
 * hand-over cannot be made (the catching task on another host: the
 * socket is host-local), a thread of the task's own reads the pipe and
 * sends each line by RSR, until its pvm_exit or exit. The task log is
 * written by the task's own thread too. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

enum out_kind { O_BEGIN = 1, O_LINE, O_END };

/* This task's own output (the writer's side). */
static int out_fd = -1, saved_out = -1, saved_err = -1;
static int log_fd = -1; /* the task log, when the output goes there */
static int log_tid;     /* the tid its lines carry (set before the reader) */
static nx_thread_t out_thread;
static int out_running;
static atomic_int out_done;  /* out_main sent its EOF */
static atomic_uint out_sent; /* lines (and BEGIN) sent: its progress */
static int handed;           /* out_fd's copy went to the keeper */
static int handed_sock = -1; /* the connection it went on */
static nx_thread_t watch_th; /* watch_main */
static int watching;
static atomic_int watch_stop;

/* The keeper (a catching task): the pipes its caught tasks on this host
 * handed over. `h` is the keeper thread's alone; pvm_exit reads the
 * counters. */
struct held {
  int conn; /* the task's connection: open until its pipe has ended */
  int fd;   /* the pipe's read end; -1 until handed over */
  int tid;
  struct line {
    char *s;
    size_t len, cap;
  } line;
};

static struct {
  int lfd, wake[2];
  uint64_t key; /* names the socket (0: no keeper) */
  nx_thread_t th;
  int running;
  atomic_int stop;
  atomic_int open;   /* connections held (handed over or not yet) */
  atomic_uint moved; /* lines written: progress, for pvm_exit's wait */
  struct held *h;
  int n, cap;
} kp = {.lfd = -1, .wake = {-1, -1}};

/* A keeper's socket address: Linux's abstract namespace, so nothing is
 * left in the file system when the process dies. A random key names it:
 * only a task told the key (in its hello) finds it. Elsewhere the bind
 * fails, and tasks send their lines by RSR. */
static socklen_t key_addr(uint64_t key, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1,
                   "nxpvm.out.%016llx", (unsigned long long)key);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The tid a task spawned now sends its output to (0: none), and the key
 * of the keeper that reads it on this host (0: none, or not here). A task
 * that catches starts its keeper here. */
int nxpvmi_out_dest(uint64_t *key) {
  nx_mutex_lock(&nxpvm.m);
  int catching = nxpvm.catch_ff != NULL;
  int tid = catching ? nxpvm.mytid : nxpvm.out_tid;
  uint64_t k = catching ? 0 : nxpvm.out_key;
  nx_mutex_unlock(&nxpvm.m);
  if (catching && nxpvmi_out_keep_start() == 0)
    k = kp.key;
  *key = k;
  return tid;
}

/* Writes one caught line (or BEGIN, EOF) of task `from`, as PVM's libpvm
 * writes them: to pvm_catchout's file (stdout once it is turned off). */
static void out_print(int from, int kind, const char *s, size_t n) {
  nx_mutex_lock(&nxpvm.m);
  FILE *ff = nxpvm.catch_ff != NULL ? nxpvm.catch_ff : stdout;
  int tids = nxpvm.showtids;
  nx_mutex_unlock(&nxpvm.m);
  if (!tids && kind != O_LINE)
    return;
  flockfile(ff); /* one line at a time among the writers */
  if (tids)
    fprintf(ff, "[t%x] ", (unsigned)from);
  if (kind == O_BEGIN)
    fputs("BEGIN", ff);
  else if (kind == O_END)
    fputs("EOF", ff);
  else if (n > 0)
    fwrite(s, 1, n, ff);
  fputc('\n', ff);
  fflush(ff);
  funlockfile(ff);
}

/* Adds `n` bytes to `l`, giving each whole line to `emit`. A character
 * that finds no memory is lost, not the line. */
static void feed(struct line *l, const char *buf, size_t n,
                 void (*emit)(void *, const char *, size_t), void *arg) {
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n') {
      emit(arg, l->s, l->len);
      l->len = 0;
      continue;
    }
    if (l->len == l->cap) {
      size_t c = l->cap ? 2 * l->cap : 256;
      char *s = realloc(l->s, c);
      if (s == NULL)
        continue;
      l->s = s;
      l->cap = c;
    }
    l->s[l->len++] = buf[i];
  }
}

/* One line to the task log, in one writev (the log is opened to append,
 * so the lines of tasks writing at once do not mix): the time as PVM's
 * pvmd writes it, the task and the line. */
static void log_line(const char *s, size_t n) {
  char head[64];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  int h = snprintf(head, sizeof(head), "%02d/%02d %02d:%02d:%02d [t%x] ",
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (unsigned)log_tid);
  struct iovec v[3] = {{head, (size_t)h}, {(void *)s, n}, {"\n", 1}};
  ssize_t w = writev(log_fd, v, 3);
  (void)w; /* a full disk loses the line, as it would PVM's */
}

static void out_send(int kind, const char *s, size_t n) {
  if (log_fd >= 0) {
    if (kind == O_LINE)
      log_line(s, n);
    atomic_fetch_add(&out_sent, 1);
    return;
  }
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *b;
  /* The catching task may have left PVM: it waits for us, and prints. */
  if (nxpvmi_resolve_process(nxpvm.out_tid, &gp) < 0)
    return;
  if (nxpvmi_rsr(nxpvm.out_tid, &gp, H_OUT, n + 16, &b) == 0) {
    int rc = nx_put_int32(b, kind);
    if (rc == 0)
      rc = nx_put_uint32(b, (uint32_t)n);
    if (rc == 0 && n > 0)
      rc = nx_put_char_array(b, s, n);
    if (rc == 0)
      nxpvmi_send(b);
    else
      nx_buffer_release(b);
  }
  nx_gp_release(&gp);
  atomic_fetch_add(&out_sent, 1);
}

static void send_line(void *arg, const char *s, size_t n) {
  (void)arg;
  out_send(O_LINE, s, n);
}

/* Reads the pipe until every writer has closed it, sending each line. */
static void *out_main(void *arg) {
  (void)arg;
  struct line l = {NULL, 0, 0};
  char buf[4096];
  out_send(O_BEGIN, NULL, 0);
  for (;;) {
    ssize_t r = read(out_fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    feed(&l, buf, (size_t)r, send_line, NULL);
  }
  if (l.len > 0)
    out_send(O_LINE, l.s, l.len);
  out_send(O_END, NULL, 0);
  free(l.s);
  atomic_store(&out_done, 1);
  return NULL;
}

/* A task whose pipe went to the keeper keeps a copy of the read end, so
 * that its writes never meet a pipe without a reader (SIGPIPE) while the
 * keeper lives, and this thread, which waits for the keeper to hang up.
 * If it does while the task still runs (its process died, or it gave up
 * waiting for a pipe that a leftover process held open), the thread
 * reads the pipe and drops the lines: the writers never block. */
static void *watch_main(void *arg) {
  (void)arg;
  char buf[4096];
  ssize_t r;
  while ((r = read(handed_sock, buf, sizeof(buf))) > 0 ||
         (r < 0 && errno == EINTR))
    ;
  if (atomic_load(&watch_stop))
    return NULL; /* the process is ending: the keeper reads on */
  while ((r = read(out_fd, buf, sizeof(buf))) > 0 || (r < 0 && errno == EINTR))
    ;
  return NULL;
}

/* Gives the read end `rfd` to the keeper named by nxpvm.out_key, with our
 * tid; returns the connection, or -1 (no keeper on this host). */
static int hand_over(int rfd) {
  if (nxpvm.out_key == 0)
    return -1;
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0)
    return -1;
  struct sockaddr_un a;
  socklen_t alen = key_addr(nxpvm.out_key, &a);
  int32_t tid = nxpvm.mytid;
  struct iovec v = {&tid, sizeof(tid)};
  union {
    struct cmsghdr align;
    char b[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof(u));
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = u.b;
  m.msg_controllen = sizeof(u.b);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &rfd, sizeof(int));
  if (connect(s, (struct sockaddr *)&a, alen) < 0 ||
      sendmsg(s, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(tid)) {
    close(s);
    return -1;
  }
  return s;
}

static int out_start(int tid);

/* Sends this task's stdout and stderr to `tid` from now on. */
int nxpvmi_out_start(int tid) {
  if (tid <= 0)
    return PvmSysErr;
  return out_start(tid);
}

/* Writes this task's stdout and stderr to the task log from now on:
 * $PVM_TMP/pvml.<uid> ($PVM_TMP: /tmp when not set), where PVM's pvmd
 * writes them. When it cannot be opened, the output stays where it is. */
int nxpvmi_out_start_log(void) {
  const char *dir = getenv("PVM_TMP");
  char path[1024];
  snprintf(path, sizeof(path), "%s/pvml.%u",
           dir != NULL && dir[0] != '\0' ? dir : "/tmp", (unsigned)getuid());
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return PvmSysErr;
  log_fd = fd;
  log_tid = nxpvm.mytid;
  int rc = out_start(0);
  if (rc < 0) {
    close(log_fd);
    log_fd = -1;
  }
  return rc;
}

/* Points descriptors 1 and 2 at a pipe whose read end goes to the keeper
 * of `tid` on this host, or else is read by a thread of ours that sends
 * each line to `tid` (0: writes it to the task log). */
static int out_start(int tid) {
  int fds[2];
  if (out_running || handed || pipe2(fds, O_CLOEXEC) < 0)
    return PvmSysErr;
  fflush(stdout);
  fflush(stderr);
  int sock = tid > 0 ? hand_over(fds[0]) : -1;
  if (sock >= 0) {
    /* From here the keeper reads the pipe to its end: descriptors 1 and
     * 2 stay on it for the life of the process, pvm_exit or not. */
    if (dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0) {
      close(sock);
      close(fds[0]);
      close(fds[1]);
      return PvmSysErr;
    }
    close(fds[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    out_fd = fds[0];
    handed_sock = sock;
    handed = 1;
    nxpvm.out_tid = tid;
    if (nx_thread_create(&watch_th, watch_main, NULL) == 0) {
      watching = 1;
    } else {
      /* No watcher: the keeper alone reads (its end would be SIGPIPE). */
      close(out_fd);
      out_fd = -1;
    }
    return PvmOk;
  }
  /* What descriptors 1 and 2 become again when the task leaves PVM: what
   * they were, or, for a task whose output goes to the log, the log
   * itself (without the prefix). Not the spawner's pipe, which they
   * inherited: a copy kept here would hold the spawner's pipe open, and
   * its pvm_exit would wait for this task's. */
  saved_out = dup(tid > 0 ? 1 : log_fd);
  saved_err = dup(tid > 0 ? 2 : log_fd);
  if (saved_out < 0 || saved_err < 0 || dup2(fds[1], 1) < 0 ||
      dup2(fds[1], 2) < 0) {
    close(fds[0]);
    close(fds[1]);
    return PvmSysErr;
  }
  close(fds[1]);
  fcntl(saved_out, F_SETFD, FD_CLOEXEC);
  fcntl(saved_err, F_SETFD, FD_CLOEXEC);
  /* Line by line, as on a terminal, so lines go out as they are written. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  out_fd = fds[0];
  nxpvm.out_tid = tid;
  atomic_store(&out_done, 0);
  if (nx_thread_create(&out_thread, out_main, NULL) != 0) {
    nxpvmi_out_stop();
    return PvmSysErr;
  }
  out_running = 1;
  return PvmOk;
}

/* Puts stdout and stderr back, which closes the pipe's last write ends
 * (but those of processes this task started that still hold it), and
 * waits until the last line has been sent: for ever (ms < 0: pvm_exit,
 * whose goodbyes the lines must precede, after its children ended), or
 * until the reader has sent nothing for `ms` (at exit without pvm_exit,
 * when children that still run may hold the pipe open). A reader that is
 * still sending lines is waited for (on a loaded machine 200 lines may
 * take seconds), up to 30 times `ms` in all: a process this task started
 * that holds the pipe and never stops writing does not keep it alive.
 * A pipe handed to the keeper stays: the keeper reads it to its end. */
static void out_finish(int ms) {
  if (out_fd < 0 || handed)
    return;
  fflush(stdout);
  fflush(stderr);
  if (saved_out >= 0) { /* not after an earlier out_finish that timed out */
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    saved_out = saved_err = -1;
  }
  unsigned sent = atomic_load(&out_sent);
  for (int idle = 0, all = 0;
       ms >= 0 && out_running && !atomic_load(&out_done) && idle < ms &&
       all < 30 * ms;
       idle++, all++) {
    usleep(1000);
    unsigned now = atomic_load(&out_sent);
    if (now != sent) { /* still sending: the quiet time starts again */
      sent = now;
      idle = 0;
    }
  }
  if (out_running && (ms < 0 || atomic_load(&out_done))) {
    nx_thread_join(out_thread, NULL);
    out_running = 0;
  }
  if (out_running)
    return; /* still reading: the process ends with it */
  close(out_fd);
  out_fd = -1;
  if (log_fd >= 0) {
    close(log_fd);
    log_fd = -1;
  }
}

/* pvm_exit. Caught output: every line, however long the reader takes (a
 * process this task started may still hold the pipe). The log: as at
 * exit, since what reads the lines is this process's own thread. */
void nxpvmi_out_stop(void) { out_finish(log_fd >= 0 ? 2000 : -1); }

/* A task that ends without pvm_exit: its last lines and its EOF still go
 * to the catching task (flush_at_exit, before the RSRs are confirmed). */
void nxpvmi_out_stop_at_exit(void) { out_finish(2000); }

/* At exit (an atexit handler, pvm_exit or not): the watcher ends, so the
 * process ends with no thread of ours (ThreadSanitizer sleeps a second at
 * the exit of a process that has more than one). What exit flushes after
 * the atexit handlers still reaches the keeper; the read end's copy stays
 * open to the end, so those writes never meet a pipe without a reader. */
void nxpvmi_out_unwatch(void) {
  if (!watching)
    return;
  atomic_store(&watch_stop, 1);
  shutdown(handed_sock, SHUT_RDWR); /* wakes its read */
  nx_thread_join(watch_th, NULL);
  watching = 0;
}

/* The keeper's side. */

static void print_line(void *arg, const char *s, size_t n) {
  out_print(((struct held *)arg)->tid, O_LINE, s, n);
  atomic_fetch_add(&kp.moved, 1);
}

static void drop(struct held *h) {
  if (h->fd >= 0)
    close(h->fd);
  close(h->conn);
  free(h->line.s);
  h->conn = h->fd = -1;
  atomic_fetch_sub(&kp.open, 1);
}

/* A connection from a task on this host: kept if it is this user's. */
static void accept_one(void) {
  /* Counted before it leaves the backlog: pvm_exit looks at the backlog,
   * then at the count (waiting()). */
  atomic_fetch_add(&kp.open, 1);
  int c = accept4(kp.lfd, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0)
    goto err;
  struct ucred cr;
  socklen_t cl = sizeof(cr);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
      cr.uid != getuid())
    goto err_close;
  if (kp.n == kp.cap) {
    int cap = kp.cap ? 2 * kp.cap : 16;
    struct held *h = realloc(kp.h, (size_t)cap * sizeof(*h));
    if (h == NULL) /* the task's writes go on; its watcher drops them */
      goto err_close;
    kp.h = h;
    kp.cap = cap;
  }
  kp.h[kp.n++] = (struct held){c, -1, 0, {NULL, 0, 0}};
  return;

err_close:
  close(c);
err:
  atomic_fetch_sub(&kp.open, 1);
}

/* A task's hand-over: its tid and its pipe's read end, in one message.
 * Anything else ends the connection (returns 1). */
static int take(struct held *h) {
  int32_t tid = 0;
  struct iovec v = {&tid, sizeof(tid)};
  union {
    struct cmsghdr align;
    char b[CMSG_SPACE(4 * sizeof(int))];
  } u;
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = u.b;
  m.msg_controllen = sizeof(u.b);
  ssize_t r = recvmsg(h->conn, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (r < 0 && (errno == EINTR || errno == EAGAIN))
    return 0;
  int fd = -1;
  for (struct cmsghdr *c = r >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c != NULL;
       c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < nfd; k++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
      if (fd < 0)
        fd = f;
      else
        close(f);
    }
  }
  if (r != (ssize_t)sizeof(tid) || tid <= 0 || fd < 0 ||
      (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    if (fd >= 0)
      close(fd);
    return 1;
  }
  h->tid = tid;
  h->fd = fd;
  out_print(tid, O_BEGIN, NULL, 0);
  return 0;
}

/* Reads what a task wrote; at the pipe's end (every write end closed:
 * the process has ended), its last part line and its EOF (returns 1). */
static int pump(struct held *h) {
  char buf[4096];
  ssize_t r = read(h->fd, buf, sizeof(buf));
  if (r < 0 && (errno == EINTR || errno == EAGAIN))
    return 0;
  if (r > 0) {
    feed(&h->line, buf, (size_t)r, print_line, h);
    return 0;
  }
  if (h->line.len > 0)
    print_line(h, h->line.s, h->line.len);
  out_print(h->tid, O_END, NULL, 0);
  atomic_fetch_add(&kp.moved, 1);
  return 1;
}

/* The keeper thread: new connections, hand-overs and pipes, until
 * pvm_exit stops it. Each pipe is read by this thread alone, so a task's
 * BEGIN, its lines in the order written, and its EOF come in order. */
static void *keep_main(void *arg) {
  (void)arg;
  struct pollfd *pf = NULL;
  int pcap = 0;
  while (!atomic_load(&kp.stop)) {
    int np = 2 + kp.n;
    if (np > pcap) {
      struct pollfd *p = realloc(pf, (size_t)np * sizeof(*p));
      if (p == NULL && pcap < 2) { /* nothing to poll with: later */
        usleep(1000);
        continue;
      }
      if (p == NULL) { /* the newest wait for memory; the rest go on */
        np = pcap;
      } else {
        pf = p;
        pcap = np;
      }
    }
    pf[0] = (struct pollfd){kp.wake[0], POLLIN, 0};
    pf[1] = (struct pollfd){kp.lfd, POLLIN, 0};
    for (int i = 0; i + 2 < np; i++)
      pf[i + 2] = (struct pollfd){kp.h[i].fd >= 0 ? kp.h[i].fd : kp.h[i].conn,
                                  POLLIN, 0};
    if (poll(pf, (nfds_t)np, -1) < 0)
      continue; /* EINTR */
    if (pf[0].revents != 0) {
      char c;
      ssize_t r = read(kp.wake[0], &c, 1);
      (void)r; /* the loop looks at kp.stop */
    }
    for (int i = 0; i + 2 < np; i++) {
      struct held *h = &kp.h[i];
      if (pf[i + 2].revents != 0 && (h->fd < 0 ? take(h) : pump(h)))
        drop(h);
    }
    int k = 0;
    for (int i = 0; i < kp.n; i++)
      if (kp.h[i].conn >= 0)
        kp.h[k++] = kp.h[i];
    kp.n = k;
    if (pf[1].revents & POLLIN)
      accept_one();
  }
  free(pf);
  return NULL;
}

/* Starts this task's keeper, if it has none: a listening socket named by
 * a fresh random key, and its thread. Returns 0 or -1. */
int nxpvmi_out_keep_start(void) {
  if (kp.running)
    return 0;
  uint64_t key = 0;
  if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key))
    key = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^
          (uint64_t)(uintptr_t)&key;
  if (key == 0)
    key = 1;
  struct sockaddr_un a;
  socklen_t alen = key_addr(key, &a);
  int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (lfd < 0)
    return -1;
  if (bind(lfd, (struct sockaddr *)&a, alen) < 0 || listen(lfd, 64) < 0)
    goto err_sock;
  if (pipe2(kp.wake, O_CLOEXEC) < 0)
    goto err_sock;
  kp.lfd = lfd;
  kp.key = key;
  atomic_store(&kp.stop, 0);
  if (nx_thread_create(&kp.th, keep_main, NULL) != 0)
    goto err_pipe;
  kp.running = 1;
  return 0;

err_pipe:
  close(kp.wake[0]);
  close(kp.wake[1]);
  kp.wake[0] = kp.wake[1] = -1;
  kp.key = 0;
err_sock:
  close(lfd);
  kp.lfd = -1;
  return -1;
}

/* Whether a task's connection waits to be accepted: a task that ended
 * before the keeper thread got to it still has its lines in the pipe. */
static int waiting(void) {
  struct pollfd p = {kp.lfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

/* The catching task's pvm_exit, once its children have ended: waits
 * until every pipe it holds has ended (so every line and EOF is written),
 * as long as lines still come. A pipe still open after 2 s without a line
 * is held by a process that is no task of ours (one a task started and
 * left running), and is let go, as is everything after 60 s; its task's
 * watcher then reads and drops. Then stops the keeper. */
void nxpvmi_out_keep_stop(void) {
  if (!kp.running)
    return;
  unsigned moved = atomic_load(&kp.moved);
  for (int idle = 0, all = 0;
       (waiting() || atomic_load(&kp.open) > 0) && idle < 2000 && all < 60000;
       idle++, all++) {
    usleep(1000);
    unsigned now = atomic_load(&kp.moved);
    if (now != moved) {
      moved = now;
      idle = 0;
    }
  }
  atomic_store(&kp.stop, 1);
  char c = 0;
  ssize_t w = write(kp.wake[1], &c, 1);
  (void)w; /* a full pipe wakes it as well */
  nx_thread_join(kp.th, NULL);
  for (int i = 0; i < kp.n; i++) {
    if (kp.h[i].line.len > 0)
      print_line(&kp.h[i], kp.h[i].line.s, kp.h[i].line.len);
    drop(&kp.h[i]);
  }
  free(kp.h);
  kp.h = NULL;
  kp.n = kp.cap = 0;
  close(kp.lfd);
  close(kp.wake[0]);
  close(kp.wake[1]);
  kp.lfd = kp.wake[0] = kp.wake[1] = -1;
  kp.key = 0;
  kp.running = 0;
}

/* "nxpvm.out": a line (or BEGIN, END) of a task whose output this one
 * caught, from a task that could not hand its pipe over. */
void nxpvmi_on_out(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t kind;
  uint32_t n;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &kind) < 0 ||
      nx_get_uint32(buf, &n) < 0 || n > nx_buffer_remaining(buf))
    return;
  if (kind != O_BEGIN && kind != O_LINE && kind != O_END)
    return;
  char *s = malloc((size_t)n + 1);
  if (s == NULL || (n > 0 && nx_get_char_array(buf, s, n) < 0)) {
    free(s);
    return;
  }
  out_print(from, kind, s, n);
  free(s);
}

/* Output of tasks spawned from now on comes to `ff` (NULL: no more). */
int pvm_catchout(FILE *ff) {
  if (!nxpvm.started) {
    nxpvm.catch_ff = ff;
    return PvmOk;
  }
  nx_mutex_lock(&nxpvm.m); /* handlers read it */
  nxpvm.catch_ff = ff;
  nx_mutex_unlock(&nxpvm.m);
  return PvmOk;
}
