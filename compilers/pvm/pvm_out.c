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
 * hands the pipe's read end to it (a Unix socket, SCM_RIGHTS), whose
 * keeper reads it until every write end has closed, that is until the
 * task's process (and whatever it started that kept the descriptors) has
 * ended, and only then writes the EOF line. Where the hand-over cannot be
 * made (the catching task on another host: the socket is host-local), the
 * task reads its own pipe and sends each line by RSR, until its pvm_exit
 * or exit. The task log is written by the task itself too.
 *
 * How it is read. One libuv loop per process does all of it: the keeper's
 * listening socket, its connections and the pipes handed over; this
 * task's own pipe, when its lines go by RSR or to the log; and the watch
 * of a pipe this task handed over (watch_event). Every descriptor is a
 * uv_poll handle around our own read, accept4 or recvmsg, and pvm_exit's
 * limits are timers. Not uv_pipe streams: the hand-over sockets are
 * SOCK_SEQPACKET sockets in Linux's abstract namespace (one message, with
 * the descriptor, per task), which libuv 1.44's uv_pipe can neither bind
 * nor read a message at a time; and libuv closes a stream's descriptor
 * with a raw close system call, which ThreadSanitizer does not see, so
 * it takes the next descriptor given the same number for the old one and
 * reports races that are none. Here every descriptor is opened and
 * closed by our own calls. The loop runs on a thread of its own, the
 * output thread: the pipes must be read while the task computes and makes
 * no PVM call (a pipe nobody reads fills up and blocks its writer), and a
 * keeper must read while its task computes or waits, as PVM's pvmd does,
 * so no call of the task's can drive the loop; nor can nexus's progress
 * engine, whose public API (all a frontend may use) takes no descriptor
 * of ours. The thread starts with the first thing to read and ends with
 * the last (pvm_exit, or the atexit handler at the latest): a process has
 * at most one, where it had one per role (a task that caught output and
 * was caught had two).
 *
 * Only the output thread touches the loop and its handles; another thread
 * hands it work with on_loop (a uv_async_t) and waits for it there, and
 * waits for the loop's news on `lp.c`. A process forked from one with a
 * loop (pvm_spawn's children exec at once) never uses that loop: nothing
 * here starts or touches a loop in a process other than the one that
 * made it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

#include <uv.h>

#include "pvm_internal.h"

enum out_kind { O_BEGIN = 1, O_LINE, O_END };

struct line {
  char *s;
  size_t len, cap;
};

/* The loop and the output thread. `m` and `c` guard the work handed to
 * the loop (call, arg, called) and the flags other threads wait on. */
static struct {
  uv_loop_t loop;
  uv_async_t wake;
  nx_thread_t th;
  pid_t pid; /* the process whose loop it is (0: none) */
  int users; /* reader, watcher and keeper: each one while it reads */
  pthread_mutex_t m;
  pthread_cond_t c;
  void (*call)(void *);
  void *arg;
  int called;
  char buf[65536]; /* what one read brings, used before the next */
} lp = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};

/* This task's own output (the writer's side). */
static int out_fd = -1, saved_out = -1, saved_err = -1;
static int log_fd = -1; /* the task log, when the output goes there */
static int log_tid;     /* the tid its lines carry (set before the reader) */
static int reading;     /* the loop reads out_fd (rd) */
static int handed;      /* out_fd's copy went to the keeper */
static int handed_sock = -1; /* the connection it went on */
static int watching;         /* the loop watches handed_sock (wt) */

/* The reader of this task's own pipe: lines by RSR or to the log. The
 * loop's alone, but `ended` and `settled`, which out_finish waits on. */
static struct {
  uv_poll_t pipe;       /* out_fd */
  uv_timer_t idle, all; /* out_finish's limits */
  struct line line;
  unsigned sent; /* lines (and BEGIN) sent: its progress */
  int ms;        /* the quiet time out_finish allows (-1: no limits yet) */
  int ended;     /* the pipe ended and the EOF went out */
  int settled;   /* out_finish may go on: ended, or a limit passed */
} rd;

/* The watch of a pipe handed to the keeper (watch_event). */
static struct {
  uv_poll_t sock;  /* handed_sock, until the keeper hangs up */
  uv_poll_t drain; /* then out_fd, read and dropped */
  int draining;
} wt;

/* The keeper (a catching task): the pipes its caught tasks on this host
 * handed over, each with its connection, open until its pipe has ended. */
