/* nxrun: starts N process contexts of one program on this host, gives each the
 * gps of all, forwards signals, and reports any that dies. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "processes/ctl.h"
#include "nexus.h"
#include "nexus/protocol.h"
#include "nxu_key.h"

struct proc {
  pid_t pid;
  int fd;
  int ready;
  int done;
  int status;
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
          "dies (non-zero status or a signal) later.\n");
}

static void describe(const struct proc *p, int rank) {
  /* One nxrun stopped: its end is nxrun's doing, whatever its status. */
  if (p->stopped != 0)
    fprintf(stderr, "%s: context %d (pid %d) stopped by nxrun\n", prog_name,
            rank, (int)p->pid);
  else if (WIFSIGNALED(p->status))
    fprintf(stderr, "%s: context %d (pid %d) was killed by signal %d (%s)\n",
            prog_name, rank, (int)p->pid, WTERMSIG(p->status),
            strsignal(WTERMSIG(p->status)));
  else if (WIFEXITED(p->status) && WEXITSTATUS(p->status) != 0)
    fprintf(stderr, "%s: context %d (pid %d) exited with status %d\n",
            prog_name, rank, (int)p->pid, WEXITSTATUS(p->status));
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

/* Reaps whatever ended; tells the survivors. Returns how many ended. */
static int reap(int *failed) {
  int n = 0;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      break;
    for (int i = 0; i < nprocs; i++) {
      struct proc *p = &procs[i];
      if (p->pid != pid)
        continue;
      p->done = 1;
      p->status = status;
      n++;
      if (bootstrapping && !p->ready) {
        /* The others would wait for it until the timeout: stop them. */
        fprintf(stderr,
                "%s: context %d (pid %d) ended before it was ready; stopping "
                "the others\n",
                prog_name, i, (int)p->pid);
        *failed = 1;
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        int first = !*failed;
        *failed = 1;
        describe(p, i);
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
    }
  }
  return n;
}

