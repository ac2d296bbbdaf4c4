/* nxrun: starts N process contexts of one program on this host, gives each the
 * gps of all, forwards signals, and reports any that dies. One libuv loop
 * does the watching: the children are spawned with uv_spawn and reaped by
 * its exit callbacks, their control channels are uv_poll handles, signals
 * come through uv_signal handles, and the bootstrap's deadline is a timer. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

#include "processes/ctl.h"
#include "nexus.h"
#include "nexus/protocol.h"
#include "nxu_key.h"

/* Set in a child's environment: the child is nxrun's exec step, run in the
 * new process before the program (exec_rank). Its value is nxrun's pid. */
#define EXEC_STEP_ENV "NXRUN_EXEC_PARENT"
/* The control channel's descriptor in every child. */
#define CHILD_CTL_FD 3

struct proc {
  uv_process_t handle;
  uv_poll_t ctl; /* its control channel, read while bootstrapping */
  int fd;        /* nxrun's end of the control channel; -1 none */
  int polling;   /* `ctl` initialised (closed once the bootstrap ends) */
  pid_t pid;
  int ready;
  int done;
  int64_t exit_status;
  int term_signal;
  int stopped; /* the signal nxrun sent to stop it (0: none) */
  uint64_t context;
  uint8_t *entry; /* its READY message minus the type byte */
  size_t entry_len;
};

static struct proc *procs;
static int nprocs;
static const char *prog_name = "nxrun";
static int bootstrapping = 1; /* until every context got the PEERS message */
static int stop_on_death;     /* --stop-on-death */
static int failed;            /* nxrun's exit status will be 1 */
static int nready, nended;
static int timeout_s = 60;
static uint8_t *msg_buf; /* NXI_CTL_MAX bytes: one control message */

static uv_loop_t *loop;
static uv_timer_t deadline;
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP};
#define NFORWARDED (int)(sizeof(forwarded) / sizeof(forwarded[0]))
static uv_signal_t sig_handles[NFORWARDED];

static void usage(FILE *f) {
  fprintf(f,
          "usage: nxrun -n N [--protocols a,b,...] [--timeout SECONDS] "
          "[--stop-on-death] program [args...]\n"
          "  Starts N process contexts of `program` on this host. Each gets "
          "the\n  global pointers of all N (nx_context_peers). nxrun forwards "
          "SIGINT,\n  SIGTERM and SIGHUP, reports every context that dies, "
          "and exits with\n  0 only if all N exit with status 0. A context "
          "that ends before it is\n  ready (nx_init failed, or it never "
          "called nx_context_peers) stops all\n  the others at once. "
          "--stop-on-death: also stop all the others when any\n  context "
          "dies (non-zero status or a signal) later.\n"
          "  With NX_TRACE=DIR set, the contexts write their event logs in "
          "DIR,\n  and once all have ended nxrun merges them into "
          "DIR/nexus.otf2 with\n  nxtrace, where it is installed beside "
          "nxrun (docs/tracing.md).\n");
}

/* NX_TRACE=dir: the contexts' logs merged into dir/nexus.otf2 by nxtrace,
 * found beside this program (`self`); said on stderr. Not an error of
 * the run when it fails: the logs stay, for nxtrace by hand. */
