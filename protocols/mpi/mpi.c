/* The mpi protocol module: RSR frames between ranks of one MPI job, over a
 * private duplicate of MPI_COMM_WORLD, and process contexts started with
 * MPI_Comm_spawn; this file holds the ops table, init and finalize,
 * descriptors, endpoints, job_peers and the watcher thread. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi_peer.h"
#include "mpi_rx.h"
#include "mpi_spawn.h"
#include "mpi_tx.h"
#include "mpimod.h"
#include "nxu_opt.h"
#include "nxu_time.h"

/* Threads. send() runs on any program thread, progress() on the driver,
 * job_peers() on a program thread, the watcher on its own. With
 * MPI_THREAD_MULTIPLE they call MPI concurrently; with
 * MPI_THREAD_SERIALIZED every MPI call of the module holds `big`, so the
 * module's calls are serialized among themselves. They are not serialized
 * with MPI calls the program makes itself: a program that uses MPI beside
 * nexus must initialize it with MPI_THREAD_MULTIPLE, or never call MPI
 * while nexus may (docs/mpi.md). A peer's `lock` covers posting a frame's
 * messages, so that the header and payload messages of one frame are
 * never interleaved with another frame's to the same rank. Lock order:
 * ring_lock, then a peer's lock, then tx_lock, then big. */

/* Settings. */

/* Whether no MPI launcher's variables are here at all: a process started by
 * hand, where the module loads spawn-only. */
static int no_launcher(void) {
  int inited = 0;
  MPI_Initialized(&inited);
  return !inited && getenv("OMPI_COMM_WORLD_SIZE") == NULL &&
         getenv("PMIX_RANK") == NULL && getenv("PMI_SIZE") == NULL;
}

/* Whether this process is a rank an MPI launcher started. Only then does
 * the module initialize MPI: a singleton MPI_Init in a program started by
 * hand is slow (Open MPI starts a runtime for it) and surprising. The
 * launcher's variables are inherited by every process a rank starts, so a
 * rank marks itself with NX_MPI_PID, and the children of
 * nx_context_create carry NX_CTL_FD: neither may pose as the rank. */
static int launched_by_mpirun(char *why, size_t why_len) {
  /* Open MPI's mpirun, PMIx launchers (Open MPI 5, Slurm, PRRTE), and
   * PMI-1/2 ones (MPICH's Hydra, Slurm). */
  if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMIX_RANK") == NULL &&
      getenv("PMI_SIZE") == NULL) {
    snprintf(why, why_len,
             "not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
             "PMIX_RANK or PMI_SIZE)");
    return 0;
  }
  if (getenv("NX_CTL_FD") != NULL) {
    snprintf(why, why_len,
             "not started by mpirun: a process context (NX_CTL_FD) inside an "
             "MPI job");
    return 0;
  }
  const char *pid = getenv("NX_MPI_PID");
  if (pid != NULL && strtol(pid, NULL, 10) != (long)getpid()) {
    snprintf(why, why_len,
             "not started by mpirun: the MPI environment was inherited from "
             "rank process %.16s",
             pid);
    return 0;
  }
  return 1;
}

static const char *level_name(int level) {
  switch (level) {
  case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
  case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  default: return "an unknown thread level";
  }
}

static void mpi_error_text(int e, char *buf, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(e, s, &n) != MPI_SUCCESS)
    snprintf(s, sizeof(s), "MPI error %d", e);
  snprintf(buf, len, "%s", s);
}

/* The watcher. MPI has no file descriptor to sleep on, so while the core's
 * progress engine sleeps (after about a millisecond without work) nothing
 * would look at MPI for up to 100 ms. The watcher looks instead: every
 * watch_us, if progress() was not called since its last look, it checks
 * (and so polls MPI) whether a FRAME message has arrived, and wakes the
 * engine when one has or a frame is still being received; sends still in
 * flight wake it only every 16th look, since their completion only frees
 * memory, except sends by datatype, which advance only while progress runs
 * (mpi_tx.c). While the engine is busy the watcher only reads a counter. */

