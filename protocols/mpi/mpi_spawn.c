/* The mpi module's launcher: process contexts started with MPI_Comm_spawn
 * on nodes such as "mpi" or "mpi:host=a,b", and the control channel to them
 * over the intercommunicator (docs/mpi.md, "Spawning"). */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi_spawn.h"
#include "mpi_peer.h"
#include "nxu_time.h"

/* Threads. Every slot here runs on a program thread (nx_nodes_acquire,
 * nx_context_create, nx_context_destroy, the core's control-channel
 * watcher). Spawning needs MPI_THREAD_MULTIPLE: MPI_Comm_spawn blocks for
 * as long as the launcher takes, and may never return (below), so it
 * cannot hold the module's `big` lock. */

/* The control channel: one intercommunicator, the peer its rank 0. */
struct mpimod_ctl {
  MPI_Comm inter;
  int child; /* the creator's end: the child's END_TAG message is ours */
};

#define CTL_TAG 1
#define END_TAG 2
/* ctl_recv polls (MPI has nothing to sleep on): it sleeps between polls,
 * from CTL_POLL_MIN_US doubling up to CTL_POLL_MAX_US. */
#define CTL_POLL_MIN_US 20
#define CTL_POLL_MAX_US 2000

/* Specs. */

/* The MPI_Info key and value a spec asks for: "mpi" (none), "mpi:host=a,b"
 * (node i gets host i modulo their number), "mpi:hostfile=PATH" or
 * "mpi:add-hostfile=PATH". */
struct spec {
  const char *key; /* NULL: no placement asked for */
  char value[256];
};

