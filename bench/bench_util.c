/* The parts the round-trip benchmarks share: clock, statistics, labels,
 * pipe I/O and the RSR echo child (see bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *bench_name = "bench";

void bench_die(const char *what, const char *why) {
  if (why != NULL)
    fprintf(stderr, "%s[%d]: %s: %s\n", bench_name, (int)getpid(), what, why);
  else
    fprintf(stderr, "%s[%d]: %s\n", bench_name, (int)getpid(), what);
  exit(1);
}

double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, int n, double *best) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  *best = v[0];
  return v[n / 2];
}

double bench_two_places(double ratio) {
  return (double)(long)(ratio * 100 + 0.5) / 100;
}

int bench_beside_self(const char *name, char *out, size_t len) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  out[0] = '\0';
  if (n <= 0)
    return -1;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  int dir = slash != NULL ? (int)(slash + 1 - self) : 0;
  int w = snprintf(out, len, "%.*s%s", dir, self, name);
  if (w < 0 || (size_t)w >= len) {
    out[0] = '\0';
    return -1;
  }
  return access(out, X_OK) == 0 ? 0 : -1;
}

int bench_iters(size_t size, int quick) {
  int n = size <= 4096      ? 5000
          : size <= 65536   ? 2000
          : size <= 1 << 20 ? 200
                            : 50;
  return quick ? n / 10 : n;
}

void bench_size_label(size_t size, char *out, size_t len) {
  if (size >= (1 << 20) && size % (1 << 20) == 0)
    snprintf(out, len, "%zu MiB", size >> 20);
  else if (size >= 1024 && size % 1024 == 0)
    snprintf(out, len, "%zu KiB", size >> 10);
  else
    snprintf(out, len, "%zu B", size);
}

int bench_read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

int bench_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

cpu_set_t bench_all_cpus;

void bench_cpus_init(void) {
  sched_getaffinity(0, sizeof(bench_all_cpus), &bench_all_cpus);
}

void bench_pin_to(int cpu) {
  cpu_set_t set = bench_all_cpus;
  if (cpu >= 0) {
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
  }
  sched_setaffinity(0, sizeof(set), &set);
}

void bench_set_key(void) {
  char key[33];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  for (int i = 0; i < 16; i++)
    snprintf(key + 2 * i, 3, "%02x", rand() & 0xff);
  setenv("NX_KEY", key, 1);
}

/* --- round trips between handlers and the main thread --------------------- */

static nx_mutex_t m;
static nx_cond_t c;
static long replies;
static int quit;
static long refs_sent, refs_released, refs_failed; /* bench_send_ref's */
static int refs_status;                            /* a failed release's */

void bench_sync_init(void) {
  nx_mutex_init(&m);
  nx_cond_init(&c);
  replies = 0;
  quit = 0;
  refs_sent = refs_released = refs_failed = 0;
  refs_status = 0;
}

long bench_next_reply(void) {
  nx_mutex_lock(&m);
  long want = replies + 1;
  nx_mutex_unlock(&m);
  return want;
}

void bench_reply_arrived(void) {
  nx_mutex_lock(&m);
  replies++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

/* Waits until `*counter` reaches `want`, as bench_wait_replies. Without
 * a limit the clock is not read: the 8 B round trips take 0.5 us. */
static void wait_count(const long *counter, long want, int timeout_s,
                       const char *what, const char *why) {
  struct timespec deadline = {0, 0};
  if (timeout_s != 0) {
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_s;
  }
  nx_mutex_lock(&m);
  while (*counter < want) {
    if (timeout_s == 0)
      nx_cond_wait(&c, &m);
    else if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT)
      bench_die(what, why);
  }
  nx_mutex_unlock(&m);
}

void bench_wait_replies(long want, int timeout_s) {
  wait_count(&replies, want, timeout_s, "a round trip", "no reply in time");
}