static void *watch_main(void *arg) {
  struct mpimod *m = arg;
  unsigned last = atomic_load(&m->progress_calls);
  unsigned ticks = 0;
  pthread_mutex_lock(&m->watch_lock);
  while (!m->watch_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)m->watch_us * 1000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&m->watch_cond, &m->watch_lock, &ts);
    if (m->watch_stop)
      break;
    unsigned calls = atomic_load(&m->progress_calls);
    if (calls != last) {
      last = calls;
      continue;
    }
    pthread_mutex_unlock(&m->watch_lock);
    int ready = mpimod_rx_ready(m);
    ticks++;
    if (ready || atomic_load(&m->rx_count) > 0 ||
        atomic_load(&m->tx_typed) > 0 ||
        (atomic_load(&m->tx_count) > 0 && ticks % 16 == 0))
      m->core->wake();
    pthread_mutex_lock(&m->watch_lock);
  }
  pthread_mutex_unlock(&m->watch_lock);
  return NULL;
}

static int watch_start(struct mpimod *m) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&m->watch_lock, NULL);
  pthread_cond_init(&m->watch_cond, &ca);
  pthread_condattr_destroy(&ca);
  m->watch_inited = 1;
  if (m->watch_us == 0)
    return 0;
  if (pthread_create(&m->watcher, NULL, watch_main, m) != 0)
    return NX_EAGAIN;
  m->watching = 1;
  return 0;
}

static void watch_stop(struct mpimod *m) {
  if (!m->watch_inited)
    return;
  if (m->watching) {
    pthread_mutex_lock(&m->watch_lock);
    m->watch_stop = 1;
    pthread_cond_signal(&m->watch_cond);
    pthread_mutex_unlock(&m->watch_lock);
    pthread_join(m->watcher, NULL);
    m->watching = 0;
  }
  pthread_cond_destroy(&m->watch_cond);
  pthread_mutex_destroy(&m->watch_lock);
  m->watch_inited = 0;
}

/* Lifecycle. */

static int settings(struct mpimod *m, int *want_serialized, char *why,
                    size_t why_len) {
  size_t watch = 0;
  int thread = 0;
  int r = nxu_opt_size("NX_MPI_QUEUE_MAX", &m->queue_max, why, why_len);
  if (r == 0)
    r = nxu_opt_size("NX_MPI_INLINE", &m->inline_max, why, why_len);
  if (r == 0)
    r = nxu_opt_size("NX_MPI_WATCH_US", &watch, why, why_len);
  if (r == 0)
    r = nxu_opt_choice("NX_MPI_THREAD", &thread, why, why_len);
  if (r < 0)
    return r;
  m->watch_us = (unsigned)watch;
  *want_serialized = thread == 1; /* "multiple|serialized" */
  return 0;
}

/* Starts MPI unless the program did, and checks its thread level. */
static int start_mpi(struct mpimod *m, int want_serialized, char *why,
                     size_t why_len) {
  int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Finalized(&finalized);
  if (finalized) {
    snprintf(why, why_len,
             "MPI was finalized already (nexus ends MPI in nx_finalize when "
             "it started it, and MPI cannot start twice in a process)");
    return NX_ENOTSUP;
  }
  MPI_Initialized(&inited);
  if (!inited) {
    if (!launched_by_mpirun(why, why_len))
      return NX_EUNREACH;
    int want = want_serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
    int e = MPI_Init_thread(NULL, NULL, want, &provided);
    if (e != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      mpi_error_text(e, text, sizeof(text));
      snprintf(why, why_len, "MPI_Init_thread: %s", text);
      return mpimod_status_to_nx(e);
    }
    m->own_mpi = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  /* A rank's children inherit the launcher's variables; this one tells
   * them that they are not the rank (launched_by_mpirun). */
  char pid[24];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  setenv("NX_MPI_PID", pid, 1);
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(why, why_len,
             "MPI gives %s; nexus calls MPI from several threads and needs "
             "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (initialize MPI "
             "with MPI_Init_thread before nx_init)",
             level_name(provided));
    return NX_ENOTSUP;
  }
  m->serialized = want_serialized || provided < MPI_THREAD_MULTIPLE;
  m->mpi_up = 1;
  return 0;
}

