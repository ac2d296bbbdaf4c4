/* Round trips between two processes over loopback at 8 B to 4 MiB: RSRs over
 * the tcp module, copying and zero-copy, printed beside raw TCP ping-pongs
 * (blocking and busy-polled) and Open MPI's tcp BTL measured in the same run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: bench_rsr_tcp [--quick] [--only SYSTEM] [--size BYTES] [--no-pin].
 * The RSR peer is this program again ("--child <fd> <parent pid> <cpu>"),
 * the raw peer a fork of it; Open MPI runs under mpirun with mpi_pingpong,
 * which is built next to this program. --only and --size narrow a run for
 * profiling. */

/* The systems compared, in the order they run for each size and run. RSR_*
 * put the payload with nx_put_bytes and the echo copies it out and in;
 * ZC_* are zero copy: nx_put_bytes_ref and nx_get_bytes_ptr, echoed by
 * reference (bench_echo_ref). */
enum system {
  RAW_BLOCKING,
  RAW_BUSY,
  RSR_THREAD,
  RSR_POLL,
  ZC_THREAD,
  ZC_POLL,
  PL_THREAD,
  PL_POLL,
  ZP_THREAD,
  ZP_POLL,
  MPI,
  NSYSTEMS
};

/* PL_* are the RSR_* round trips with receive placement: both ends name
 * their receive buffer (bench_place), so the copy out is not made; ZP_*
 * the ZC_* ones with it: the bytes cross once each way, from the sender's
 * memory into the receiver's, as MPI's do. */
static const char *const system_name[NSYSTEMS] = {
    "raw-blocking", "raw-busy", "rsr-thread", "rsr-poll",
    "zc-thread",    "zc-poll",  "pl-thread",  "pl-poll",
    "zp-thread",    "zp-poll",  "mpi"};
static const char *const system_label[NSYSTEMS] = {
    "raw TCP, blocking recv",     "raw TCP, busy-polled recv",
    "RSR, progress thread",       "RSR, NX_PROGRESS=poll",
    "zero copy, progress thread", "zero copy, NX_PROGRESS=poll",
    "placed, progress thread",    "placed, NX_PROGRESS=poll",
    "zero copy placed, thread",   "zero copy placed, poll",
    "Open MPI, tcp BTL"};

#define MAX_PAYLOAD (4 << 20)
#define MAX_SIZES 5
#define MAX_RUNS 9

static int quick;
static int runs = 5;
/* This program's path, which the RSR child runs. Read once from
 * /proc/self/exe, which under valgrind names the program rather than the
 * tool. */
static char self_path[PATH_MAX];
static char send_buf[MAX_PAYLOAD];
/* mpirun binds its two ranks to two cores; the raw and RSR runs put their
 * two processes on the same two cores, this one on pin_cpu[0] and the
 * peer on pin_cpu[1] (-1: not pinned). Unpinned, the scheduler of a busy
 * machine often stacks both busy-polling processes on one core, and every
 * round trip then waits for a time slice: --no-pin runs this benchmark
 * unpinned, which shows what pinning buys. */
static int pin_cpu[2] = {-1, -1};
static char recv_buf[MAX_PAYLOAD];

static void die(const char *what) { bench_die(what, strerror(errno)); }

static void die_nx(const char *what, int rc) {
  bench_die(what, nx_strerror(rc));
}

/* 1. The anchors: `size` bytes back and forth over a loopback TCP
 * connection with TCP_NODELAY, both processes either blocking in recv or
 * busy-polling a non-blocking socket. One connection and one forked peer
 * per run, so that an idle busy-polling peer never competes with the other
 * systems. */

/* On a non-blocking socket both loops spin on EAGAIN; on a blocking one
 * MSG_WAITALL lets the kernel wake the reader once per message rather than
 * once per segment, the best a blocking reader can do. */
static void raw_recv(int fd, char *buf, size_t n, int flags) {
  while (n > 0) {
    ssize_t r = recv(fd, buf, n, flags);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      die("raw recv");
    }
  }
}