struct held {
  struct held *next;
  uv_poll_t conn_w; /* the connection, read for the hand-over */
  uv_poll_t pipe;   /* then the pipe's read end */
  int conn;         /* its descriptor */
  int fd;           /* the pipe's read end (-1: not handed over yet) */
  int tid, piped, closing;
  struct line line;
};

/* `settled` is for nxpvmi_out_keep_stop to wait on; the rest is the
 * loop's (lfd and key are set before the loop sees them). */
static struct {
  int lfd;
  uint64_t key; /* names the socket (0: no keeper) */
  int running;  /* (the caller's side) */
  uv_poll_t listen;
  uv_timer_t idle, all; /* nxpvmi_out_keep_stop's limits */
  struct held *h;
  int open;       /* connections held (handed over or not yet) */
  unsigned moved; /* lines written: progress, for pvm_exit's wait */
  int stopping;
  int settled;
} kp = {.lfd = -1};

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

/* Sets a flag that another thread waits on (wait_flag). */
static void set_flag(int *flag, int v) {
  pthread_mutex_lock(&lp.m);
  *flag = v;
  pthread_cond_broadcast(&lp.c);
  pthread_mutex_unlock(&lp.m);
}

static int get_flag(const int *flag) {
  pthread_mutex_lock(&lp.m);
  int v = *flag;
  pthread_mutex_unlock(&lp.m);
  return v;
}

static void wait_flag(const int *flag) {
  pthread_mutex_lock(&lp.m);
  while (!*flag)
    pthread_cond_wait(&lp.c, &lp.m);
  pthread_mutex_unlock(&lp.m);
}

/* The work another thread handed over with on_loop. */
static void wake_cb(uv_async_t *a) {
  (void)a;
  pthread_mutex_lock(&lp.m);
  void (*fn)(void *) = lp.called ? NULL : lp.call;
  void *arg = lp.arg;
  pthread_mutex_unlock(&lp.m);
  if (fn == NULL)
    return;
  fn(arg);
  set_flag(&lp.called, 1);
}

/* Runs fn(arg) on the output thread and waits until it has run. */
static void on_loop(void (*fn)(void *), void *arg) {
  pthread_mutex_lock(&lp.m);
  while (lp.call != NULL) /* one at a time */
    pthread_cond_wait(&lp.c, &lp.m);
  lp.call = fn;
  lp.arg = arg;
  lp.called = 0;
  uv_async_send(&lp.wake);
  while (!lp.called)
    pthread_cond_wait(&lp.c, &lp.m);
  lp.call = NULL;
  pthread_cond_broadcast(&lp.c);
  pthread_mutex_unlock(&lp.m);
}

static void *loop_main(void *arg) {
  (void)arg;
  uv_run(&lp.loop, UV_RUN_DEFAULT); /* until `wake`, the last handle, closes */
  return NULL;
}

/* Whether this process runs the loop (a forked child of one does not). */
static int ours(void) { return lp.pid == getpid(); }

/* One more user of the loop: starts it and its thread if none runs.
 * Returns 0, or -1 (no thread, or a child forked from the loop's
 * process). */
static int loop_acquire(void) {
  if (ours()) {
    lp.users++;
    return 0;
  }
  if (lp.pid != 0)
    return -1;
  if (uv_loop_init(&lp.loop) < 0)
    return -1;
  if (uv_async_init(&lp.loop, &lp.wake, wake_cb) < 0)
    goto err_loop;
  lp.call = NULL;
  if (nx_thread_create(&lp.th, loop_main, NULL) != 0)
    goto err_async;
  lp.pid = getpid();
  lp.users = 1;
  return 0;

err_async:
  uv_close((uv_handle_t *)&lp.wake, NULL);
  uv_run(&lp.loop, UV_RUN_NOWAIT); /* its close */
err_loop:
  uv_loop_close(&lp.loop);
  return -1;
}

static void quit(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)&lp.wake, NULL);
}

/* One user fewer, whose handles are closed or closing: the last ends the
 * loop and joins its thread. Every handle is closed by then, so
 * uv_loop_close succeeds. */
static void loop_release(void) {
  if (--lp.users > 0)
    return;
  on_loop(quit, NULL);
  nx_thread_join(lp.th, NULL);
  int rc = uv_loop_close(&lp.loop);
  if (rc != 0) /* a handle left open: a bug here, said */
    fprintf(stderr, "nexus-pvm: output loop: %s\n", uv_strerror(rc));
  lp.pid = 0;
}