static void describe(struct mpimod *m) {
  const char *ns = getenv("PMIX_NAMESPACE");
  if (ns == NULL || ns[0] == '\0')
    ns = getenv("OMPI_MCA_ess_base_jobid");
  if (ns != NULL && ns[0] != '\0')
    snprintf(m->job_name, sizeof(m->job_name), "%s", ns);
  else
    snprintf(m->job_name, sizeof(m->job_name), "%02x%02x%02x%02x", m->job[0],
             m->job[1], m->job[2], m->job[3]);
  static char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS)
    snprintf(lib, sizeof(lib), "MPI");
  lib[strcspn(lib, "\n")] = '\0';
  snprintf(m->version, sizeof(m->version), "%.150s; %s", lib,
           m->spawn_only   ? "not started by mpirun: spawning only"
           : m->serialized ? "MPI_THREAD_SERIALIZED"
                           : "MPI_THREAD_MULTIPLE");
}

static void mpimod_finalize(void *state);

static int mpimod_init(const struct nx_core_api *core, void **state, char *why,
                       size_t why_len) {
  struct mpimod *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return NX_ENOMEM;
  m->core = core;
  m->comm = MPI_COMM_NULL;
  m->self = MPI_COMM_NULL;
  atomic_init(&m->tx_count, 0);
  atomic_init(&m->tx_typed, 0);
  atomic_init(&m->rx_count, 0);
  atomic_init(&m->progress_calls, 0);
  nxu_lock_init(&m->big);
  pthread_mutex_init(&m->peers_lock, NULL);
  nxu_lock_init(&m->tx_lock);
  nxu_lock_init(&m->ring_lock);
  pthread_mutex_init(&m->spawn_lock, NULL);
  pthread_cond_init(&m->spawn_cond, NULL);
  m->parent = MPI_COMM_NULL;
  atomic_init(&m->stuck, 0);
  int want_serialized = 0;
  int r = settings(m, &want_serialized, why, why_len);
  if (r == 0 && no_launcher()) {
    /* Spawn-only: a job of one that nobody reaches (the job id is this
     * process's uuid, and reachable refuses this process); MPI starts
     * only if the program acquires "mpi" nodes. */
    m->spawn_only = 1;
    m->serialized = want_serialized;
    m->size = 1;
    memcpy(m->job, core->process_uuid, MPIMOD_JOB_SIZE);
    describe(m);
    m->peers = calloc(1, sizeof(*m->peers));
    if (m->peers == NULL) {
      r = NX_ENOMEM;
      goto err;
    }
    *state = m;
    return 0;
  }
  if (r == 0)
    r = start_mpi(m, want_serialized, why, why_len);
  if (r < 0)
    goto err_mpi;
  mpimod_spawn_attach(m);

  /* A communicator of our own: the program's messages on MPI_COMM_WORLD,
   * whatever their tags, never match our probes, and errors on it come
   * back as codes instead of aborting the job. */
  int e = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  if (e == MPI_SUCCESS)
    e = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  if (e == MPI_SUCCESS)
    e = MPI_Comm_set_name(m->comm, "nexus");
  if (e == MPI_SUCCESS)
    e = MPI_Comm_rank(m->comm, &m->rank);
  if (e == MPI_SUCCESS)
    e = MPI_Comm_size(m->comm, &m->size);
  /* The job id: rank 0's random process uuid, which every rank of this
   * job gets and no other job has. Launcher job ids are no substitute:
   * Open MPI's are a 16-bit hash of mpirun's host and pid plus a counter,
   * so two mpiruns on different hosts can share one. */
  if (e == MPI_SUCCESS) {
    if (m->rank == 0)
      memcpy(m->job, core->process_uuid, MPIMOD_JOB_SIZE);
    e = MPI_Bcast(m->job, MPIMOD_JOB_SIZE, MPI_BYTE, 0, m->comm);
  }
  if (e != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    mpi_error_text(e, text, sizeof(text));
    snprintf(why, why_len, "setting up the communicator: %s", text);
    r = mpimod_status_to_nx(e);
    goto err;
  }
  describe(m);
  m->peers = calloc((size_t)m->size, sizeof(*m->peers));
  r = m->peers != NULL ? mpimod_tx_init(m) : NX_ENOMEM;
  if (r == 0)
    r = mpimod_rx_init(m);
  if (r == 0)
    r = watch_start(m);
  if (r < 0) {
    snprintf(why, why_len, "out of memory or threads");
    goto err;
  }
  *state = m;
  return 0;

err:
  mpimod_finalize(m);
  return r;
err_mpi:
  if (m->self != MPI_COMM_NULL)
    MPI_Comm_free(&m->self);
  if (m->own_mpi)
    MPI_Finalize();
  pthread_cond_destroy(&m->spawn_cond);
  pthread_mutex_destroy(&m->spawn_lock);
  pthread_mutex_destroy(&m->peers_lock);
  free(m);
  return r;
}

