/* RSR round trip between two processes over the tcp module, printed beside a raw busy-polled TCP ping-pong over loopback measured in the same run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

/* Usage: bench_rsr_tcp [iterations [runs]]. The program runs itself as
 * the second process ("--child <fd>"), so both sides are this binary. */

extern char **environ;

static int iters = 20000;
static int reps = 5;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static void die(const char *what) {
  fprintf(stderr, "bench_rsr_tcp: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* 1. The anchor: 8 bytes back and forth over a loopback TCP connection
 * (TCP_NODELAY), both processes busy-polling non-blocking sockets. */

static void busy_read(int fd, char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, buf, n, 0);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      die("raw recv");
    }
  }
}

static void raw_write(int fd, const char *buf, size_t n) {
  if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
    die("raw send");
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* With `nested`, each socket also sits in an epoll set that sits in
 * another one, as a tcp socket does (libuv's loop inside the core's
 * progress engine): the kernel then runs the epoll wake-up callbacks on
 * every packet, though nobody waits in them. */
static void nest(int fd) {
  int inner = epoll_create1(EPOLL_CLOEXEC),
      outer = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  if (inner < 0 || outer < 0 || epoll_ctl(inner, EPOLL_CTL_ADD, fd, &ev) < 0)
    die("epoll");
  ev.data.fd = inner;
  if (epoll_ctl(outer, EPOLL_CTL_ADD, inner, &ev) < 0)
    die("epoll");
}

static double bench_raw(int nested, double *best) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(in);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&in, sizeof(in)) < 0 ||
      listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&in, &len) < 0)
    die("raw listen");
  int total = 1000 + reps * iters;
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0)
      die("raw connect");
    tune(fd);
    if (nested)
      nest(fd);
    char buf[8];
    for (int i = 0; i < total; i++) {
      busy_read(fd, buf, sizeof(buf));
      raw_write(fd, buf, sizeof(buf));
    }
    _exit(0);
  }
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0)
    die("raw accept");
  close(lfd);
  tune(fd);
  if (nested)
    nest(fd);
  char buf[8] = "pingpong";
  for (int i = 0; i < 1000; i++) {
    raw_write(fd, buf, sizeof(buf));
    busy_read(fd, buf, sizeof(buf));
  }
  double v[32];
  for (int r = 0; r < reps; r++) {
    double t0 = now_us();
    for (int i = 0; i < iters; i++) {
      raw_write(fd, buf, sizeof(buf));
      busy_read(fd, buf, sizeof(buf));
    }
    v[r] = (now_us() - t0) / iters;
  }
  close(fd);
  waitpid(pid, NULL, 0);
  double m = median(v, reps);
  *best = v[0];
  return m;
}

/* 2. RSRs: "ping" to the child's initial context, whose non-threaded
 * handler answers "pong" to the gp it was given once ("hello"); pong
 * signals the main thread, which waits in nx_cond_wait. */

static nx_mutex_t m;
static nx_cond_t c;
static long done;
static int quit;
static nx_gp_t reply_gp = NX_GP_NULL;
static char payload_buf[1 << 16];

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&m);
  done++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_release(&reply_gp);
  nx_get_gp(buf, &reply_gp);
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  size_t n = nx_buffer_remaining(buf);
  nx_buffer_t *out;
  if (n > sizeof(payload_buf))
    return;
  if (n > 0)
    nx_get_bytes(buf, payload_buf, n - 5); /* less the tag and count */
  if (nx_rsr_init_name(&out, &reply_gp, "pong", n) == 0) {
    if (n > 0)
      nx_put_bytes(out, payload_buf, n - 5);
    nx_rsr_send(out);
  }
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&m);
  __atomic_store_n(&quit, 1, __ATOMIC_RELEASE);
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static int child_main(int fd, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent || nx_init(NULL, NULL) != 0)
    return 1;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "quit", on_quit, NX_HANDLER_NONTHREADED, NULL);
  nx_gp_t me;
  nx_buffer_t *b;
  const void *bytes;
  size_t len;
  if (nx_gp_make(NULL, &me) != 0 || nx_buffer_create(64, &b) != 0 ||
      nx_put_gp(b, &me) != 0 || nx_buffer_bytes(b, &bytes, &len) != 0)
    return 1;
  uint32_t head[2] = {(uint32_t)nx_buffer_format(b), (uint32_t)len};
  if (write(fd, head, sizeof(head)) != sizeof(head) ||
      write(fd, bytes, len) != (ssize_t)len)
    return 1;
  close(fd);
  nx_buffer_release(b);
  nx_gp_release(&me);
  const char *mode = getenv("NX_PROGRESS");
  if (mode != NULL && strcmp(mode, "poll") == 0) {
    /* Busy-polling, as the raw side does (and as compiler-generated code
     * that calls nx_poll itself would). */
    for (unsigned long i = 1; !__atomic_load_n(&quit, __ATOMIC_ACQUIRE); i++)
      if (nx_poll() == 0 && (i & 0xfffff) == 0 && getppid() != parent)
        return 1;
  } else {
    /* The progress thread serves; the main thread waits. */
    nx_mutex_lock(&m);
    while (!quit) {
      struct timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_sec += 1;
      nx_cond_timedwait(&c, &m, &deadline);
    }
    nx_mutex_unlock(&m);
  }
  nx_gp_release(&reply_gp);
  return nx_finalize() == 0 ? 0 : 1;
}