/* Reads what `fd` (a pipe's read end, non-blocking) holds into lp.buf:
 * returns the bytes read, 0 at its end (every writer gone) or on an
 * error, or -1 when it holds nothing now. */
static ssize_t read_some(int fd) {
  ssize_t r = read(fd, lp.buf, sizeof(lp.buf));
  if (r < 0 && (errno == EINTR || errno == EAGAIN))
    return -1;
  return r < 0 ? 0 : r;
}

/* Watches `fd`, a pipe's read end, with `h`, calling `cb` when it is
 * readable or has ended. Returns 0 or a libuv error (`h` is then not
 * a handle). */
static int watch_pipe(uv_poll_t *h, int fd, uv_poll_cb cb) {
  int rc = uv_poll_init(&lp.loop, h, fd);
  if (rc < 0)
    return rc;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  uv_poll_start(h, UV_READABLE, cb); /* fails only for a closing handle */
  return 0;
}

static void out_send(int kind, const char *s, size_t n) {
  rd.sent++;
  if (log_fd >= 0) {
    if (kind == O_LINE)
      log_line(s, n);
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
}

static void send_line(void *arg, const char *s, size_t n) {
  (void)arg;
  out_send(O_LINE, s, n);
}

/* The reader (on the output thread). */

static void rd_close(void) {
  uv_close((uv_handle_t *)&rd.pipe, NULL);
  uv_close((uv_handle_t *)&rd.idle, NULL);
  uv_close((uv_handle_t *)&rd.all, NULL);
  free(rd.line.s);
  rd.line = (struct line){NULL, 0, 0};
}

static void rd_limit(uv_timer_t *t);

/* Reads the pipe until every writer has closed it, sending each line;
 * then its last part line and EOF. */
static void rd_read(uv_poll_t *p, int status, int events) {
  (void)p;
  (void)events;
  ssize_t n = status < 0 ? 0 : read_some(out_fd);
  if (n > 0) {
    unsigned sent = rd.sent;
    feed(&rd.line, lp.buf, (size_t)n, send_line, NULL);
    if (rd.ms >= 0 && rd.sent != sent) /* still sending: quiet time anew */
      uv_timer_start(&rd.idle, rd_limit, (uint64_t)rd.ms, 0);
    return;
  }
  if (n < 0)
    return; /* nothing now */
  if (rd.line.len > 0)
    out_send(O_LINE, rd.line.s, rd.line.len);
  out_send(O_END, NULL, 0);
  rd_close();
  pthread_mutex_lock(&lp.m);
  rd.ended = rd.settled = 1;
  pthread_cond_broadcast(&lp.c);
  pthread_mutex_unlock(&lp.m);
}

/* Starts reading out_fd; `arg`: where to say whether it did. */
static void rd_start(void *arg) {
  int *rc = arg;
  rd.line = (struct line){NULL, 0, 0};
  rd.ms = -1;
  rd.ended = rd.settled = 0;
  if ((*rc = watch_pipe(&rd.pipe, out_fd, rd_read)) < 0)
    return;
  uv_timer_init(&lp.loop, &rd.idle);
  uv_timer_init(&lp.loop, &rd.all);
  out_send(O_BEGIN, NULL, 0);
}

/* A limit of out_finish passed: it goes on, the reader reads on. */
static void rd_limit(uv_timer_t *t) {
  (void)t;
  uv_timer_stop(&rd.idle);
  uv_timer_stop(&rd.all);
  rd.ms = -1;
  set_flag(&rd.settled, 1);
}

/* out_finish's wait: until the pipe ends, or (ms >= 0) until the reader
 * has sent nothing for `ms`, or 30 times `ms` in all. */
static void rd_finish(void *arg) {
  int ms = *(int *)arg;
  if (rd.ended)
    return;
  set_flag(&rd.settled, 0);
  if (ms < 0)
    return;
  rd.ms = ms;
  uv_timer_start(&rd.idle, rd_limit, (uint64_t)ms, 0);
  uv_timer_start(&rd.all, rd_limit, 30 * (uint64_t)ms, 0);
}

/* At exit: a reader that out_finish gave up waiting for ends. */
static void rd_end(void *arg) {
  (void)arg;
  if (!rd.ended)
    rd_close();
}

/* The watch (on the output thread). A task whose pipe went to the keeper
 * keeps a copy of the read end, so that its writes never meet a pipe
 * without a reader (SIGPIPE) while the keeper lives, and watches the
 * connection it went on. If the keeper hangs up while the task still
 * runs (its process died, or it gave up waiting for a pipe that a
 * leftover process held open), the loop reads the pipe and drops the
 * lines: the writers never block. */
static void drain_read(uv_poll_t *p, int status, int events) {
  (void)events;
  if (status < 0 || read_some(out_fd) == 0) /* every writer gone */
    uv_poll_stop(p);
}

static void watch_event(uv_poll_t *p, int status, int events) {
  (void)events;
  char c;
  ssize_t r = recv(handed_sock, &c, 1, MSG_DONTWAIT);
  if (status == 0 && (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))))
    return; /* the keeper sends nothing; not a hang-up */
  uv_poll_stop(p);
  wt.draining = watch_pipe(&wt.drain, out_fd, drain_read) == 0;
}