static int parse_spec(const char *s, struct spec *out, char *why,
                      size_t why_len) {
  static const char *const keys[] = {"host", "hostfile", "add-hostfile"};
  out->key = NULL;
  out->value[0] = '\0';
  if (strcmp(s, MPIMOD_NAME) == 0)
    return 0;
  if (strncmp(s, MPIMOD_NAME ":", sizeof(MPIMOD_NAME)) != 0) {
    snprintf(why, why_len, "expected \"mpi\" or \"mpi:KEY=VALUE\"");
    return NX_EINVAL;
  }
  const char *kv = s + sizeof(MPIMOD_NAME);
  const char *eq = strchr(kv, '=');
  for (size_t i = 0; eq != NULL && i < sizeof(keys) / sizeof(keys[0]); i++)
    if (strlen(keys[i]) == (size_t)(eq - kv) &&
        strncmp(kv, keys[i], (size_t)(eq - kv)) == 0)
      out->key = keys[i];
  if (out->key == NULL) {
    snprintf(why, why_len,
             "unknown key in \"%.64s\" (expected host=, hostfile= or "
             "add-hostfile=)",
             kv);
    return NX_EINVAL;
  }
  const char *v = eq + 1;
  if (v[0] == '\0' || strlen(v) >= sizeof(out->value) ||
      (strcmp(out->key, "host") == 0 &&
       (v[0] == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,") != NULL))) {
    snprintf(why, why_len, "empty or malformed value for %s", out->key);
    return NX_EINVAL;
  }
  snprintf(out->value, sizeof(out->value), "%s", v);
  return 0;
}

/* For host=a,b,c: the host of node `node`, in place. */
static void pick_host(struct spec *sp, uint32_t node) {
  if (sp->key == NULL || strcmp(sp->key, "host") != 0)
    return;
  size_t n = 1;
  for (const char *p = sp->value; *p != '\0'; p++)
    n += *p == ',';
  const char *h = sp->value;
  for (size_t i = node % n; i > 0; i--)
    h = strchr(h, ',') + 1;
  size_t len = strcspn(h, ",");
  memmove(sp->value, h, len);
  sp->value[len] = '\0';
}

int mpimod_node_spec(void *state, const char *spec, char *why, size_t why_len) {
  struct mpimod *m = state;
  struct spec sp;
  int r = parse_spec(spec, &sp, why, why_len);
  if (r == 0 && m->serialized) {
    snprintf(why, why_len,
             "spawning needs MPI_THREAD_MULTIPLE (NX_MPI_THREAD=serialized "
             "or MPI gave less)");
    r = NX_ENOTSUP;
  }
  return r;
}

/* Starting MPI for the first spawn of a process no launcher started (the
 * module's spawn-only mode). */
static int ensure_mpi(struct mpimod *m) {
  pthread_mutex_lock(&m->spawn_lock);
  int r = 0;
  if (!m->mpi_up) {
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Finalized(&finalized);
    MPI_Initialized(&inited);
    if (finalized) {
      MPIMOD_LOG(m, 0, "cannot spawn: MPI was finalized already");
      r = NX_ENOTSUP;
    } else if (!inited) {
      int e = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
      if (e != MPI_SUCCESS) {
        MPIMOD_LOG(m, 0, "cannot spawn: MPI_Init_thread failed");
        r = mpimod_status_to_nx(e);
      } else {
        m->own_mpi = 1;
      }
    } else {
      MPI_Query_thread(&provided);
    }
    if (r == 0 && provided < MPI_THREAD_MULTIPLE) {
      MPIMOD_LOG(m, 0, "cannot spawn: MPI gives no MPI_THREAD_MULTIPLE");
      r = NX_ENOTSUP;
    }
    if (r == 0)
      m->mpi_up = 1;
  }
  /* MPI_COMM_SELF's handler is MPI_ERRORS_ARE_FATAL unless the program
   * changed it, and it is the program's: the spawns use a duplicate of
   * our own (made once, whoever started MPI). */
  if (r == 0 && m->self == MPI_COMM_NULL) {
    int e = MPI_Comm_dup(MPI_COMM_SELF, &m->self);
    if (e == MPI_SUCCESS)
      e = MPI_Comm_set_errhandler(m->self, MPI_ERRORS_RETURN);
    if (e != MPI_SUCCESS) {
      MPIMOD_LOG(m, 0, "cannot spawn: MPI_Comm_dup of MPI_COMM_SELF failed");
      if (m->self != MPI_COMM_NULL)
        MPI_Comm_free(&m->self);
      r = mpimod_status_to_nx(e);
    }
  }
  pthread_mutex_unlock(&m->spawn_lock);
  return r;
}

/* Whether `exe` can be run here: a path that is executable, or a name
 * found in PATH. Checked only when no placement is asked for (the
 * program may live elsewhere on other hosts): Open MPI 4.1's spawn of a
 * missing program never returns to a singleton. */
static int runnable_here(const char *exe) {
  if (strchr(exe, '/') != NULL)
    return access(exe, X_OK) == 0;
  const char *path = getenv("PATH");
  char buf[PATH_MAX];
  while (path != NULL && *path != '\0') {
    size_t len = strcspn(path, ":");
    if (len > 0 && len + 1 + strlen(exe) < sizeof(buf)) {
      snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, exe);
      if (access(buf, X_OK) == 0)
        return 1;
    }
    path += len + (path[len] == ':');
  }
  return 0;
}

/* Ended children. Open MPI 4.1 with Debian's external PMIx sometimes
 * never returns from an MPI_Comm_spawn started while a child spawned
 * before is still ending: the new child waits in PMIx_Init for an answer
 * its launcher (orted) never sends, and the creator waits in
 * PMIx_Lookup for the child. A plain MPI program that spawns a child and
 * disconnects from it in a loop hung after 7 to 64 spawns on a loaded
 * 2-core machine; waiting before each spawn until the child before was
 * reaped, it ran 300 without one. So a child sends its creator its pid
 * and host (END_TAG) first thing after MPI_Init; the creator reads them
 * when the channel closes, and its next spawn first waits until that
 * process is gone, for at most MPIMOD_ENDED_WAIT_MS from the close (a
 * child under AddressSanitizer checks for leaks for seconds after its
 * disconnect) and within the create's timeout. Only
 * children on the creator's own host are waited for (kill(pid, 0) says
 * nothing about another host's pid); a pid of another process by then
 * only costs the wait's bound. */
struct end_msg {
  int32_t pid;
  char host[64];
};

static void my_host(char *host, size_t len) {
  if (gethostname(host, len - 1) != 0)
    host[0] = '\0';
  host[len - 1] = '\0';
}

/* The channel to a child closes: its END_TAG message, when it came, names
 * a process the next spawn waits for. */
static void remember_ended(struct mpimod *m, struct mpimod_ctl *c) {
  int flag = 0;
  MPI_Message msg;
  MPI_Status st;
  struct end_msg e;
  int count = 0;
  if (MPI_Improbe(0, END_TAG, c->inter, &flag, &msg, &st) != MPI_SUCCESS ||
      !flag || MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS ||
      count != (int)sizeof(e) ||
      MPI_Mrecv(&e, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return;
  char host[sizeof(e.host)];
  my_host(host, sizeof(host));
  e.host[sizeof(e.host) - 1] = '\0';
  if (e.pid <= 0 || host[0] == '\0' || strcmp(host, e.host) != 0)
    return;
  pthread_mutex_lock(&m->spawn_lock);
  if (m->nended == MPIMOD_ENDED_MAX) { /* the oldest is let go of */
    memmove(m->ended, m->ended + 1, sizeof(m->ended) - sizeof(m->ended[0]));
    m->nended--;
  }
  m->ended[m->nended].pid = e.pid;
  m->ended[m->nended].until = nxu_now_ms() + MPIMOD_ENDED_WAIT_MS;
  m->nended++;
  pthread_mutex_unlock(&m->spawn_lock);
}

/* Before a spawn: every remembered child is gone, or its wait is up, or
 * the create's own time (`limit`, nxu_now_ms) is. */
static void wait_ended(struct mpimod *m, uint64_t limit) {
  struct mpimod_ended e[MPIMOD_ENDED_MAX];
  pthread_mutex_lock(&m->spawn_lock);
  int n = m->nended;
  memcpy(e, m->ended, (size_t)n * sizeof(e[0]));
  m->nended = 0;
  pthread_mutex_unlock(&m->spawn_lock);
  for (int i = 0; i < n; i++) {
    uint64_t until = e[i].until < limit ? e[i].until : limit;
    while ((kill(e[i].pid, 0) == 0 || errno != ESRCH) && nxu_now_ms() < until) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
}

/* One MPI_Comm_spawn on a thread of its own, so that the caller can stop
 * waiting: Open MPI 4.1 does not return from MPI_Comm_spawn when the
 * child ends before MPI_Init (under mpirun the whole job is aborted
 * instead). A spawn given up on stays in MPI: the thread frees what is
 * left if it ever returns, and the module counts it in `stuck` (MPI is
 * then not finalized). */
struct spawn_job {
  struct mpimod *m;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done, abandoned;
  int error;
  MPI_Comm inter;
  char *exe;
  char **argv; /* without the program name, NULL-ended */
  MPI_Info info;
};

static void job_free(struct spawn_job *j) {
  if (j->info != MPI_INFO_NULL)
    MPI_Info_free(&j->info);
  for (size_t i = 0; j->argv != NULL && j->argv[i] != NULL; i++)
    free(j->argv[i]);
  free(j->argv);
  free(j->exe);
  pthread_cond_destroy(&j->cond);
  pthread_mutex_destroy(&j->lock);
  free(j);
}

static void *spawn_main(void *arg) {
  struct spawn_job *j = arg;
  int errcode = MPI_SUCCESS;
  MPI_Comm inter = MPI_COMM_NULL;
  int e = MPI_Comm_spawn(j->exe, j->argv, 1, j->info, 0, j->m->self, &inter,
                         &errcode);
  /* A spawn that failed leaves `inter` undefined (Open MPI 4.1: not a
   * communicator MPI_Comm_free accepts): nothing to free then. */
  if (e != MPI_SUCCESS)
    inter = MPI_COMM_NULL;
  else if (errcode != MPI_SUCCESS)
    e = errcode;
  struct mpimod *m = j->m;
  pthread_mutex_lock(&m->spawn_lock);
  m->spawning = 0;
  pthread_cond_broadcast(&m->spawn_cond);
  pthread_mutex_unlock(&m->spawn_lock);
  pthread_mutex_lock(&j->lock);
  j->done = 1;
  j->error = e;
  j->inter = inter;
  int abandoned = j->abandoned;
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(&j->lock);
  if (abandoned) {
    if (inter != MPI_COMM_NULL)
      MPI_Comm_free(&inter);
    atomic_fetch_sub(&j->m->stuck, 1);
    job_free(j);
  }
  return NULL;
}

static struct spawn_job *job_new(struct mpimod *m, const struct spec *sp,
                                 const char *exe, char *const argv[],
                                 const char *const env[]) {
  struct spawn_job *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return NULL;
  j->m = m;
  j->info = MPI_INFO_NULL;
  j->inter = MPI_COMM_NULL;
  pthread_mutex_init(&j->lock, NULL);
  pthread_cond_init(&j->cond, NULL);
  size_t argc = 0;
  while (argv != NULL && argv[0] != NULL && argv[1 + argc] != NULL)
    argc++;
  j->exe = strdup(exe);
  j->argv = calloc(argc + 1, sizeof(char *));
  int ok = j->exe != NULL && j->argv != NULL;
  for (size_t i = 0; ok && i < argc; i++)
    ok = (j->argv[i] = strdup(argv[1 + i])) != NULL;
  /* The variables the core gives the child, one a line (Open MPI's "env"
   * key); they must not contain a newline. */
  char vars[256] = "";
  size_t used = 0;
  for (size_t i = 0; ok && env != NULL && env[i] != NULL; i++) {
    int n = snprintf(vars + used, sizeof(vars) - used, "%s%s",
                     used > 0 ? "\n" : "", env[i]);
    ok = n > 0 && (size_t)n < sizeof(vars) - used &&
         strchr(env[i], '\n') == NULL;
    used += ok ? (size_t)n : 0;
  }
  ok = ok && MPI_Info_create(&j->info) == MPI_SUCCESS;
  if (ok && used > 0)
    ok = MPI_Info_set(j->info, "env", vars) == MPI_SUCCESS;
  if (ok && sp->key != NULL)
    ok = MPI_Info_set(j->info, sp->key, sp->value) == MPI_SUCCESS;
  if (!ok) {
    job_free(j);
    return NULL;
  }
  return j;
}

int mpimod_spawn(void *state, const char *spec, uint32_t node, const char *exe,
                 char *const argv[], const char *const env[], int timeout_ms,
                 void **ctl) {
  struct mpimod *m = state;
  struct spec sp;
  char why[128];
  if (exe == NULL || ctl == NULL || parse_spec(spec, &sp, why, sizeof(why)) < 0)
    return NX_EINVAL;
  if (m->serialized)
    return NX_ENOTSUP;
  if (sp.key == NULL && !runnable_here(exe))
    return NX_ENOENT;
  pick_host(&sp, node);
  int r = ensure_mpi(m);
  if (r < 0)
    return r;
  struct mpimod_ctl *c = calloc(1, sizeof(*c));
  struct spawn_job *j = c != NULL ? job_new(m, &sp, exe, argv, env) : NULL;
  if (j == NULL) {
    free(c);
    return NX_ENOMEM;
  }
  uint64_t limit =
      timeout_ms >= 0 ? nxu_now_ms() + (uint64_t)timeout_ms : UINT64_MAX;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  /* One MPI_Comm_spawn at a time: it is collective over m->self,
   * and collectives on one communicator must not run concurrently. A
   * spawn stuck in MPI keeps the later ones waiting until their time is
   * up. */
  pthread_mutex_lock(&m->spawn_lock);
  int busy = 0;
  while (m->spawning && !busy)
    busy = pthread_cond_timedwait(&m->spawn_cond, &m->spawn_lock, &until) ==
           ETIMEDOUT;
  if (!busy)
    m->spawning = 1;
  pthread_mutex_unlock(&m->spawn_lock);
  /* The create's time may run out waiting for ended children: then
   * nothing is spawned (a spawn given up on would stay inside MPI). */
  if (!busy)
    wait_ended(m, limit);
  int late = !busy && nxu_now_ms() >= limit;
  pthread_t t;
  r = busy || late                                   ? NX_ETIMEDOUT
      : pthread_create(&t, NULL, spawn_main, j) != 0 ? NX_EAGAIN
                                                     : 0;
  if (r < 0) {
    if (!busy) {
      pthread_mutex_lock(&m->spawn_lock);
      m->spawning = 0;
      pthread_cond_broadcast(&m->spawn_cond);
      pthread_mutex_unlock(&m->spawn_lock);
    }
    job_free(j);
    free(c);
    return r;
  }
  pthread_detach(t);
  pthread_mutex_lock(&j->lock);
  while (!j->done && timeout_ms >= 0 &&
         pthread_cond_timedwait(&j->cond, &j->lock, &until) != ETIMEDOUT)
    ;
  int done = j->done;
  if (!done) {
    j->abandoned = 1;
    atomic_fetch_add(&m->stuck, 1);
  }
  pthread_mutex_unlock(&j->lock);
  if (!done) {
    MPIMOD_LOG(m, 0,
               "MPI_Comm_spawn of %s did not return within %d ms (a child "
               "that ends before MPI_Init leaves Open MPI waiting); given up",
               exe, timeout_ms);
    free(c);
    return NX_ETIMEDOUT;
  }
  int e = j->error;
  c->inter = j->inter;
  job_free(j);
  if (e != MPI_SUCCESS) {
    if (c->inter != MPI_COMM_NULL)
      MPI_Comm_free(&c->inter);
    free(c);
    MPIMOD_LOG(m, 1, "MPI_Comm_spawn of %s failed (MPI error %d)", exe, e);
    return mpimod_status_to_nx(e);
  }
  MPI_Comm_set_errhandler(c->inter, MPI_ERRORS_RETURN);
  c->child = 1;
  *ctl = c;
  return 0;
}

/* The control channel. */

/* The module's `big` lock is taken around each call, for a spawned child
 * whose MPI gives only MPI_THREAD_SERIALIZED. */
int mpimod_ctl_send(void *state, void *ctl, const void *msg, size_t len) {
  struct mpimod *m = state;
  struct mpimod_ctl *c = ctl;
  if (len > INT_MAX)
    return NX_EMSGSIZE;
  mpimod_lock(m);
  int e = MPI_Send(msg, (int)len, MPI_BYTE, 0, CTL_TAG, c->inter);
  mpimod_unlock(m);
  return e == MPI_SUCCESS ? 0 : NX_EPEERDEAD;
}

long mpimod_ctl_recv(void *state, void *ctl, void *buf, size_t cap,
                     int timeout_ms) {
  struct mpimod *m = state;
  struct mpimod_ctl *c = ctl;
  uint64_t deadline = timeout_ms >= 0 ? nxu_now_ms() + (uint64_t)timeout_ms : 0;
  long sleep_us = CTL_POLL_MIN_US;
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    mpimod_lock(m);
    int e = MPI_Improbe(0, CTL_TAG, c->inter, &flag, &msg, &st);
    mpimod_unlock(m);
    if (e != MPI_SUCCESS)
      return 0; /* the creator or child is gone as far as MPI can tell */
    if (flag) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      void *into = buf;
      if (count < 0 || (size_t)count > cap)
        into = malloc(count > 0 ? (size_t)count : 1); /* taken, dropped */
      mpimod_lock(m);
      e = into != NULL
              ? MPI_Mrecv(into, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE)
              : MPI_ERR_NO_MEM;
      mpimod_unlock(m);
      if (into != buf) {
        free(into);
        return NX_EMSGSIZE;
      }
      return e == MPI_SUCCESS ? count : 0;
    }
    if (timeout_ms >= 0 && nxu_now_ms() >= deadline)
      return NX_ETIMEDOUT;
    struct timespec ts = {0, sleep_us * 1000};
    nanosleep(&ts, NULL);
    if (sleep_us < CTL_POLL_MAX_US)
      sleep_us *= 2;
  }
}

/* Disconnecting waits until the other side disconnects too; a peer that
 * failed is only let go of (MPI_Comm_free). */
void mpimod_ctl_close(void *state, void *ctl, unsigned flags) {
  struct mpimod *m = state;
  struct mpimod_ctl *c = ctl;
  if (c == NULL)
    return;
  mpimod_lock(m);
  if (c->child)
    remember_ended(m, c);
  if (flags & NX_CTL_ABANDON)
    MPI_Comm_free(&c->inter);
  else
    MPI_Comm_disconnect(&c->inter);
  mpimod_unlock(m);
  free(c);
}

int mpimod_ctl_parent(void *state, void **ctl) {
  struct mpimod *m = state;
  if (m->parent == MPI_COMM_NULL)
    return NX_ENOENT;
  struct mpimod_ctl *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NX_ENOMEM;
  c->inter = m->parent;
  m->parent = MPI_COMM_NULL; /* the core's now */
  *ctl = c;
  return 0;
}

void mpimod_spawn_attach(struct mpimod *m) {
  MPI_Comm parent = MPI_COMM_NULL;
  if (MPI_Comm_get_parent(&parent) == MPI_SUCCESS && parent != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
    /* For the creator's next spawn ("Ended children"). 68 bytes: below
     * every eager limit, so the send returns at once. */
    struct end_msg e = {.pid = (int32_t)getpid()};
    my_host(e.host, sizeof(e.host));
    MPI_Send(&e, (int)sizeof(e), MPI_BYTE, 0, END_TAG, parent);
  }
  m->parent = parent;
}