void bench_echo(nx_buffer_t *ping, const nx_gp_t *reply, nx_handler_id_t pong,
                void *scratch, size_t scratch_len) {
  size_t remaining = nx_buffer_remaining(ping), head = nx_sizeof_bytes(0);
  if (remaining < head || remaining - head > scratch_len)
    return;
  size_t n = remaining - head;
  nx_buffer_t *out;
  if (nx_get_bytes(ping, scratch, n) != 0 ||
      nx_rsr_init(&out, reply, pong, nx_sizeof_bytes(n)) != 0)
    return;
  nx_put_bytes(out, scratch, n);
  nx_rsr_send(out);
}

/* --- zero copy ----------------------------------------------------------- */

/* The release callback of bench_send_ref's payloads: may run inside
 * nx_rsr_send or on a runtime thread; holds the mutex only briefly, as
 * the handlers do. */
static void count_release(void *arg, const void *v, int status) {
  (void)arg, (void)v;
  nx_mutex_lock(&m);
  refs_released++;
  if (status != 0) {
    refs_failed++;
    refs_status = status;
  }
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

int bench_send_ref(const nx_gp_t *to, nx_handler_id_t handler, const void *p,
                   size_t n) {
  nx_buffer_t *b;
  int rc = nx_rsr_init(&b, to, handler, nx_sizeof_int64(1));
  if (rc != 0)
    return rc;
  if ((rc = nx_put_uint64(b, n)) != 0) {
    nx_buffer_release(b);
    return rc;
  }
  nx_mutex_lock(&m);
  refs_sent++;
  nx_mutex_unlock(&m);
  if ((rc = nx_put_bytes_ref(b, p, n, count_release, NULL)) != 0) {
    /* The callback will not come. */
    nx_mutex_lock(&m);
    refs_sent--;
    nx_mutex_unlock(&m);
    nx_buffer_release(b);
    return rc;
  }
  /* On failure the callback came (or comes) with the error. */
  return nx_rsr_send(b);
}

void bench_wait_released(int timeout_s) {
  nx_mutex_lock(&m);
  long want = refs_sent;
  nx_mutex_unlock(&m);
  wait_count(&refs_released, want, timeout_s, "a payload put by reference",
             "no release callback in time");
  nx_mutex_lock(&m);
  int status = refs_failed > 0 ? refs_status : 0;
  nx_mutex_unlock(&m);
  if (status != 0)
    bench_die("a payload put by reference was released with an error",
              nx_strerror(status));
}

/* The reply's release callback: the received buffer its payload points
 * into may go. */
static void release_ping(void *arg, const void *v, int status) {
  (void)v, (void)status;
  nx_buffer_release(arg);
}

void bench_echo_ref(nx_buffer_t *ping, const nx_gp_t *reply,
                    nx_handler_id_t pong) {
  uint64_t n;
  const void *p;
  nx_buffer_t *out;
  int rc;
  if ((rc = nx_get_uint64(ping, &n)) != 0 ||
      (rc = nx_get_bytes_ptr(ping, &p, n)) != 0)
    bench_die("a malformed zero-copy ping", nx_strerror(rc));
  if ((rc = nx_buffer_retain(ping)) != 0)
    bench_die("nx_buffer_retain", nx_strerror(rc));
  if ((rc = nx_rsr_init(&out, reply, pong, nx_sizeof_int64(1))) != 0 ||
      (rc = nx_put_uint64(out, n)) != 0)
    bench_die("a zero-copy pong", nx_strerror(rc));
  if ((rc = nx_put_bytes_ref(out, p, n, release_ping, ping)) != 0)
    bench_die("nx_put_bytes_ref", nx_strerror(rc));
  /* From here the callback releases `ping`, also when the send fails. */
  if ((rc = nx_rsr_send(out)) != 0)
    bench_die("a zero-copy pong: nx_rsr_send", nx_strerror(rc));
}

int bench_check_ref(nx_buffer_t *pong, const void *sent, size_t size) {
  uint64_t n;
  const unsigned char *p, *s = sent;
  if (nx_get_uint64(pong, &n) != 0 || n != size ||
      nx_get_bytes_ptr(pong, (const void **)&p, size) != 0)
    return -1;
  if (size > 0 && (p[0] != s[0] || p[size - 1] != s[size - 1]))
    return -1;
  return 0;
}

static void on_ping_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo_ref(buf, &bench_reply_gp, nx_handler_id("pong_ref"));
}