int main(int argc, char **argv) {
  int n = 0, timeout = 60;
  const char *protocols = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--protocols") == 0 && i + 1 < argc)
      protocols = argv[++i];
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
      timeout = atoi(argv[++i]);
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
  if (n < 1 || n > 4096 || i >= argc || timeout < 1) {
    fprintf(stderr, "%s: %s\n", prog_name,
            i >= argc           ? "no program to run"
            : n < 1 || n > 4096 ? "-n N, 1 <= N <= 4096, is needed"
                                : "--timeout wants a positive number of "
                                  "seconds");
    usage(stderr);
    return 2;
  }
  char **prog = &argv[i];
  nprocs = n;
  procs = calloc((size_t)n, sizeof(*procs));
  uint8_t key[NX_KEY_SIZE];
  if (procs == NULL || getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
    fprintf(stderr, "%s: out of memory or randomness\n", prog_name);
    return 1;
  }
  char keyhex[2 * NX_KEY_SIZE + 1];
  nxu_hex_encode(key, NX_KEY_SIZE, keyhex);

  /* Signals arrive through a signalfd, so nothing runs in a handler. */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  pid_t self = getpid();

  for (int r = 0; r < n; r++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
      perror("nxrun: socketpair");
      kill_all(SIGKILL, 1);
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("nxrun: fork");
      kill_all(SIGKILL, 1);
      return 1;
    }
    if (pid == 0) {
      /* nxrun is single-threaded: a child dies with it, whatever kills it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self)
        _exit(1);
      sigprocmask(SIG_UNBLOCK, &mask, NULL);
      char buf[32];
      fcntl(sv[1], F_SETFD, 0);
      snprintf(buf, sizeof(buf), "%d", sv[1]);
      setenv("NX_CTL_FD", buf, 1);
      setenv("NX_KEY", keyhex, 1);
      snprintf(buf, sizeof(buf), "%d", r);
      setenv("NX_RANK", buf, 1);
      snprintf(buf, sizeof(buf), "%d", n);
      setenv("NX_SIZE", buf, 1);
      if (protocols != NULL)
        setenv("NX_PROTOCOLS", protocols, 1);
      execvp(prog[0], prog);
      fprintf(stderr, "%s: cannot run %s: %s\n", prog_name, prog[0],
              strerror(errno));
      _exit(127);
    }
    close(sv[1]);
    procs[r].pid = pid;
    procs[r].fd = sv[0];
  }

  /* Bootstrap: every context reports READY; then each gets all of them. */
  int failed = 0, ready = 0, ended = 0;
  uint8_t *buf = malloc(NXI_CTL_MAX);
  time_t deadline = time(NULL) + timeout;
  while (ready < n && buf != NULL) {
    struct pollfd fds[n + 1];
    fds[0].fd = sfd;
    fds[0].events = POLLIN;
    for (int r = 0; r < n; r++) {
      fds[r + 1].fd = procs[r].ready || procs[r].done ? -1 : procs[r].fd;
      fds[r + 1].events = POLLIN;
    }
    int left = (int)(deadline - time(NULL));
    if (left <= 0 || poll(fds, (nfds_t)n + 1, left * 1000) == 0) {
      fprintf(stderr,
              "%s: %d of %d contexts not ready after %d s (did they call "
              "nx_init and nx_context_peers?)\n",
              prog_name, n - ready, n, timeout);
      failed = 1;
      break;
    }
    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) &&
          si.ssi_signo != SIGCHLD) {
        kill_all((int)si.ssi_signo, 0);
        failed = 1;
      }
      ended += reap(&failed);
      if (failed)
        break;
    }
    for (int r = 0; r < n; r++) {
      if (!(fds[r + 1].revents & (POLLIN | POLLHUP)))
        continue;
      long len = nxi_ctl_recv(procs[r].fd, buf, 0);
      struct nxi_ctl_peer peer;
      if (len <= 0 || nxi_ctl_parse_ready(buf, (size_t)len, &peer) < 0) {
        fds[r + 1].fd = -1;
        if (len <= 0)
          continue; /* it is ending: SIGCHLD tells the rest */
        fprintf(stderr, "%s: context %d sent a bad READY message\n", prog_name,
                r);
        failed = 1;
        break;
      }
      procs[r].entry = malloc((size_t)len - 1);
      if (procs[r].entry == NULL) {
        failed = 1;
        break;
      }
      memcpy(procs[r].entry, buf + 1, (size_t)len - 1);
      procs[r].entry_len = (size_t)len - 1;
      procs[r].context = peer.context;
      procs[r].ready = 1;
      ready++;
    }
    if (failed)
      break;
  }
  if (!failed && ready == n) {
    size_t len = NXI_CTL_PEERS_HEAD;
    for (int r = 0; r < n; r++)
      len += procs[r].entry_len;
    if (len > NXI_CTL_MAX) {
      fprintf(stderr, "%s: too many contexts for one message\n", prog_name);
      failed = 1;
    }
    for (int r = 0; r < n && !failed; r++) {
      size_t off = NXI_CTL_PEERS_HEAD;
      nxi_ctl_put_peers_head(buf, (uint32_t)r, (uint32_t)n);
      for (int q = 0; q < n; q++) {
        memcpy(buf + off, procs[q].entry, procs[q].entry_len);
        off += procs[q].entry_len;
      }
      nxi_ctl_send(procs[r].fd, buf, off);
    }
  }
  if (failed)
    kill_all(SIGKILL, 1);
  bootstrapping = 0;

  /* Run: forward signals, report deaths, until every context ended. */
  while (ended < n) {
    struct pollfd p = {.fd = sfd, .events = POLLIN};
    if (poll(&p, 1, 1000) <= 0) {
      ended += reap(&failed); /* in case SIGCHLDs were merged */
      continue;
    }
    struct signalfd_siginfo si;
    if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
      continue;
    if (si.ssi_signo != SIGCHLD) {
      fprintf(stderr, "%s: forwarding signal %d to the contexts\n", prog_name,
              (int)si.ssi_signo);
      kill_all((int)si.ssi_signo, 0);
      failed = 1;
    }
    ended += reap(&failed);
  }
  for (int r = 0; r < n; r++) {
    close(procs[r].fd);
    free(procs[r].entry);
  }
  free(procs);
  free(buf);
  return failed ? 1 : 0;
}