static void raw_send(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = send(fd, buf, n, MSG_NOSIGNAL);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      die("raw send");
    }
  }
}

static void raw_tune(int fd, int busy) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (busy)
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* One run: `warm` round trips, then `n` timed ones. Returns the time per
 * timed round trip in microseconds. */
static double raw_run(int busy, size_t size, int warm, int n) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(in);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&in, sizeof(in)) < 0 ||
      listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&in, &len) < 0)
    die("raw listen");
  int flags = busy ? 0 : MSG_WAITALL;
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    bench_pin_to(pin_cpu[1]);
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0)
      die("raw connect");
    raw_tune(fd, busy);
    for (int i = 0; i < warm + n; i++) {
      raw_recv(fd, recv_buf, size, flags);
      raw_send(fd, recv_buf, size);
    }
    _exit(0);
  }
  bench_pin_to(pin_cpu[0]);
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0)
    die("raw accept");
  close(lfd);
  raw_tune(fd, busy);
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0)
      t0 = bench_now_us();
    raw_send(fd, send_buf, size);
    raw_recv(fd, recv_buf, size, flags);
  }
  double t = (bench_now_us() - t0) / n;
  close(fd);
  waitpid(pid, NULL, 0);
  bench_pin_to(-1); /* mpirun, started from here, binds its ranks itself */
  return t;
}

/* 2. RSRs: "ping" carries the payload to the child's initial context,
 * whose non-threaded handler echoes it in "pong" to the gp it was given
 * once ("hello"); pong copies the payload out, as a receiver would, and
 * signals the main thread, which waits in nx_cond_wait. */

static long bad_replies;
static size_t reply_size;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (nx_get_bytes(buf, recv_buf, reply_size) != 0)
    bad_replies++; /* read by the main thread after bench_wait_replies */
  bench_reply_arrived();
}

/* A zero-copy reply: read in place (bench_check_ref). */
static void on_pong_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (bench_check_ref(buf, send_buf, reply_size) != 0)
    bad_replies++;
  bench_reply_arrived();
}

/* The child's "ping": echoes the payload in "pong" (bench_echo). */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo(buf, &bench_reply_gp, nx_handler_id("pong"), recv_buf,
             sizeof(recv_buf));
}

/* One run: starts the child, both sides in NX_PROGRESS=`mode`, makes
 * `warm` round trips, then `n` timed ones. Returns the time per timed round
 * trip in microseconds. A fresh pair of processes per run, like the raw
 * runs, so that no idle peer spins while another system is measured. With
 * `zc` the pings put send_buf by reference: it never changes, so it may go
 * again before its release came; every release is waited for at the end. */
static double rsr_run(const char *mode, int zc, int place, size_t size,
                      int warm, int n) {
  setenv("NX_PROGRESS", mode, 1);
  if (place)
    setenv("BENCH_PLACE", "1", 1);
  else
    unsetenv("BENCH_PLACE");
  char cpu_arg[16];
  snprintf(cpu_arg, sizeof(cpu_arg), "%d", pin_cpu[1]);
  struct bench_child child;
  bench_child_spawn(&child, cpu_arg);
  bench_pin_to(pin_cpu[0]); /* before nx_init: its threads stay on this core */
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die_nx("nx_init", rc);
  bench_sync_init();
  bad_replies = 0;
  reply_size = size;
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "pong_ref", on_pong_ref,
                      NX_HANDLER_NONTHREADED, NULL);
  bench_place_into(recv_buf, sizeof(recv_buf));
  if (place) {
    nx_handler_set_place(nx_context_self(), "pong", bench_place);
    nx_handler_set_place(nx_context_self(), "pong_ref", bench_place);
  }
  bench_child_connect(&child, "tcp");
  nx_handler_id_t ping = nx_handler_id("ping");
  nx_handler_id_t ping_ref = nx_handler_id("ping_ref");
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0)
      t0 = bench_now_us();
    if (zc) {
      long want = bench_next_reply();
      if ((rc = bench_send_ref(&child.gp, ping_ref, send_buf, size)) != 0)
        die_nx("a zero-copy ping", rc);
      bench_wait_replies(want, 0);
      continue;
    }
    nx_buffer_t *b;
    if ((rc = nx_rsr_init(&b, &child.gp, ping, nx_sizeof_bytes(size))) != 0 ||
        (rc = nx_put_bytes(b, send_buf, size)) != 0)
      die_nx("ping", rc);
    long want = bench_next_reply();
    if ((rc = nx_rsr_send(b)) != 0)
      die_nx("nx_rsr_send", rc);
    bench_wait_replies(want, 0);
  }
  double t = (bench_now_us() - t0) / n;
  bench_wait_released(10);
  if (bad_replies > 0) {
    fprintf(stderr,
            "bench_rsr_tcp: %ld replies of the wrong size or contents\n",
            bad_replies);
    exit(1);
  }
  bench_child_stop(&child);
  nx_finalize();
  bench_pin_to(-1);
  return t;
}

