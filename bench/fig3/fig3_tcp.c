/* The raw TCP floor of the Figure 3 run: a length-prefixed array of doubles
 * back and forth over a loopback connection between this process and a forked
 * child, both blocking in recv. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "fig3.h"

/* Usage: fig3_tcp [--size N] [--iters N] [--warm N] [--reps N]
 * Every message is an 8-byte length and the payload, sent with one writev
 * and read with MSG_WAITALL (one wake-up per message), TCP_NODELAY on both
 * ends: the least any message-passing system over TCP has to do. */

static char out_buf[FIG3_MAX_BYTES];
static char in_buf[FIG3_MAX_BYTES];

static void recv_all(int fd, char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, buf, n, MSG_WAITALL);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
    } else if (r == 0 || errno != EINTR) {
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
    if (r < 0 && errno == EINTR)
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
}

int main(int argc, char **argv) {
  fig3_prog = "fig3_tcp";
  struct fig3_opts o = {
      .size = 8, .iters = 1000, .warm = 100, .reps = 1, .max_ms = 1000};
  for (int i = 1; i < argc; i++) {
    if (fig3_common_option(argc, argv, &i, &o) <= 0) {
      fprintf(stderr, "usage: fig3_tcp [--size BYTES] [--iters N] "
                      "[--warm N] [--reps N]\n");
      return 2;
    }
  }
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
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0)
      fig3_die("connect: %s", strerror(errno));
    tune(fd);
    for (;;) {
      uint64_t len;
      if (recv(fd, &len, sizeof(len), MSG_WAITALL) != sizeof(len))
        _exit(0);
      if (len > FIG3_MAX_BYTES)
        _exit(1);
      recv_all(fd, in_buf, (size_t)len);
      send_msg(fd, in_buf, (size_t)len);
    }
  }
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