static void watch_start(void *arg) {
  int *rc = arg;
  wt.draining = 0;
  *rc = uv_poll_init(&lp.loop, &wt.sock, handed_sock);
  if (*rc == 0 && (*rc = uv_poll_start(&wt.sock, UV_READABLE | UV_DISCONNECT,
                                       watch_event)) < 0)
    uv_close((uv_handle_t *)&wt.sock, NULL);
}

/* At exit: the process is ending, the keeper reads on. */
static void watch_end(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)&wt.sock, NULL);
  if (wt.draining)
    uv_close((uv_handle_t *)&wt.drain, NULL);
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

/* Puts descriptors 1 and 2 back (what out_start kept) and closes the
 * copies, which closes the pipe's last write ends but those of processes
 * this task started that still hold it. */
static void restore(void) {
  if (saved_out >= 0) {
    dup2(saved_out, 1);
    close(saved_out);
  }
  if (saved_err >= 0) {
    dup2(saved_err, 2);
    close(saved_err);
  }
  saved_out = saved_err = -1;
}

/* Points descriptors 1 and 2 at a pipe whose read end goes to the keeper
 * of `tid` on this host, or else is read by the loop, which sends each
 * line to `tid` (0: writes it to the task log). */
static int out_start(int tid) {
  int fds[2];
  if (reading || handed || !(lp.pid == 0 || ours()) ||
      pipe2(fds, O_CLOEXEC) < 0)
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
    int rc = -1;
    if (loop_acquire() == 0) {
      on_loop(watch_start, &rc);
      if (rc < 0)
        loop_release();
    }
    if (rc == 0) {
      watching = 1;
    } else {
      /* No watch: the keeper alone reads (its end would be SIGPIPE). */
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
      dup2(fds[1], 2) < 0 || loop_acquire() < 0)
    goto err_restore;
  close(fds[1]);
  fcntl(saved_out, F_SETFD, FD_CLOEXEC);
  fcntl(saved_err, F_SETFD, FD_CLOEXEC);
  /* Line by line, as on a terminal, so lines go out as they are written. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  out_fd = fds[0];
  nxpvm.out_tid = tid;
  int rc;
  on_loop(rd_start, &rc);
  if (rc < 0) {
    loop_release();
    fflush(stdout);
    restore();
    close(out_fd);
    out_fd = -1;
    return PvmSysErr;
  }
  reading = 1;
  return PvmOk;

err_restore:
  restore();
  close(fds[0]);
  close(fds[1]);
  return PvmSysErr;
}

/* Puts stdout and stderr back, which closes the pipe's last write ends
 * (but those of processes this task started that still hold it), and
 * waits until the last line has been sent: for ever (ms < 0: pvm_exit,
 * whose goodbyes the lines must precede, after its children ended), or
 * until the reader has sent nothing for `ms` (at exit without pvm_exit,
 * when children that still run may hold the pipe open). A reader that is
 * still sending lines is waited for (on a loaded machine 200 lines may
 * take seconds), up to 30 times `ms` in all: a process this task started
 * that holds the pipe and never stops writing does not keep it alive
 * (the loop reads on, until the atexit handler). A pipe handed to the
 * keeper stays: the keeper reads it to its end. */
static void out_finish(int ms) {
  if (!reading || !ours())
    return;
  fflush(stdout);
  fflush(stderr);
  restore(); /* not after an earlier out_finish that gave up */
  on_loop(rd_finish, &ms);
  wait_flag(&rd.settled);
  if (!get_flag(&rd.ended))
    return; /* still reading */
  reading = 0;
  loop_release();
  close(out_fd);
  out_fd = -1;
  if (log_fd >= 0) {
    close(log_fd);
    log_fd = -1;
  }
}

/* pvm_exit. Caught output: every line, however long the reader takes (a
 * process this task started may still hold the pipe). The log: as at
 * exit, since what reads the lines is this process's own loop. */
void nxpvmi_out_stop(void) { out_finish(log_fd >= 0 ? 2000 : -1); }

/* A task that ends without pvm_exit: its last lines and its EOF still go
 * to the catching task (flush_at_exit, before the RSRs are confirmed). */
void nxpvmi_out_stop_at_exit(void) { out_finish(2000); }

static void keep_end(void *arg);

/* At exit (an atexit handler, pvm_exit or not): the loop ends, so the
 * process ends with no thread of ours (ThreadSanitizer sleeps a second at
 * the exit of a process that has more than one). What exit flushes after
 * the atexit handlers still reaches the keeper; the read end's copy
 * (out_fd) stays open to the end, so those writes never meet a pipe
 * without a reader. A reader that out_finish gave up on, and a keeper
 * whose task ends without pvm_exit, stop here, as they would with the
 * process. */
void nxpvmi_out_end(void) {
  if (!ours())
    return;
  if (watching) {
    on_loop(watch_end, NULL);
    watching = 0;
    loop_release();
    close(handed_sock);
    handed_sock = -1;
  }
  if (reading) {
    on_loop(rd_end, NULL);
    reading = 0;
    loop_release();
  }
  if (kp.running) {
    int print = 0;
    on_loop(keep_end, &print);
    kp.running = 0;
    kp.key = 0;
    loop_release();
  }
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
  return 0;
}

/* The keeper's side (on the output thread). */

static void print_line(void *arg, const char *s, size_t n) {
  out_print(((struct held *)arg)->tid, O_LINE, s, n);
  kp.moved++;
}

static void held_closed(uv_handle_t *hd) {
  struct held *h = hd->data;
  if (--h->closing > 0)
    return;
  close(h->conn);
  if (h->fd >= 0)
    close(h->fd);
  free(h->line.s);
  free(h);
}

/* Lets a connection and its pipe go. */
static void drop(struct held *h) {
  for (struct held **p = &kp.h; *p != NULL; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      break;
    }
  h->closing = 1 + h->piped;
  uv_close((uv_handle_t *)&h->conn_w, held_closed);
  if (h->piped)
    uv_close((uv_handle_t *)&h->pipe, held_closed);
  kp.open--;
}

static void keep_check(void);
static void keep_limit(uv_timer_t *t);

/* Reads what a task wrote; at the pipe's end (every write end closed:
 * the process has ended), its last part line and its EOF. */
static void pump(uv_poll_t *p, int status, int events) {
  (void)events;
  struct held *h = p->data;
  ssize_t n = status < 0 ? 0 : read_some(h->fd);
  if (n < 0)
    return; /* nothing now */
  if (n > 0) {
    unsigned moved = kp.moved;
    feed(&h->line, lp.buf, (size_t)n, print_line, h);
    if (kp.stopping && kp.moved != moved) /* lines still come */
      uv_timer_start(&kp.idle, keep_limit, 2000, 0);
    return;
  }
  if (h->line.len > 0)
    print_line(h, h->line.s, h->line.len);
  out_print(h->tid, O_END, NULL, 0);
  kp.moved++;
  drop(h);
  keep_check();
}

/* A connection's hand-over: the pipe is read from now on; anything else
 * ends the connection. */
static void conn_event(uv_poll_t *p, int status, int events) {
  (void)events;
  struct held *h = p->data;
  int rc = status < 0 ? 1 : take(h);
  if (rc == 0 && h->fd >= 0) {
    uv_poll_stop(p);
    if (watch_pipe(&h->pipe, h->fd, pump) < 0) {
      rc = 1;
    } else {
      h->pipe.data = h;
      h->piped = 1;
      out_print(h->tid, O_BEGIN, NULL, 0);
    }
  }
  if (rc) {
    drop(h);
    keep_check();
  }
}

/* A connection from a task on this host: kept if it is this user's.
 * Returns 0, or -1 when no more can be accepted now. */
static int accept_one(void) {
  int c = accept4(kp.lfd, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) /* none waits (or none can be had now: the next event) */
    return errno == EINTR || errno == ECONNABORTED ? 0 : -1;
  struct ucred cr;
  socklen_t cl = sizeof(cr);
  struct held *h;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
      cr.uid != getuid() || (h = calloc(1, sizeof(*h))) == NULL)
    goto err_close; /* the task's writes go on; its watch drops them */
  h->conn = c;
  h->fd = -1;
  if (uv_poll_init(&lp.loop, &h->conn_w, c) < 0) {
    free(h);
    goto err_close;
  }
  h->conn_w.data = h;
  h->next = kp.h;
  kp.h = h;
  kp.open++;
  if (uv_poll_start(&h->conn_w, UV_READABLE, conn_event) < 0)
    drop(h);
  return 0;

err_close:
  close(c);
  return 0;
}