/* 3. Open MPI: mpi_pingpong under mpirun with the tcp BTL over loopback
 * (bench_mpi_run).
 * One mpirun per size (the same options as for all sizes at once), so that
 * it runs amid the other systems' runs of that size. */

/* Returns mpi_pingpong's median round trip for `size` bytes in
 * microseconds, or NAN (the reason in mpi->why). */
static double mpi_run(struct bench_mpi *mpi, size_t size) {
  static const char *const tcp[] = {
      "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", NULL};
  double usec = NAN;
  bench_mpi_run(mpi, tcp, &size, &usec, 1, quick);
  return usec;
}

/* The results of one size: the median of the runs and the fastest run
 * (Open MPI reports only its own median); NAN where not measured. */
struct result {
  size_t size;
  double med[NSYSTEMS];
  double best[NSYSTEMS];
};

static void print_ratio(double rsr, double anchor) {
  if (isnan(rsr) || isnan(anchor))
    printf("%10s", "-");
  else
    printf("%9.2fx", rsr / anchor);
}

static void print_size(const struct result *res, int n) {
  char label[32];
  bench_size_label(res->size, label, sizeof(label));
  printf("\n%s: %d round trips per run, median of %d runs (fastest)\n", label,
         n, runs);
  printf("%-54s%10s%10s%10s\n", "", "RSR/busy", "RSR/block", "RSR/MPI");
  for (int s = 0; s < MPI; s++) {
    if (isnan(res->med[s]))
      continue;
    printf("  %-28s %9.2f us (%9.2f)", system_label[s], res->med[s],
           res->best[s]);
    if (s >= RSR_THREAD) {
      print_ratio(res->med[s], res->med[RAW_BUSY]);
      print_ratio(res->med[s], res->med[RAW_BLOCKING]);
      print_ratio(res->med[s], res->med[MPI]);
    }
    printf("\n");
  }
  if (!isnan(res->med[MPI]))
    printf("  %-28s %9.2f us  (its own median of %d runs)\n", system_label[MPI],
           res->med[MPI], quick ? 3 : 5);
}

/* Prints one goal for both modes of the RSRs (`zc` 0), the zero-copy
 * RSRs (`zc` 1), the placed ones (2) or the zero-copy placed ones (3):
 * met when rsr <= limit * anchor. */
static void print_goal(const char *goal, const struct result *res, int zc,
                       enum system anchor, double limit) {
  printf("  %s\n", goal);
  int first = zc == 3   ? ZP_THREAD
              : zc == 2 ? PL_THREAD
              : zc      ? ZC_THREAD
                        : RSR_THREAD;
  for (int s = first; s <= first + 1; s++) {
    if (res == NULL || isnan(res->med[s]) || isnan(res->med[anchor])) {
      printf("    %-28s not measured\n", system_label[s]);
      continue;
    }
    double ratio = res->med[s] / res->med[anchor];
    printf("    %-28s %6.2fx  %s\n", system_label[s], ratio,
           ratio <= limit ? "met" : "NOT met");
  }
}