void bench_on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&m);
  __atomic_store_n(&quit, 1, __ATOMIC_RELEASE);
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

int bench_serve_until_quit(pid_t parent) {
  const char *mode = getenv("NX_PROGRESS");
  if (mode != NULL && strcmp(mode, "poll") == 0) {
    /* Busy-polling, as the raw anchors do. What it buys over sleeping
     * while the progress thread works is shown by bench_rsr_tcp, which
     * prints "RSR, NX_PROGRESS=poll" beside "RSR, progress thread" in one
     * run (docs/performance.md: 12.0 against 12.3 us at 8 B). The parent
     * check is a system call; made once every 2^20 polls, it adds well
     * under a nanosecond per poll (bench_rsr_tcp's poll rows include it;
     * no benchmark times it alone). */
    for (unsigned long i = 1; !__atomic_load_n(&quit, __ATOMIC_ACQUIRE); i++)
      if (nx_poll() == 0 && parent != 0 && (i & 0xfffff) == 0 &&
          getppid() != parent)
        return -1;
    return 0;
  }
  int r = 0;
  nx_mutex_lock(&m);
  while (!quit && r == 0) {
    if (parent == 0) {
      nx_cond_wait(&c, &m);
      continue;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    nx_cond_timedwait(&c, &m, &deadline);
    if (getppid() != parent)
      r = -1;
  }
  nx_mutex_unlock(&m);
  return r;
}

/* --- the echo child ------------------------------------------------------ */

nx_gp_t bench_reply_gp = NX_GP_NULL;

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_release(&bench_reply_gp);
  nx_get_gp(buf, &bench_reply_gp);
}

static void *place_mem;
static size_t place_len;

void bench_place_into(void *mem, size_t len) {
  place_mem = mem;
  place_len = len;
}

int bench_place(nx_context_t *ctx, void *addr, nx_buffer_t *lead, size_t tail,
                nx_place_t *where) {
  (void)ctx, (void)addr, (void)lead;
  if (place_mem == NULL || tail > place_len)
    return 0;
  where->addr = place_mem;
  where->len = place_len;
  return 1;
}

void *bench_child_place_mem;
size_t bench_child_place_len;

int bench_child_main(int fd, pid_t parent, nx_handler_fn on_ping) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent || nx_init(NULL, NULL) != 0)
    return 1;
  bench_sync_init();
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ping_ref", on_ping_ref, NX_HANDLER_NONTHREADED,
                      NULL);
  if (getenv("BENCH_PLACE") != NULL) {
    bench_place_into(bench_child_place_mem, bench_child_place_len);
    nx_handler_set_place(self, "ping", bench_place);
    nx_handler_set_place(self, "ping_ref", bench_place);
  }
  nx_handler_register(self, "quit", bench_on_quit, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_gp_t me;
  nx_buffer_t *b;
  const void *bytes;
  size_t len;
  if (nx_gp_make(NULL, &me) != 0 || nx_buffer_create(64, &b) != 0 ||
      nx_put_gp(b, &me) != 0 || nx_buffer_bytes(b, &bytes, &len) != 0)
    return 1;
  uint32_t head[2] = {(uint32_t)nx_buffer_format(b), (uint32_t)len};
  if (bench_write_all(fd, head, sizeof(head)) < 0 ||
      bench_write_all(fd, bytes, len) < 0)
    return 1;
  close(fd);
  nx_buffer_release(b);
  nx_gp_release(&me);
  if (bench_serve_until_quit(parent) != 0)
    return 1;
  nx_gp_release(&bench_reply_gp);
  return nx_finalize() == 0 ? 0 : 1;
}

