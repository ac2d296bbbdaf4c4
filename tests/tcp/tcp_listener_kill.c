/* A listening socket of the tcp module destroyed under it (ss -K -l, as a
 * connection-tracking tool or an administrator may): the module says so
 * once, stops watching it, and goes on. Before, the socket reported its
 * error at every epoll_wait: the process could not sleep and logged the
 * same line each round (319,448 lines in 2 s).
 *
 * Checked (tests/common/expect.h): one line on stderr names the failed
 * listener, and no other line mentions it after 1.5 s of waiting in
 * nx_cond_timedwait; a connect to its port is refused; nx_finalize returns 0.
 *
 * Skips (exit 77, with the reason) when not root or when ss -K cannot
 * destroy a socket here (no iproute2, or a kernel without
 * CONFIG_INET_DIAG_DESTROY). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "nexus.h"

/* A port free on 127.0.0.1 now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  close(fd);
  return ntohs(a.sin_port);
}

static int connect_refused(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int r = connect(fd, (struct sockaddr *)&a, sizeof(a));
  int e = errno;
  close(fd);
  return r != 0 && e == ECONNREFUSED;
}

/* Runs `ss -K -t -n -l src 127.0.0.1:port`; 1 if it listed the socket. */
static int ss_kill_listener(int port) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "ss -K -t -n -l src 127.0.0.1:%d 2>/dev/null",
           port);
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return 0;
  char line[512], want[32];
  snprintf(want, sizeof(want), "127.0.0.1:%d", port);
  int listed = 0;
  while (fgets(line, sizeof(line), p) != NULL)
    listed |= strstr(line, want) != NULL;
  int st = pclose(p);
  return listed && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void) {
  if (geteuid() != 0) {
    printf("SKIPPED: ss -K needs root\n");
    return 77;
  }
  int port = free_port();
  if (port <= 0) {
    printf("FAILED: no free port\n");
    return 1;
  }
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
  setenv("NX_TCP_LISTEN", listen, 1);
  setenv("NX_PROTOCOLS", "tcp,local", 1);
  unsetenv("NX_DEBUG");

  /* The runtime's stderr goes to a file, read at the end. */
  char path[] = "/tmp/nx-listener-kill-XXXXXX";
  int log_fd = mkstemp(path);
  int saved_err = dup(2);
  if (log_fd < 0 || saved_err < 0 || dup2(log_fd, 2) < 0) {
    printf("FAILED: no log file\n");
    return 1;
  }
  unlink(path);
  int rc = nx_init(NULL, NULL);
  if (rc != 0) {
    dup2(saved_err, 2);
    printf("FAILED: nx_init: %s\n", nx_strerror(rc));
    return 1;
  }
  if (!ss_kill_listener(port)) {
    nx_finalize();
    dup2(saved_err, 2);
    printf("SKIPPED: ss -K cannot destroy a socket here (iproute2, "
           "CONFIG_INET_DIAG_DESTROY)\n");
    return 77;
  }
  /* Waiting drives progress: the module sees the socket's error. */
  nx_mutex_t m;
  nx_cond_t c;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += 500000000L;
  until.tv_sec += 1 + until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  nx_mutex_lock(&m);
  while (nx_cond_timedwait(&c, &m, &until) == 0)
    ;
  nx_mutex_unlock(&m);
  int refused = connect_refused(port);
  int fin = nx_finalize();
  fflush(stderr);
  dup2(saved_err, 2);

  /* What the runtime wrote. */
  FILE *f = fdopen(log_fd, "r");
  int lines = 0, failed_lines = 0, listener_lines = 0;
  char line[512];
  rewind(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    lines++;
    if (strstr(line, "listening socket") != NULL) {
      listener_lines++;
      if (strstr(line, listen) != NULL && strstr(line, "failed") != NULL)
        failed_lines++;
    }
    if (lines <= 5)
      fprintf(stderr, "runtime: %s", line);
  }
  fclose(f);
  printf("%d line(s) on stderr, %d about the listening socket\n", lines,
         listener_lines);
  NXT_EXPECT(refused, 1);
  NXT_EXPECT(fin == 0, 1);
  NXT_EXPECT(failed_lines == 1, 1);
  NXT_EXPECT(listener_lines == 1, 1);
  printf("passed\n");
  return 0;
}