static void listen_event(uv_poll_t *p, int status, int events) {
  (void)p;
  (void)status;
  (void)events;
  while (accept_one() == 0)
    ;
  keep_check();
}

static void keep_start(void *arg) {
  int *rc = arg;
  kp.h = NULL;
  kp.open = 0;
  kp.moved = 0;
  kp.stopping = 0;
  kp.settled = 0;
  uv_timer_init(&lp.loop, &kp.idle);
  uv_timer_init(&lp.loop, &kp.all);
  *rc = uv_poll_init(&lp.loop, &kp.listen, kp.lfd);
  if (*rc == 0 &&
      (*rc = uv_poll_start(&kp.listen, UV_READABLE, listen_event)) < 0)
    uv_close((uv_handle_t *)&kp.listen, NULL);
  if (*rc < 0) {
    uv_close((uv_handle_t *)&kp.idle, NULL);
    uv_close((uv_handle_t *)&kp.all, NULL);
  }
}

static void listen_closed(uv_handle_t *h) {
  (void)h;
  close(kp.lfd);
  kp.lfd = -1;
}

/* Ends the keeper: the pipes it still holds are let go (*arg: with
 * their last part lines written first), and the socket closes. */
static void keep_end(void *arg) {
  int print = *(int *)arg;
  uv_close((uv_handle_t *)&kp.listen, listen_closed);
  uv_close((uv_handle_t *)&kp.idle, NULL);
  uv_close((uv_handle_t *)&kp.all, NULL);
  while (kp.h != NULL) {
    if (print && kp.h->line.len > 0)
      print_line(kp.h, kp.h->line.s, kp.h->line.len);
    drop(kp.h);
  }
  kp.stopping = 0;
  set_flag(&kp.settled, 1);
}