static void merge_trace(const char *self) {
  const char *dir = getenv("NX_TRACE");
  if (dir == NULL || dir[0] == '\0')
    return;
  char tool[4096];
  const char *slash = strrchr(self, '/');
  snprintf(tool, sizeof(tool), "%.*s/nxtrace",
           slash != NULL ? (int)(slash - self) : 1, slash != NULL ? self : ".");
  if (access(tool, X_OK) != 0) {
    fprintf(stderr,
            "%s: the event logs are in %s (no nxtrace beside nxrun to "
            "merge them: built without OTF2)\n",
            prog_name, dir);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    execl(tool, tool, "--quiet", dir, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    fprintf(stderr, "%s: trace: %s/nexus.otf2 (nxtrace %s: the summary)\n",
            prog_name, dir, dir);
  else
    fprintf(stderr,
            "%s: merging the event logs in %s failed (nxtrace %s "
            "says why)\n",
            prog_name, dir, dir);
}

/* The exec step, in a new child before its program runs: uv_spawn cannot
 * run code between fork and exec, so the child runs nxrun again with
 * EXEC_STEP_ENV set, and this sets PR_SET_PDEATHSIG (SIGKILL) and execs
 * the program in the same process. nxrun is single-threaded, so the child
 * dies with it, whatever kills it; a child whose nxrun is already gone
 * (it was reparented) ends here. The setting survives the exec. */
static int exec_rank(const char *parent, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != (pid_t)atol(parent))
    _exit(1);
  unsetenv(EXEC_STEP_ENV);
  if (argv[1] == NULL)
    _exit(2);
  execvp(argv[1], &argv[1]);
  fprintf(stderr, "%s: cannot run %s: %s\n", prog_name, argv[1],
          strerror(errno));
  _exit(127);
}

static void describe(const struct proc *p, int rank) {
  /* One nxrun stopped: its end is nxrun's doing, whatever its status. */
  if (p->stopped != 0)
    fprintf(stderr, "%s: context %d (pid %d) stopped by nxrun\n", prog_name,
            rank, (int)p->pid);
  else if (p->term_signal != 0)
    fprintf(stderr, "%s: context %d (pid %d) was killed by signal %d (%s)\n",
            prog_name, rank, (int)p->pid, p->term_signal,
            strsignal(p->term_signal));
  else if (p->exit_status != 0)
    fprintf(stderr, "%s: context %d (pid %d) exited with status %d\n",
            prog_name, rank, (int)p->pid, (int)p->exit_status);
}

/* Sends `sig` to every context still running; `ours`: nxrun stops them
 * (reported as such), rather than forwarding a signal it got. */
static void kill_all(int sig, int ours) {
  for (int i = 0; i < nprocs; i++)
    if (procs[i].pid > 0 && !procs[i].done) {
      if (ours)
        procs[i].stopped = sig;
      kill(procs[i].pid, sig);
    }
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

/* The bootstrap is over (every context got PEERS, or it failed): its
 * deadline and the control channels' watches go. */
static void bootstrap_end(void) {
  bootstrapping = 0;
  close_handle((uv_handle_t *)&deadline);
  for (int i = 0; i < nprocs; i++)
    if (procs[i].polling)
      close_handle((uv_handle_t *)&procs[i].ctl);
}

/* The bootstrap failed: every context is stopped. */
static void bootstrap_fail(void) {
  failed = 1;
  if (!bootstrapping)
    return;
  bootstrap_end();
  kill_all(SIGKILL, 1);
}

/* Every context got READY: each gets all of them, in rank order. */
static void send_peers(void) {
  size_t len = NXI_CTL_PEERS_HEAD;
  for (int r = 0; r < nprocs; r++)
    len += procs[r].entry_len;
  if (len > NXI_CTL_MAX) {
    fprintf(stderr, "%s: too many contexts for one message\n", prog_name);
    bootstrap_fail();
    return;
  }
  for (int r = 0; r < nprocs; r++) {
    size_t off = NXI_CTL_PEERS_HEAD;
    nxi_ctl_put_peers_head(msg_buf, (uint32_t)r, (uint32_t)nprocs);
    for (int q = 0; q < nprocs; q++) {
      memcpy(msg_buf + off, procs[q].entry, procs[q].entry_len);
      off += procs[q].entry_len;
    }
    nxi_ctl_send(procs[r].fd, msg_buf, off);
  }
  bootstrap_end();
}

/* A context's control channel is readable while bootstrapping: its READY
 * message, or its end (then its exit callback tells the rest). */
static void on_ctl(uv_poll_t *h, int status, int events) {
  (void)events;
  struct proc *p = h->data;
  int rank = (int)(p - procs);
  long len = status < 0 ? -1 : nxi_ctl_recv(p->fd, msg_buf, 0);
  struct nxi_ctl_peer peer;
  if (len <= 0 || nxi_ctl_parse_ready(msg_buf, (size_t)len, &peer) < 0) {
    uv_poll_stop(h);
    if (len <= 0)
      return; /* it is ending: its exit callback tells the rest */
    fprintf(stderr, "%s: context %d sent a bad READY message\n", prog_name,
            rank);
    bootstrap_fail();
    return;
  }
  uv_poll_stop(h);
  p->entry = malloc((size_t)len - 1);
  if (p->entry == NULL) {
    bootstrap_fail();
    return;
  }
  memcpy(p->entry, msg_buf + 1, (size_t)len - 1);
  p->entry_len = (size_t)len - 1;
  p->context = peer.context;
  p->ready = 1;
  if (++nready == nprocs)
    send_peers();
}

static void on_deadline(uv_timer_t *t) {
  (void)t;
  fprintf(stderr,
          "%s: %d of %d contexts not ready after %d s (did they call "
          "nx_init and nx_context_peers?)\n",
          prog_name, nprocs - nready, nprocs, timeout_s);
  bootstrap_fail();
}

static void on_signal(uv_signal_t *h, int sig) {
  (void)h;
  if (bootstrapping) {
    kill_all(sig, 0);
    bootstrap_fail();
    return;
  }
  fprintf(stderr, "%s: forwarding signal %d to the contexts\n", prog_name, sig);
  kill_all(sig, 0);
  failed = 1;
}

/* A context ended (libuv reaped it): reported, the survivors told. Once
 * all have ended, the loop's last handles go and uv_run returns. */
static void on_child_exit(uv_process_t *h, int64_t exit_status,
                          int term_signal) {
  struct proc *p = h->data;
  int rank = (int)(p - procs);
  p->done = 1;
  p->exit_status = exit_status;
  p->term_signal = term_signal;
  nended++;
  close_handle((uv_handle_t *)h);
  if (bootstrapping && !p->ready) {
    /* The others would wait for it until the timeout: stop them. */
    fprintf(stderr,
            "%s: context %d (pid %d) ended before it was ready; stopping "
            "the others\n",
            prog_name, rank, (int)p->pid);
    bootstrap_fail();
  }
  if (term_signal != 0 || exit_status != 0) {
    int first = !failed;
    failed = 1;
    describe(p, rank);
    if (stop_on_death && !bootstrapping && first && p->stopped == 0) {
      fprintf(stderr, "%s: stopping the other contexts (--stop-on-death)\n",
              prog_name);
      kill_all(SIGTERM, 1);
    }
    if (p->context != 0) {
      uint8_t msg[NXI_CTL_PEER_DEAD_LEN];
      nxi_ctl_put_peer_dead(msg, p->context);
      for (int j = 0; j < nprocs; j++)
        if (!procs[j].done)
          nxi_ctl_send(procs[j].fd, msg, sizeof(msg));
    }
  }
  if (nended == nprocs) {
    if (bootstrapping)
      bootstrap_end();
    for (int i = 0; i < NFORWARDED; i++)
      close_handle((uv_handle_t *)&sig_handles[i]);
  }
}

/* Starts rank `r` (its exec step, exec_rank, then the program) with its
 * end of a new control channel as CHILD_CTL_FD. 0, or a libuv error. */
static int spawn_rank(int r, const char *self, char **prog, int argc_prog) {
  struct proc *p = &procs[r];
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return uv_translate_sys_error(errno);
  char rank[32];
  snprintf(rank, sizeof(rank), "%d", r);
  setenv("NX_RANK", rank, 1); /* the child's environment is nxrun's */
  char **args = calloc((size_t)argc_prog + 2, sizeof(*args));
  if (args == NULL) {
    close(sv[0]);
    close(sv[1]);
    return UV_ENOMEM;
  }
  args[0] = (char *)prog_name;
  for (int i = 0; i < argc_prog; i++)
    args[i + 1] = prog[i];
  uv_stdio_container_t stdio[CHILD_CTL_FD + 1];
  for (int fd = 0; fd < CHILD_CTL_FD; fd++) {
    stdio[fd].flags = UV_INHERIT_FD;
    stdio[fd].data.fd = fd;
  }
  stdio[CHILD_CTL_FD].flags = UV_INHERIT_FD;
  stdio[CHILD_CTL_FD].data.fd = sv[1];
  uv_process_options_t o = {
      .exit_cb = on_child_exit,
      .file = self,
      .args = args,
      .stdio_count = CHILD_CTL_FD + 1,
      .stdio = stdio,
  };
  p->handle.data = p;
  int rc = uv_spawn(loop, &p->handle, &o);
  free(args);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    close_handle((uv_handle_t *)&p->handle);
    return rc;
  }
  p->pid = p->handle.pid;
  p->fd = sv[0];
  p->ctl.data = p;
  if ((rc = uv_poll_init(loop, &p->ctl, p->fd)) == 0) {
    p->polling = 1;
    rc = uv_poll_start(&p->ctl, UV_READABLE | UV_DISCONNECT, on_ctl);
  }
  return rc;
}

int main(int argc, char **argv) {
  const char *parent = getenv(EXEC_STEP_ENV);
  if (parent != NULL)
    return exec_rank(parent, argv);
  /* Standard descriptors that are closed are /dev/null from here on: the
   * children inherit all three, and no socket of ours may take their
   * numbers. */
  for (int fd = 0; fd < CHILD_CTL_FD; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
      return 1;
  int n = 0;
  const char *protocols = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--protocols") == 0 && i + 1 < argc)
      protocols = argv[++i];
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
      timeout_s = atoi(argv[++i]);
    else if (strcmp(argv[i], "--stop-on-death") == 0)
      stop_on_death = 1;
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "%s: %s '%s'\n", prog_name,
              strcmp(argv[i], "-n") == 0 ||
                      strcmp(argv[i], "--protocols") == 0 ||
                      strcmp(argv[i], "--timeout") == 0
                  ? "a value is missing after"
                  : "unknown argument",
              argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (n < 1 || n > 4096 || i >= argc || timeout_s < 1) {
    fprintf(stderr, "%s: %s\n", prog_name,
            i >= argc           ? "no program to run"
            : n < 1 || n > 4096 ? "-n N, 1 <= N <= 4096, is needed"
                                : "--timeout wants a positive number of "
                                  "seconds");
    usage(stderr);
    return 2;
  }
  nprocs = n;
  procs = calloc((size_t)n, sizeof(*procs));
  msg_buf = malloc(NXI_CTL_MAX);
  uint8_t key[NX_KEY_SIZE];
  if (procs == NULL || msg_buf == NULL ||
      getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
    fprintf(stderr, "%s: out of memory or randomness\n", prog_name);
    return 1;
  }
  for (int r = 0; r < n; r++)
    procs[r].fd = -1;
  /* The exec step is this program again (exec_rank), by its path now:
   * /proc/self/exe in the child would name whatever runs there. */
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0) {
    perror("nxrun: /proc/self/exe");
    return 1;
  }
  self[sl] = '\0';

  /* What every child gets in its environment (NX_RANK is set per child). */
  char keyhex[2 * NX_KEY_SIZE + 1];
  nxu_hex_encode(key, NX_KEY_SIZE, keyhex);
  char num[32];
  setenv("NX_KEY", keyhex, 1);
  snprintf(num, sizeof(num), "%d", n);
  setenv("NX_SIZE", num, 1);
  snprintf(num, sizeof(num), "%d", CHILD_CTL_FD);
  setenv("NX_CTL_FD", num, 1);
  if (protocols != NULL)
    setenv("NX_PROTOCOLS", protocols, 1);
  snprintf(num, sizeof(num), "%ld", (long)getpid());
  setenv(EXEC_STEP_ENV, num, 1);

  loop = uv_default_loop();
  for (int s = 0; s < NFORWARDED; s++) {
    uv_signal_init(loop, &sig_handles[s]);
    uv_signal_start(&sig_handles[s], on_signal, forwarded[s]);
  }
  uv_timer_init(loop, &deadline);
  uv_timer_start(&deadline, on_deadline, (uint64_t)timeout_s * 1000, 0);
  for (int r = 0; r < n; r++) {
    int rc = spawn_rank(r, self, &argv[i], argc - i);
    if (rc != 0) {
      fprintf(stderr, "%s: cannot start context %d: %s\n", prog_name, r,
              uv_strerror(rc));
      kill_all(SIGKILL, 1);
      return 1;
    }
  }
  unsetenv(EXEC_STEP_ENV);

  /* The bootstrap (every context's READY, then PEERS to each), then the
   * run (signals forwarded, deaths reported), until every context ended. */
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  for (int r = 0; r < n; r++) {
    if (procs[r].fd >= 0)
      close(procs[r].fd);
    free(procs[r].entry);
  }
  free(procs);
  free(msg_buf);
  merge_trace(self);
  return failed ? 1 : 0;
}