int bench_child_run(int argc, char **argv, nx_handler_fn on_ping) {
  if ((argc != 4 && argc != 5) || strcmp(argv[1], "--child") != 0)
    return -1;
  if (argc == 5)
    bench_pin_to(atoi(argv[4]));
  return bench_child_main(atoi(argv[2]), (pid_t)atoi(argv[3]), on_ping);
}

void bench_child_spawn(struct bench_child *ch, const char *extra) {
  int fds[2];
  if (pipe(fds) < 0)
    bench_die("pipe", strerror(errno));
  char fd_arg[16], parent_arg[16];
  snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
  snprintf(parent_arg, sizeof(parent_arg), "%d", (int)getpid());
  char *argv[] = {"/proc/self/exe", "--child",     fd_arg,
                  parent_arg,       (char *)extra, NULL};
  int rc = posix_spawn(&ch->pid, argv[0], NULL, NULL, argv, environ);
  if (rc != 0)
    bench_die("posix_spawn", strerror(rc));
  close(fds[1]);
  ch->fd = fds[0];
  nx_gp_t null = NX_GP_NULL;
  ch->gp = ch->me = null;
}

void bench_child_connect(struct bench_child *ch, const char *proto) {
  uint32_t head[2];
  char bytes[8192];
  if (bench_read_all(ch->fd, head, sizeof(head)) < 0 ||
      head[1] > sizeof(bytes) || bench_read_all(ch->fd, bytes, head[1]) < 0)
    bench_die("reading the child's gp", "short read");
  close(ch->fd);
  ch->fd = -1;
  nx_buffer_t *b;
  int rc;
  if ((rc = nx_buffer_from_bytes(bytes, head[1], (int)head[0], &b)) != 0 ||
      (rc = nx_get_gp(b, &ch->gp)) != 0 ||
      (rc = nx_gp_make(NULL, &ch->me)) != 0)
    bench_die("gp", nx_strerror(rc));
  nx_buffer_release(b);
  const char *p = nx_gp_protocol(&ch->gp);
  if (p == NULL || strcmp(p, proto) != 0) {
    char what[64];
    snprintf(what, sizeof(what), "the child is not reached over %s", proto);
    bench_die(what, p != NULL ? p : "unreachable");
  }
  if ((rc = nx_rsr_init_name(&b, &ch->gp, "hello", nx_sizeof_gp(&ch->me))) !=
          0 ||
      (rc = nx_put_gp(b, &ch->me)) != 0 || (rc = nx_rsr_send(b)) != 0)
    bench_die("hello", nx_strerror(rc));
}

void bench_child_stop(struct bench_child *ch) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &ch->gp, "quit", 0) == 0)
    nx_rsr_send(b);
  /* The child's nx_finalize waits until its pongs are confirmed handled
   * here: under NX_PROGRESS=poll only this thread's polling answers it
   * (docs/design.md section 9). The 100 us sleep between empty polls
   * claims no speed: this runs after the last timed round trip. */
  while (waitpid(ch->pid, NULL, WNOHANG) == 0) {
    if (nx_poll() <= 0) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  nx_gp_release(&ch->gp);
  nx_gp_release(&ch->me);
}

/* --- Open MPI's ping-pong ------------------------------------------------- */

void bench_mpi_find(struct bench_mpi *mpi) {
  if (bench_beside_self("mpi_pingpong", mpi->pingpong, sizeof(mpi->pingpong)) !=
      0)
    snprintf(mpi->why, sizeof(mpi->why),
             "no %.200s: it is built only where Open MPI is installed",
             mpi->pingpong[0] != '\0' ? mpi->pingpong : "mpi_pingpong");
}