/* Runs after the core stopped its progress engine and disconnected every
 * endpoint. Requests still in flight get MPIMOD_LINGER_MS to complete (a
 * last reply is often sent just before nx_finalize); frames that complete
 * meanwhile are freed, not delivered. What is still in flight then is
 * abandoned: its memory is leaked rather than freed under MPI's feet. */
static void mpimod_finalize(void *state) {
  struct mpimod *m = state;
  watch_stop(m);
  m->finalizing = 1;
  if (m->comm != MPI_COMM_NULL) {
    uint64_t deadline = nxu_now_ms() + MPIMOD_LINGER_MS;
    while ((atomic_load(&m->tx_count) > 0 || m->rx_n > 0) &&
           nxu_now_ms() < deadline) {
      if (mpimod_tx_progress(m) + mpimod_rx_progress(m) == 0)
        sched_yield();
    }
  }
  mpimod_tx_abandon(m);
  mpimod_rx_abandon(m);
  mpimod_tx_fini(m);
  mpimod_rx_fini(m);
  if (m->comm != MPI_COMM_NULL)
    MPI_Comm_free(&m->comm);
  for (int i = 0; m->peers != NULL && i < m->size; i++) {
    if (m->peers[i] == NULL)
      continue;
    free(m->peers[i]);
  }
  free(m->peers);
  /* MPI_Finalize waits for every rank to call it (Open MPI fences): when
   * nexus started MPI, nx_finalize is collective. Not with a thread still
   * inside MPI_Comm_spawn. */
  if (atomic_load(&m->stuck) > 0) {
    /* The thread inside MPI_Comm_spawn would use the state if it ever
     * returned: both are left alone. */
    MPIMOD_LOG(m, 0,
               "MPI not finalized: %d MPI_Comm_spawn calls never returned",
               atomic_load(&m->stuck));
    return;
  }
  if (m->self != MPI_COMM_NULL)
    MPI_Comm_free(&m->self);
  if (m->own_mpi)
    MPI_Finalize();
  pthread_cond_destroy(&m->spawn_cond);
  pthread_mutex_destroy(&m->spawn_lock);
  pthread_mutex_destroy(&m->peers_lock);
  free(m);
}

/* Descriptors. */

static void le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static int mpimod_descriptor(void *state, struct nx_desc_buf *out) {
  struct mpimod *m = state;
  out->scope_len = MPIMOD_JOB_SIZE;
  memcpy(out->scope, m->job, MPIMOD_JOB_SIZE);
  out->data_len = MPIMOD_DESC_SIZE;
  memset(out->data, 0, MPIMOD_DESC_SIZE);
  out->data[0] = MPIMOD_DESC_VERSION;
  le32(out->data + 4, (uint32_t)m->rank);
  memcpy(out->data + 8, m->core->process_uuid, MPIMOD_UUID_SIZE);
  return 0;
}

/* Decodes a peer's descriptor: another rank of this very job. Anything
 * else (another job, this process, bytes of another layout) is
 * NX_EUNREACH; nothing is read past the lengths given. */