static const char usage[] =
    "usage: bench_rsr_tcp [--quick] [--only SYSTEM] [--size BYTES] "
    "[--no-pin]\n"
    "  Round trips over tcp between two processes: raw sockets, RSRs and\n"
    "  zero-copy RSRs (handler thread or polling) and Open MPI, 8 B to 4 "
    "MiB;\n"
    "  prints the medians, the ratios and the goals.\n"
    "  --quick    fewer runs\n"
    "  --only     one SYSTEM: raw-blocking, raw-busy, rsr-thread, "
    "rsr-poll,\n"
    "             zc-thread, zc-poll, pl-thread, pl-poll, zp-thread, "
    "zp-poll\n"
    "             or mpi\n"
    "  --size     one payload size in bytes\n"
    "  --no-pin   leave the processes unpinned\n";

int main(int argc, char **argv) {
  bench_cpus_init();
  bench_name = "bench_rsr_tcp";
  bench_child_place_mem = recv_buf; /* the child's on_ping copies there */
  bench_child_place_len = sizeof(recv_buf);
  int child = bench_child_run(argc, argv, on_ping);
  if (child >= 0)
    return child;
  int pin = 1;
  size_t sizes[MAX_SIZES] = {8, 1024, 65536, 1 << 20, 4 << 20};
  int nsizes = MAX_SIZES;
  int only = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      runs = 3;
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      i++;
      for (int s = 0; s < NSYSTEMS; s++)
        if (strcmp(argv[i], system_name[s]) == 0)
          only = s;
      if (only < 0)
        return bench_bad_arg("bench_rsr_tcp", argv[i], "no such system", usage);
    } else if (strcmp(argv[i], "--no-pin") == 0) {
      pin = 0;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      char *end;
      unsigned long long v = strtoull(argv[++i], &end, 10);
      if (*end != '\0' || v == 0 || v > MAX_PAYLOAD)
        return bench_bad_arg("bench_rsr_tcp", argv[i], "not a size in range",
                             usage);
      sizes[0] = (size_t)v;
      nsizes = 1;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_rsr_tcp", argv[i], NULL, usage);
    }
  }
  ssize_t len = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
  if (len <= 0 || self_path[0] != '/')
    die("readlink /proc/self/exe");
  self_path[len] = '\0';
  /* Both RSR processes: tcp only, one key. */
  char key[33];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  for (int i = 0; i < 16; i++)
    snprintf(key + 2 * i, 3, "%02x", rand() & 0xff);
  setenv("NX_KEY", key, 1);
  setenv("NX_PROTOCOLS", "tcp", 1);
  signal(SIGPIPE, SIG_IGN);
  memset(send_buf, 0x5a, sizeof(send_buf));
  struct bench_mpi mpi = {{0}, {0}};
  if (only < 0 || only == MPI)
    bench_mpi_find(&mpi);

  /* The load says how far to trust the run: busy-polling suffers most
   * when other programs want the CPUs. */
  double load = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f != NULL) {
    if (fscanf(f, "%lf", &load) != 1)
      load = NAN;
    fclose(f);
  }
  for (int cpu = 0, k = 0; pin && cpu < CPU_SETSIZE && k < 2; cpu++)
    if (CPU_ISSET(cpu, &bench_all_cpus))
      pin_cpu[k++] = cpu;
  if (pin_cpu[1] < 0)
    pin_cpu[0] = -1; /* one CPU: nothing to spread over */
  printf("round trips between two processes over loopback TCP; the systems "
         "take turns within each size; load average %.2f\n",
         load);
  if (pin_cpu[1] >= 0)
    printf("raw and RSR processes pinned to CPUs %d and %d, as mpirun binds "
           "its two ranks (--no-pin: unpinned)\n",
           pin_cpu[0], pin_cpu[1]);
  else
    printf("processes not pinned (mpirun binds its ranks all the same)\n");
  struct result results[MAX_SIZES];
  for (int z = 0; z < nsizes; z++) {
    struct result *res = &results[z];
    size_t size = sizes[z];
    int n = bench_iters(size, quick), warm = n / 10 + 1;
    double v[NSYSTEMS][MAX_RUNS];
    res->size = size;
    for (int s = 0; s < NSYSTEMS; s++)
      res->med[s] = res->best[s] = NAN;
    /* Each run takes every system in turn, so that a noisy stretch of the
     * machine falls on all of them alike. mpirun runs once, in the middle,
     * and takes its own median. */
    for (int r = 0; r < runs; r++) {
      for (int s = 0; s < NSYSTEMS; s++) {
        if (only >= 0 && only != s)
          continue;
        switch (s) {
        case RAW_BLOCKING:
        case RAW_BUSY: v[s][r] = raw_run(s == RAW_BUSY, size, warm, n); break;
        case RSR_THREAD:
        case RSR_POLL:
        case ZC_THREAD:
        case ZC_POLL:
        case PL_THREAD:
        case PL_POLL:
        case ZP_THREAD:
        case ZP_POLL: {
          int poll =
              s == RSR_POLL || s == ZC_POLL || s == PL_POLL || s == ZP_POLL;
          int zc = s == ZC_THREAD || s == ZC_POLL || s >= ZP_THREAD;
          v[s][r] = rsr_run(poll ? "poll" : "thread", zc, s >= PL_THREAD, size,
                            warm, n);
          break;
        }
        case MPI:
          if (r == runs / 2)
            res->med[MPI] = mpi_run(&mpi, size);
          break;
        }
      }
    }
    for (int s = 0; s < MPI; s++) {
      if (only >= 0 && only != s)
        continue;
      res->med[s] = bench_median(v[s], runs, &res->best[s]);
    }
    print_size(res, n);
    if ((only < 0 || only == MPI) && isnan(res->med[MPI]))
      printf("  Open MPI: not available (%s)\n", mpi.why);
    fflush(stdout);
  }

  if (only >= 0 || nsizes < MAX_SIZES)
    return 0; /* a narrowed run, for profiling: no goals */
  const struct result *small = NULL, *large = NULL, *huge = NULL;
  for (int z = 0; z < nsizes; z++) {
    if (results[z].size == 8)
      small = &results[z];
    if (results[z].size == 1 << 20)
      large = &results[z];
    if (results[z].size == 4 << 20)
      huge = &results[z];
  }
  printf("\ngoals:\n");
  print_goal("8 B: RSR within 1.25x of busy-polled raw TCP", small, 0, RAW_BUSY,
             1.25);
  print_goal("1 MiB: RSR no slower than Open MPI's tcp BTL", large, 0, MPI,
             1.0);
  printf("zero copy: goal: within 1.1x of raw at 1 MiB and 4 MiB (raw: "
         "busy-polled raw TCP), and no slower than Open MPI's tcp BTL\n");
  print_goal("1 MiB: zero copy within 1.1x of busy-polled raw TCP", large, 1,
             RAW_BUSY, 1.1);
  print_goal("4 MiB: zero copy within 1.1x of busy-polled raw TCP", huge, 1,
             RAW_BUSY, 1.1);
  print_goal("1 MiB: zero copy no slower than Open MPI's tcp BTL", large, 1,
             MPI, 1.0);
  print_goal("4 MiB: zero copy no slower than Open MPI's tcp BTL", huge, 1, MPI,
             1.0);
  printf("receive placement (issue 40): goal: RSR 1 MiB no slower than Open "
         "MPI's tcp BTL\n");
  print_goal("1 MiB: placed no slower than Open MPI's tcp BTL", large, 2, MPI,
             1.0);
  print_goal("4 MiB: placed no slower than Open MPI's tcp BTL", huge, 2, MPI,
             1.0);
  print_goal("1 MiB: zero copy placed no slower than Open MPI's tcp BTL", large,
             3, MPI, 1.0);
  print_goal("4 MiB: zero copy placed no slower than Open MPI's tcp BTL", huge,
             3, MPI, 1.0);
  return 0;
}