static int read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0)
      return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Starts the child in NX_PROGRESS=`mode`, runs the round trips, returns the
 * median time per round trip (the fastest run in *best). */
static double bench_rsr(const char *self_path, const char *mode, size_t size,
                        double *best) {
  setenv("NX_PROGRESS", mode, 1);
  int fds[2];
  if (pipe(fds) < 0)
    die("pipe");
  char fd_arg[16], parent_arg[16];
  snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
  snprintf(parent_arg, sizeof(parent_arg), "%d", (int)getpid());
  char *argv[] = {(char *)self_path, "--child", fd_arg, parent_arg, NULL};
  /* For profiling: BENCH_CHILD_PROGRESS gives the child another mode. */
  const char *child_mode = getenv("BENCH_CHILD_PROGRESS");
  if (child_mode != NULL)
    setenv("NX_PROGRESS", child_mode, 1);
  pid_t pid;
  if (posix_spawn(&pid, self_path, NULL, NULL, argv, environ) != 0)
    die("posix_spawn");
  setenv("NX_PROGRESS", mode, 1);
  close(fds[1]);
  if (nx_init(NULL, NULL) != 0)
    die("nx_init");
  nx_mutex_init(&m);
  nx_cond_init(&c);
  done = 0;
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  uint32_t head[2];
  char bytes[4096];
  if (read_all(fds[0], head, sizeof(head)) < 0 || head[1] > sizeof(bytes) ||
      read_all(fds[0], bytes, head[1]) < 0)
    die("reading the child's gp");
  close(fds[0]);
  nx_buffer_t *b;
  nx_gp_t child, me;
  if (nx_buffer_from_bytes(bytes, head[1], (int)head[0], &b) != 0 ||
      nx_get_gp(b, &child) != 0 || nx_gp_make(NULL, &me) != 0)
    die("gp");
  nx_buffer_release(b);
  if (strcmp(nx_gp_protocol(&child), "tcp") != 0)
    die("not over tcp");
  if (nx_rsr_init_name(&b, &child, "hello", nx_sizeof_gp(&me)) != 0 ||
      nx_put_gp(b, &me) != 0 || nx_rsr_send(b) != 0)
    die("hello");
  nx_handler_id_t ping = nx_handler_id("ping");
  double v[32];
  for (int r = -1; r < reps; r++) {
    int n = r < 0 ? 1000 : iters; /* the first run warms up */
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
      if (nx_rsr_init(&b, &child, ping, size + 8) != 0)
        die("nx_rsr_init");
      if (size > 0)
        nx_put_bytes(b, payload_buf, size);
      nx_mutex_lock(&m);
      long want = done + 1;
      nx_mutex_unlock(&m);
      if (nx_rsr_send(b) != 0)
        die("nx_rsr_send");
      nx_mutex_lock(&m);
      while (done < want)
        nx_cond_wait(&c, &m);
      nx_mutex_unlock(&m);
    }
    if (r >= 0)
      v[r] = (now_us() - t0) / n;
  }
  if (nx_rsr_init_name(&b, &child, "quit", 0) == 0)
    nx_rsr_send(b);
  waitpid(pid, NULL, 0);
  nx_gp_release(&child);
  nx_gp_release(&me);
  nx_finalize();
  double med = median(v, reps);
  *best = v[0];
  return med;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--child") == 0)
    return child_main(atoi(argv[2]), (pid_t)atoi(argv[3]));
  if (argc > 1)
    iters = atoi(argv[1]);
  if (argc > 2)
    reps = atoi(argv[2]);
  if (iters <= 0 || reps <= 0 || reps > 32) {
    fprintf(stderr, "usage: bench_rsr_tcp [iterations [runs <= 32]]\n");
    return 2;
  }
  /* Both processes: tcp only, one key. */
  char key[33];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  for (int i = 0; i < 16; i++)
    snprintf(key + 2 * i, 3, "%02x", rand() & 0xff);
  setenv("NX_KEY", key, 1);
  setenv("NX_PROTOCOLS", "tcp", 1);
  signal(SIGPIPE, SIG_IGN);

  printf("round trip between two processes over loopback, %d per run, "
         "median of %d runs (fastest)\n",
         iters, reps);
  double best;
  double raw = bench_raw(0, &best);
  printf("%-44s %8.2f us (%.2f)\n", "raw TCP ping-pong, 8 B, busy-polled", raw,
         best);
  double nested = bench_raw(1, &best);
  printf("%-44s %8.2f us (%.2f)  %.2fx raw\n",
         "same, sockets in nested epoll sets", nested, best, nested / raw);
  struct {
    const char *mode;
    size_t size;
    const char *label;
  } cases[] = {
      {"poll", 0, "RSR null, NX_PROGRESS=poll"},
      {"thread", 0, "RSR null, progress thread"},
      {"poll", 1024, "RSR 1 KiB, NX_PROGRESS=poll"},
      {"thread", 1024, "RSR 1 KiB, progress thread"},
  };
  /* For profiling: BENCH_ONLY runs one case (its index). */
  const char *only = getenv("BENCH_ONLY");
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (only != NULL && (size_t)atoi(only) != i)
      continue;
    double t = bench_rsr("/proc/self/exe", cases[i].mode, cases[i].size, &best);
    printf("%-44s %8.2f us (%.2f)  %.2fx raw\n", cases[i].label, t, best,
           t / raw);
  }
  return 0;
}