static int decode(const struct mpimod *m, const struct nx_desc *d, int *rank,
                  const uint8_t **uuid) {
  if (d->scope == NULL || d->data == NULL || d->scope_len != MPIMOD_JOB_SIZE ||
      memcmp(d->scope, m->job, MPIMOD_JOB_SIZE) != 0 ||
      d->data_len != MPIMOD_DESC_SIZE || d->data[0] != MPIMOD_DESC_VERSION ||
      d->data[1] != 0 || d->data[2] != 0 || d->data[3] != 0)
    return NX_EUNREACH;
  uint32_t r = rd32(d->data + 4);
  if (r >= (uint32_t)m->size || (int)r == m->rank ||
      memcmp(d->data + 8, m->core->process_uuid, MPIMOD_UUID_SIZE) == 0)
    return NX_EUNREACH;
  *rank = (int)r;
  *uuid = d->data + 8;
  return 0;
}

static int mpimod_reachable(void *state, const struct nx_desc *peer) {
  int rank;
  const uint8_t *uuid;
  return decode(state, peer, &rank, &uuid) < 0 ? NX_EUNREACH : MPIMOD_COST;
}

/* Endpoints are the ranks, made on first connect and kept until finalize:
 * connecting costs nothing (MPI connects underneath, lazily). */
static int mpimod_connect(void *state, const struct nx_desc *peer,
                          struct nx_endpoint **ep) {
  struct mpimod *m = state;
  int rank;
  const uint8_t *uuid;
  if (decode(m, peer, &rank, &uuid) < 0)
    return NX_EUNREACH;
  pthread_mutex_lock(&m->peers_lock);
  struct mpimod_peer *p = m->peers[rank];
  int r = 0;
  if (p == NULL) {
    p = calloc(1, sizeof(*p));
    if (p != NULL) {
      nxu_lock_init(&p->lock);
      p->rank = rank;
      nx_endpoint_init(&p->base, uuid);
      atomic_init(&p->reported, 0);
      m->peers[rank] = p;
    } else {
      r = NX_ENOMEM;
    }
  } else if (memcmp(p->base.uuid, uuid, MPIMOD_UUID_SIZE) != 0) {
    r = NX_EUNREACH; /* one rank, one process: a descriptor that lies */
  }
  pthread_mutex_unlock(&m->peers_lock);
  if (r == 0)
    *ep = &p->base;
  return r;
}

static void mpimod_disconnect(void *state, struct nx_endpoint *ep) {
  (void)state;
  (void)ep;
}

static int mpimod_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
                       unsigned flags) {
  (void)flags; /* NX_EAGAIN either way: the core decides whether to wait */
  return mpimod_send_frame(state, mpimod_peer_of(ep), frame);
}

static int mpimod_progress(void *state, nx_frame_batch_t *batch) {
  struct mpimod *m = state;
  /* Only the driver writes it; the watcher reads it. */
  atomic_store_explicit(
      &m->progress_calls,
      atomic_load_explicit(&m->progress_calls, memory_order_relaxed) + 1,
      memory_order_relaxed);
  if (m->comm == MPI_COMM_NULL)
    return 0; /* spawn-only */
  m->batch = batch;
  int n = mpimod_tx_progress(m) + mpimod_rx_progress(m);
  m->batch = NULL;
  return n;
}

/* MPI has no file descriptor to wait on: the core polls, and the watcher
 * thread wakes it. */
static int mpimod_wait_fd(void *state) {
  (void)state;
  return NX_ENOTSUP;
}

static const char *mpimod_backend_version(void *state) {
  struct mpimod *m = state;
  return m->version;
}

static int mpimod_endpoint_info(void *state, struct nx_endpoint *ep, char *buf,
                                size_t len) {
  struct mpimod *m = state;
  if (ep == NULL || buf == NULL || len == 0)
    return NX_EINVAL;
  struct mpimod_peer *p = mpimod_peer_of(ep);
  snprintf(buf, len, "mpi rank %d of job %s", p->rank, m->job_name);
  return 0;
}

