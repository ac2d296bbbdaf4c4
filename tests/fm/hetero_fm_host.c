/* The x86-64 side's helpers for fortran_hetero.f90: start the s390x peer
 * (its command is this program's arguments), hand it an outport, and end
 * it. Called from Fortran. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fm.h"

static nx_mutex_t m;
static nx_cond_t c;
static nx_gp_t peer = NX_GP_NULL;
static int hello;
static pid_t pid = -1;

int fmh_start(fm_port_t *out);
int fmh_finish(void);

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_mutex_lock(&m);
  if (hello == 0)
    hello = nx_get_gp(buf, &peer) == 0 ? 1 : -1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* This program's arguments (after argv[0]) from /proc/self/cmdline. */
static char **own_args(int *n) {
  static char buf[8192];
  static char *args[64];
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (f == NULL)
    return NULL;
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  *n = 0;
  size_t i = strlen(buf) + 1; /* skip argv[0] */
  while (i < len && *n < 62) {
    args[(*n)++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  args[*n] = NULL;
  return args;
}

/* Starts the peer with the attach URL appended, waits (300 s at most: qemu
 * is slow to start) for its hello, and moves `out` to it. */
int fmh_start(fm_port_t *out) {
  const char *url;
  int n, r;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  char **args = own_args(&n);
  if (args == NULL || n < 1)
    return FM_EINVAL;
  if ((r = nx_handler_register(nx_context_self(), "fmh.hello", on_hello,
                               NX_HANDLER_NONTHREADED, NULL)) != 0 ||
      (r = nx_attach_listen(&url)) != 0)
    return r;
  args[n] = (char *)url;
  args[n + 1] = NULL;
  fflush(NULL);
  pid = fork();
  if (pid == 0) {
    execvp(args[0], args);
    fprintf(stderr, "fm hetero host: cannot run %s: %s\n", args[0],
            strerror(errno));
    _exit(127);
  }
  if (pid < 0)
    return FM_EINVAL;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 300;
  nx_mutex_lock(&m);
  while (hello == 0)
    if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT)
      break;
  int ok = hello == 1;
  nx_mutex_unlock(&m);
  if (!ok)
    return NX_ETIMEDOUT;
  nx_buffer_t *b;
  if ((r = nx_rsr_init_name(&b, &peer, "fmh.port", 256)) != 0)
    return r;
  if ((r = fm_put_port(b, out)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

/* Tells the peer to quit and waits (60 s at most) for it: 0 when it exited
 * with 0. */
int fmh_finish(void) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &peer, "fmh.quit", 8) == 0)
    nx_rsr_send(b);
  int status = -1;
  for (int i = 0; pid > 0 && i < 6000; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      break;
    }
    struct timespec step = {0, 10000000};
    nanosleep(&step, NULL);
  }
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 1;
  }
  nx_gp_release(&peer);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
