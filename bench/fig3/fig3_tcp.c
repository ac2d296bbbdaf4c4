/* The raw TCP floors of the Figure 3 run: a length-prefixed array of doubles
 * back and forth over a loopback connection between this process and a forked
 * child, both blocking in recv or (--busy) both busy-polling a non-blocking
 * socket, each on a core of its own (as bench_rsr_tcp's raw-busy anchor). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench_args.h"
#include "fig3.h"

/* Usage: fig3_tcp [--busy] [--size N] [--iters N] [--warm N] [--reps N]
 *                 [--max-ms N]
 * Every message is an 8-byte length and the payload, sent with one writev,
 * TCP_NODELAY on both ends: the least any message-passing system over TCP
 * has to do. Blocking (the default), each read is a recv with MSG_WAITALL
 * (one wake-up per message). With --busy both sockets are non-blocking and
 * both processes spin on recv's EAGAIN, this one pinned to the first CPU it
 * may run on and the child to the second (when there are two): the best
 * raw TCP round trip, which bench_rsr_tcp's raw-busy anchor also measures.
 * Whether busy-polling pays is what bench/run shows, printing the two rows
 * side by side (tcp/tcp/busy-polled against tcp/tcp/blocking, same run), as
 * bench_rsr_tcp does (raw-busy against raw-blocking): about 10 us against
 * 90 us at 8 B on an idle machine; on a loaded one the spinning pair can
 * lose, so the goals divide by the faster of the two. */

static char out_buf[FIG3_MAX_BYTES];
static char in_buf[FIG3_MAX_BYTES];
static int busy;                  /* --busy: spin on EAGAIN */
static int pin_cpu[2] = {-1, -1}; /* --busy: this process's, the child's */

/* Reads `n` bytes: blocking with MSG_WAITALL, or spinning on EAGAIN. */
static void recv_all(int fd, char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, buf, n, busy ? 0 : MSG_WAITALL);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
      fig3_die("recv: %s", r == 0 ? "connection closed" : strerror(errno));
    }
  }
}

/* Sends the length and `n` bytes of `buf`. */
static void send_msg(int fd, const char *buf, size_t n) {
  uint64_t len = n;
  struct iovec iov[2] = {{&len, sizeof(len)}, {(void *)buf, n}};
  size_t left = sizeof(len) + n;
  int first = 0;
  while (left > 0) {
    ssize_t r = writev(fd, iov + first, 2 - first);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (r <= 0)
      fig3_die("writev: %s", strerror(errno));
    left -= (size_t)r;
    while (first < 2 && (size_t)r >= iov[first].iov_len) {
      r -= (ssize_t)iov[first].iov_len;
      iov[first].iov_len = 0;
      first++;
    }
    if (first < 2) {
      iov[first].iov_base = (char *)iov[first].iov_base + r;
      iov[first].iov_len -= (size_t)r;
    }
  }
}

/* Receives one message into `buf`; returns its length. */
static size_t recv_msg(int fd, char *buf) {
  uint64_t len;
  recv_all(fd, (char *)&len, sizeof(len));
  if (len > FIG3_MAX_BYTES)
    fig3_die("a message of %llu bytes", (unsigned long long)len);
  recv_all(fd, buf, (size_t)len);
  return (size_t)len;
}

/* The echo peer's read of a length: 0 once the connection closed. */
static int recv_len(int fd, uint64_t *len) {
  size_t got = 0;
  while (got < sizeof(*len)) {
    ssize_t r =
        recv(fd, (char *)len + got, sizeof(*len) - got, busy ? 0 : MSG_WAITALL);
    if (r > 0)
      got += (size_t)r;
    else if (r == 0 || (errno != EINTR && errno != EAGAIN))
      return 0;
  }
  return 1;
}

struct ping {
  int fd;
  size_t size;
};

static void ping_once(void *arg) {
  const struct ping *p = arg;
  send_msg(p->fd, out_buf, p->size);
  if (recv_msg(p->fd, in_buf) != p->size)
    fig3_die("a reply of the wrong size");
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (busy)
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* --busy: the first two CPUs this process may run on, one per process, as
 * bench_rsr_tcp pins its raw and RSR pairs (and mpirun binds its two
 * ranks). Unpinned, a busy machine's scheduler often puts both spinning
 * processes on one core, and every round trip then waits for a time slice.
 * With one CPU nothing is pinned. */
static void choose_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return;
  for (int cpu = 0, k = 0; cpu < CPU_SETSIZE && k < 2; cpu++)
    if (CPU_ISSET(cpu, &set))
      pin_cpu[k++] = cpu;
  if (pin_cpu[1] < 0)
    pin_cpu[0] = -1;
}

static void pin_to(int cpu) {
  if (cpu < 0)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    fig3_die("pinning to CPU %d: %s", cpu, strerror(errno));
}

static const char usage[] =
    "usage: fig3_tcp [--busy] [--size BYTES] [--iters N] [--warm N] "
    "[--reps N]\n"
    "                [--max-ms N]\n"
    "  The Figure 3 floor: a raw TCP ping-pong over loopback between this\n"
    "  process and a forked child; prints one result line (bench/run reads "
    "it).\n"
    "  --busy     busy-poll non-blocking sockets, each side pinned to a "
    "CPU\n"
    "  --size     bytes per message, a multiple of 8 (default 8)\n"
    "  --iters    round trips per rep (default 1000)\n"
    "  --warm     round trips before timing (default 100)\n"
    "  --reps     timed reps (default 1)\n"
    "  --max-ms   stop a rep after this many ms (default 1000)\n";

int main(int argc, char **argv) {
  fig3_prog = "fig3_tcp";
  struct fig3_opts o = {
      .size = 8, .iters = 1000, .warm = 100, .reps = 1, .max_ms = 1000};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--busy") == 0) {
      busy = 1;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      int r = fig3_common_option(argc, argv, &i, &o);
      if (r == 0)
        return bench_bad_arg(fig3_prog, argv[i], NULL, usage);
      if (r < 0) {
        fputs(usage, stderr);
        return 2;
      }
    }
  }
  if (busy)
    choose_cpus();
  signal(SIGPIPE, SIG_IGN);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(in);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&in, sizeof(in)) < 0 ||
      listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&in, &alen) < 0)
    fig3_die("listen on loopback: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0)
    fig3_die("fork: %s", strerror(errno));
  if (pid == 0) {
    /* The echo peer: ends when the connection does. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pin_to(pin_cpu[1]);
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0)
      fig3_die("connect: %s", strerror(errno));
    tune(fd);
    for (;;) {
      uint64_t len;
      if (!recv_len(fd, &len))
        _exit(0);
      if (len > FIG3_MAX_BYTES)
        _exit(1);
      recv_all(fd, in_buf, (size_t)len);
      send_msg(fd, in_buf, (size_t)len);
    }
  }
  pin_to(pin_cpu[0]);
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0)
    fig3_die("accept: %s", strerror(errno));
  close(lfd);
  tune(fd);
  memset(out_buf, 0x5a, o.size);
  struct ping ping = {fd, o.size};
  fig3_measure(&o, ping_once, &ping);
  close(fd);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