/* Waits for a nonblocking collective, taking `big` only around each test
 * so that the driver and senders keep going meanwhile: the other ranks
 * may be a while. */
static int wait_collective(struct mpimod *m, MPI_Request *req) {
  for (unsigned i = 0;; i++) {
    int done = 0;
    mpimod_lock(m);
    int e = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    mpimod_unlock(m);
    if (e != MPI_SUCCESS)
      return mpimod_status_to_nx(e);
    if (done)
      return 0;
    if (i < 1000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* The job's initial contexts: every rank's entry, gathered on the private
 * communicator (collective: every rank calls nx_context_peers). */
static int mpimod_job_peers(void *state, const void *mine, size_t len,
                            void **all, size_t **lens, int *count, int *rank) {
  struct mpimod *m = state;
  if (m->comm == MPI_COMM_NULL)
    return NX_ENOENT; /* spawn-only: no job */
  if (len > INT_MAX || (len > 0 && mine == NULL))
    return NX_EINVAL;
  size_t n = (size_t)m->size;
  int *counts = malloc(n * sizeof(int)), *displs = malloc(n * sizeof(int));
  size_t *out_lens = malloc(n * sizeof(size_t));
  uint8_t *buf = NULL;
  int mylen = (int)len, r = NX_ENOMEM;
  MPI_Request req;
  if (counts == NULL || displs == NULL || out_lens == NULL)
    goto out;
  mpimod_lock(m);
  int e = MPI_Iallgather(&mylen, 1, MPI_INT, counts, 1, MPI_INT, m->comm, &req);
  mpimod_unlock(m);
  r = e == MPI_SUCCESS ? wait_collective(m, &req) : mpimod_status_to_nx(e);
  if (r < 0)
    goto out;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (counts[i] < 0 || total + (size_t)counts[i] > INT_MAX) {
      r = NX_EPROTO;
      goto out;
    }
    displs[i] = (int)total;
    out_lens[i] = (size_t)counts[i];
    total += (size_t)counts[i];
  }
  buf = malloc(total > 0 ? total : 1);
  if (buf == NULL) {
    r = NX_ENOMEM;
    goto out;
  }
  mpimod_lock(m);
  e = MPI_Iallgatherv(mine, mylen, MPI_BYTE, buf, counts, displs, MPI_BYTE,
                      m->comm, &req);
  mpimod_unlock(m);
  r = e == MPI_SUCCESS ? wait_collective(m, &req) : mpimod_status_to_nx(e);
  if (r < 0)
    goto out;
  *all = buf;
  *lens = out_lens;
  *count = m->size;
  *rank = m->rank;
  buf = NULL;
  out_lens = NULL;
out:
  free(buf);
  free(out_lens);
  free(displs);
  free(counts);
  return r;
}

/* Launching: mpirun's ranks are a job (job_peers), and MPI_Comm_spawn
 * starts process contexts on "mpi" nodes. */
static const struct nx_launch_ops mpimod_launch = {
    .job_peers = mpimod_job_peers,
    .node_spec = mpimod_node_spec,
    .spawn = mpimod_spawn,
    .ctl_send = mpimod_ctl_send,
    .ctl_recv = mpimod_ctl_recv,
    .ctl_close = mpimod_ctl_close,
    .ctl_parent = mpimod_ctl_parent,
};

NX_PROTOCOL_EXPORT const struct nx_protocol_ops nx_protocol_mpi = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .name = MPIMOD_NAME,
    .wire_version = MPIMOD_WIRE_VERSION,
    .cost = MPIMOD_COST,
    .init = mpimod_init,
    .finalize = mpimod_finalize,
    .descriptor = mpimod_descriptor,
    .reachable = mpimod_reachable,
    .connect = mpimod_connect,
    .disconnect = mpimod_disconnect,
    .send = mpimod_send,
    .progress = mpimod_progress,
    .wait_fd = mpimod_wait_fd,
    .backend_version = mpimod_backend_version,
    .endpoint_info = mpimod_endpoint_info,
    .launch = &mpimod_launch,
    .iov_max = NX_FRAME_IOV_MAX,
};
