/* The mpi protocol module's shared types: its state, peers, frames in
 * flight, and the big lock. Each source file's functions are in its own
 * header (mpi_peer.h, mpi_tx.h, mpi_rx.h, mpi_spawn.h); mpi.c, the ops
 * table, has none. */
#ifndef NX_PROTO_MPIMOD_H
#define NX_PROTO_MPIMOD_H

/* This header is not called mpi.h, as STYLE.md would have it, because the
 * module's folder is on the include path and would hide Open MPI's <mpi.h>.
 * For the same reason every function here is named mpimod_*, not mpi_*:
 * Open MPI's Fortran bindings export mpi_init, mpi_send, mpi_finalize, ...
 * (lower case), and a reader of a backtrace should never wonder which of
 * the two ran. */

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus/protocol.h"
#include "nxu_lock.h"

/* The files:
 *   mpi.c     the ops table, init and finalize, descriptors, endpoints,
 *             job_peers, the watcher thread;
 *   mpi_tx.c  the send path (any thread) and send completion (driver);
 *   mpi_rx.c  receiving: matching arrivals, payloads, in-order delivery
 *             (driver only);
 *   mpi_spawn.c  process contexts started with MPI_Comm_spawn and the
 *             control channel to them (program threads);
 *   mpi_peer.c   status conversion, finding and failing a peer.
 * mpi.c calls the others; mpi_tx.c, mpi_rx.c and mpi_spawn.c call only
 * mpi_peer.c, which calls none: the files form no circle.
 * "Driver only" means: called from progress() (or init/finalize), which the
 * core runs on one thread at a time. */

#define MPIMOD_NAME "mpi"
#define MPIMOD_COST 30
/* 2: a frame with a receive placement lead of at most MPIMOD_LEAD_MAX
 * bytes sends it with its header (docs/mpi.md). */
#define MPIMOD_WIRE_VERSION 2

/* Descriptor (docs/mpi.md). Scope: the job id, 16 bytes every rank of the
 * job shares. Data: u8 version, 3 zero bytes, u32 world rank (LE), the
 * 16-byte process uuid. */
#define MPIMOD_JOB_SIZE 16
#define MPIMOD_UUID_SIZE 16
#define MPIMOD_DESC_VERSION 1
#define MPIMOD_DESC_SIZE (8 + MPIMOD_UUID_SIZE)

/* Messages on the private communicator (docs/mpi.md). A frame whose
 * payload is at most the inline size travels as one FRAME message: its
 * header and payload. A larger one sends its 48 header bytes alone as a
 * FRAME message (its length field then exceeds what came with it) and its
 * payload in BODY messages of MPIMOD_CHUNK bytes (the last one shorter),
 * straight from the frame. FRAME messages arrive in receives posted in
 * advance, BODY messages are matched for the sources that owe one. The
 * limits below are part of the wire format: change them only with
 * MPIMOD_WIRE_VERSION (a FRAME message larger than a slot is not refused
 * cleanly: Open MPI 4.1 mishandles truncating a large message). */
enum mpimod_tag { MPIMOD_TAG_FRAME = 1, MPIMOD_TAG_BODY = 2 };
#define MPIMOD_CHUNK ((size_t)16 << 20)
/* The largest payload a FRAME message carries: what a posted receive
 * holds. */
#define MPIMOD_INLINE_LIMIT ((size_t)16384)
#define MPIMOD_SLOT_SIZE (NX_FRAME_HDR_SIZE + MPIMOD_INLINE_LIMIT)
/* A larger frame whose payload has a lead (nx_frame_lead, receive
 * placement) of at most this many bytes sends the lead in its FRAME
 * message after the header, and the tail alone in BODY messages: the
 * receiver has the lead before it receives the tail, into the memory the
 * receiving program names. */
#define MPIMOD_LEAD_MAX ((size_t)1024)
/* Receives kept posted for FRAME messages. */
#define MPIMOD_SLOTS 8

/* NX_MPI_INLINE's default (nexus/util/nxu_opt.c), for sizing buffers. */
#define MPIMOD_INLINE_DEFAULT ((size_t)8192)
/* FRAME messages one progress call takes at most: about what the core
 * dispatches per round. */
#define MPIMOD_MATCH_MAX 64
/* How long finalize waits for requests still in flight. */
#define MPIMOD_LINGER_MS 2000u
/* Ended children a spawn waits for: at most this many, each for at most
 * MPIMOD_ENDED_WAIT_MS from the close of its channel. */
#define MPIMOD_ENDED_MAX 16
#define MPIMOD_ENDED_WAIT_MS 30000u

/* Another rank: the endpoint connect() returns, shared by every
 * destination in that process. Peers live until finalize. */
struct mpimod_peer {
  struct nx_endpoint base; /* first: its uuid */
  nxu_lock_t lock;         /* the send side: posting, inflight, dead */
  int rank;
  size_t inflight; /* bytes of accepted frames not yet completed */
  int dead;
  atomic_int reported; /* peer_failed was called */
};

/* The endpoint is a peer's first member. */
static inline struct mpimod_peer *mpimod_peer_of(struct nx_endpoint *ep) {
  return (struct mpimod_peer *)(void *)ep;
}

/* A frame being received, queued per source in the order its FRAME
 * message arrived, so that frames are delivered in the order they were
 * sent even when a small one arrives while a large one's payload is still
 * coming. */
enum mpimod_rx_kind {
  MPIMOD_RX_FRAME,  /* a whole frame, copied out of its slot */
  MPIMOD_RX_BODY,   /* a frame whose payload comes in BODY messages */
  MPIMOD_RX_DISCARD /* a message received only to be dropped; not queued */
};