/* A stopping keeper ends once every pipe it holds has ended, and no
 * task's connection waits to be accepted (a task that ended before the
 * keeper got to it still has its lines in the pipe). */
static void keep_check(void) {
  if (!kp.stopping)
    return;
  while (accept_one() == 0)
    ;
  if (kp.open == 0) {
    int print = 1;
    keep_end(&print);
  }
}

static void keep_limit(uv_timer_t *t) {
  (void)t;
  int print = 1;
  keep_end(&print);
}

static void keep_stop(void *arg) {
  (void)arg;
  kp.stopping = 1;
  uv_timer_start(&kp.idle, keep_limit, 2000, 0);
  uv_timer_start(&kp.all, keep_limit, 60000, 0);
  keep_check();
}

/* Starts this task's keeper, if it has none: a listening socket named by
 * a fresh random key, read by the loop. Returns 0 or -1. */
int nxpvmi_out_keep_start(void) {
  if (kp.running && ours())
    return 0;
  uint64_t key = 0;
  if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key))
    key = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^
          (uint64_t)(uintptr_t)&key;
  if (key == 0)
    key = 1;
  struct sockaddr_un a;
  socklen_t alen = key_addr(key, &a);
  int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0)
    return -1;
  if (bind(lfd, (struct sockaddr *)&a, alen) < 0 || listen(lfd, 64) < 0)
    goto err_sock;
  if (loop_acquire() < 0)
    goto err_sock;
  kp.lfd = lfd;
  int rc;
  on_loop(keep_start, &rc);
  if (rc < 0)
    goto err_release;
  kp.key = key;
  kp.running = 1;
  return 0;

err_release:
  loop_release();
  kp.lfd = -1;
err_sock:
  close(lfd);
  return -1;
}

/* The catching task's pvm_exit, once its children have ended: waits
 * until every pipe it holds has ended (so every line and EOF is written),
 * as long as lines still come. A pipe still open after 2 s without a line
 * is held by a process that is no task of ours (one a task started and
 * left running), and is let go, as is everything after 60 s; its task's
 * watch then reads and drops. Then stops the keeper. */
void nxpvmi_out_keep_stop(void) {
  if (!kp.running || !ours())
    return;
  on_loop(keep_stop, NULL);
  wait_flag(&kp.settled);
  kp.running = 0;
  kp.key = 0;
  loop_release();
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