/* Runs mpirun, waits at most `limit_s`, and returns the output (stdout and
 * stderr) in `out`, or -1 with the reason in mpi->why. */
static int mpi_exec(struct bench_mpi *mpi, char **argv, int limit_s, char *out,
                    size_t cap) {
  int fds[2];
  if (pipe(fds) < 0)
    bench_die("pipe", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(mpi->why, sizeof(mpi->why), "cannot run mpirun: %s", strerror(rc));
    return -1;
  }
  size_t len = 0;
  double deadline = bench_now_us() + limit_s * 1e6;
  for (;;) {
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int left_ms = (int)((deadline - bench_now_us()) / 1000);
    if (left_ms <= 0 || poll(&p, 1, left_ms) == 0) {
      kill(pid, SIGTERM);
      waitpid(pid, NULL, 0);
      close(fds[0]);
      snprintf(mpi->why, sizeof(mpi->why), "mpirun took over %d s", limit_s);
      return -1;
    }
    char chunk[4096];
    ssize_t r = read(fds[0], chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    /* Output past `cap` is dropped; mpi_pingpong prints a few lines. */
    size_t keep = cap - 1 - len < (size_t)r ? cap - 1 - len : (size_t)r;
    memcpy(out + len, chunk, keep);
    len += keep;
  }
  out[len] = '\0';
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    /* The last line of output usually says why. */
    while (len > 0 && out[len - 1] == '\n')
      out[--len] = '\0';
    char *last = strrchr(out, '\n');
    snprintf(mpi->why, sizeof(mpi->why), "mpirun failed (status %d): %.160s",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1,
             last != NULL ? last + 1 : out);
    return -1;
  }
  return 0;
}

#define MPI_MAX_ARGS 64

int bench_mpi_run(struct bench_mpi *mpi, const char *const *opts,
                  const size_t *sizes, double *usec, int n, int quick) {
  for (int i = 0; i < n; i++)
    usec[i] = NAN;
  if (mpi->why[0] != '\0')
    return -1;
  static const char *const head[] = {"mpirun", "--allow-run-as-root",
                                     "--oversubscribe", "-np", "2"};
  char *argv[MPI_MAX_ARGS];
  char size_arg[16][32];
  int k = 0, nopts = 0;
  while (opts != NULL && opts[nopts] != NULL)
    nopts++;
  if (n > 16 || 5 + nopts + 1 + n + 2 > MPI_MAX_ARGS)
    bench_die("bench_mpi_run", "too many options or sizes");
  for (int i = 0; i < 5; i++)
    argv[k++] = (char *)head[i];
  for (int i = 0; i < nopts; i++)
    argv[k++] = (char *)opts[i];
  argv[k++] = mpi->pingpong;
  for (int i = 0; i < n; i++) {
    snprintf(size_arg[i], sizeof(size_arg[i]), "%zu", sizes[i]);
    argv[k++] = size_arg[i];
  }
  if (quick)
    argv[k++] = "--quick";
  argv[k] = NULL;
  static char out[1 << 16];
  if (mpi_exec(mpi, argv, 120, out, sizeof(out)) < 0)
    return -1;
  for (char *line = strtok(out, "\n"); line != NULL;
       line = strtok(NULL, "\n")) {
    size_t bytes;
    double t;
    char extra;
    if (line[0] == '#' || sscanf(line, "%zu %lf %c", &bytes, &t, &extra) != 2)
      continue;
    for (int i = 0; i < n; i++)
      if (bytes == sizes[i])
        usec[i] = t;
  }
  for (int i = 0; i < n; i++) {
    if (isnan(usec[i])) {
      snprintf(mpi->why, sizeof(mpi->why),
               "mpi_pingpong printed no \"bytes usec\" line for %zu", sizes[i]);
      for (int j = 0; j < n; j++)
        usec[j] = NAN;
      return -1;
    }
  }
  return 0;
}