struct mpimod_rx {
  struct mpimod_rx *next;
  int src;
  int kind;
  int outstanding; /* requests not yet complete */
  int failed;      /* a request failed: free, do not deliver */
  int leaked;      /* abandoned at finalize: MPI may still write its memory */
  /* MPIMOD_RX_FRAME and MPIMOD_RX_DISCARD */
  uint8_t *buf;
  size_t buf_len;
  /* MPIMOD_RX_BODY: the frame (NULL while dropping a refused one's
   * payload), its payload's length and how much of it is matched */
  nx_frame_t *frame;
  size_t body_len, body_posted;
};

struct mpimod_src {
  struct mpimod_rx *head, *tail;
  int owed;    /* queued BODY entries still owed payload messages */
  int listed;  /* in mpimod.owing */
  int dropped; /* broke the wire format: everything from it is dropped */
};

/* A receive posted for FRAME messages. */
struct mpimod_slot {
  MPI_Request req;
  uint8_t *buf; /* MPIMOD_SLOT_SIZE bytes */
};

/* A send request and what it belongs to. */
struct mpimod_tx {
  nx_frame_t *frame;
  struct mpimod_peer *peer;
};

/* The module's state, one per nx_init. */
struct mpimod {
  const struct nx_core_api *core;
  /* The core's batch while mpimod_progress runs (driver only), else NULL:
   * where mpi_rx.c delivers a complete frame. */
  nx_frame_batch_t *batch;
  MPI_Comm comm; /* private: MPI_Comm_dup of MPI_COMM_WORLD */
  int rank, size;
  int own_mpi;    /* this module called MPI_Init_thread */
  int serialized; /* MPI gave THREAD_SERIALIZED: `big` guards every call */
  nxu_lock_t big;
  size_t queue_max;
  size_t inline_max;
  unsigned watch_us;
  uint8_t job[MPIMOD_JOB_SIZE];
  char job_name[64]; /* for people: the launcher's job id */
  char version[192];

  pthread_mutex_t peers_lock; /* creating peers */
  struct mpimod_peer **peers; /* by rank, created by connect */

  /* Sends in flight: any thread appends, the driver tests. */
  nxu_lock_t tx_lock;
  MPI_Request *tx_req;
  struct mpimod_tx *tx_of;
  int tx_n, tx_cap;
  atomic_int tx_count; /* tx_n, readable without the lock */
  atomic_int tx_typed; /* frames in flight with a BODY sent by datatype */
  /* Driver only: scratch for MPI_Testsome over the sends. */
  int *tx_idx;
  MPI_Status *tx_st;
  struct mpimod_tx *tx_fin; /* frames whose last request completed */
  int tx_scratch_cap;

  /* Receiving, driver only (but see ring_lock). */
  struct mpimod_src *srcs; /* by rank */
  struct mpimod_slot slots[MPIMOD_SLOTS];
  int ring_head;        /* the slot the next FRAME message lands in */
  int ring_posted;      /* the slots have receives posted */
  nxu_lock_t ring_lock; /* the watcher looks at the head slot too */
  int *owing;           /* sources owed BODY messages */
  int nowing;
  MPI_Request *rx_req; /* BODY (and dropped) receives in flight */
  struct mpimod_rx **rx_of;
  int rx_n, rx_cap;
  int *rx_idx;
  MPI_Status *rx_st;
  atomic_int rx_count; /* entries not yet finished, for the watcher */
  int finalizing;      /* in finalize: nothing more is delivered */
  int probe_error;     /* a failed probe was logged */

  /* The watcher thread (mpi.c). */
  atomic_uint progress_calls;
  pthread_t watcher;
  int watch_inited; /* watch_lock and watch_cond exist */
  int watching;
  pthread_mutex_t watch_lock;
  pthread_cond_t watch_cond;
  int watch_stop;

  /* Launching (mpi_spawn.c). A process no launcher started loads the
   * module spawn-only: no job, a descriptor nobody reaches, and MPI
   * started by the first spawn. */
  int spawn_only;
  int mpi_up;                 /* MPI is initialized and usable */
  pthread_mutex_t spawn_lock; /* starting MPI; `spawning` */
  pthread_cond_t spawn_cond;  /* `spawning` went to 0 */
  int spawning;     /* an MPI_Comm_spawn is under way (one at a time) */
  MPI_Comm self;    /* MPI_COMM_SELF's duplicate the spawns go through,
                       with MPI_ERRORS_RETURN: a spawn Open MPI refuses
                       (no slots, say) is an error, not an abort */
  MPI_Comm parent;  /* started by MPI_Comm_spawn: to the creator, until
                       ctl_parent hands it to the core */
  atomic_int stuck; /* spawns given up on while inside MPI_Comm_spawn */
  /* Children spawned on this host whose channels closed, under
   * spawn_lock: the next spawn first waits for their processes to be
   * gone (mpi_spawn.c, "Ended children"). */
  struct mpimod_ended {
    int pid;
    uint64_t until; /* nxu_now_ms: waited for no longer */
  } ended[MPIMOD_ENDED_MAX];
  int nended;
};

static inline void mpimod_lock(struct mpimod *m) {
  if (m->serialized)
    nxu_lock(&m->big);
}

static inline void mpimod_unlock(struct mpimod *m) {
  if (m->serialized)
    nxu_unlock(&m->big);
}

#define MPIMOD_LOG(m, level, ...)                                              \
  (m)->core->log((level), MPIMOD_NAME, __VA_ARGS__)

#endif /* NX_PROTO_MPIMOD_H */
