/* The ucx protocol module's shared types: its state, peers and the records
 * its callbacks leave for the core. Each source file's functions are in its
 * own header (ucx_ep.h, ucx_rx.h); ucx.c, the ops table, has none. */
#ifndef NX_PROTO_UCX_H
#define NX_PROTO_UCX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "nexus/protocol.h"
#include "nxu_lock.h"
#include "nxu_uuid.h"

/* The files:
 *   ucx.c     the ops table, init and finalize, the descriptor, progress
 *             and the arming of the worker's event fd;
 *   ucx_ep.c  the lock and the hand-over to the core, status conversion,
 *             peers (one UCP endpoint per remote process): connect, the
 *             send path, peer failure, endpoint_info;
 *   ucx_rx.c  receiving: the active-message handler, rendezvous fetches
 *             and the per-sender order of deliveries.
 * ucx.c calls the other two; ucx_ep.c and ucx_rx.c call neither each other
 * nor ucx.c, so the files form no circle. (What ucx_rx.c hands the core
 * goes through the lists below, which ucx_unlock empties.)
 * Threads (docs/ucx.md): the worker is created UCS_THREAD_MODE_SINGLE and
 * every UCP call on it is made holding `ucx.lock`, from whichever thread
 * sends or drives progress. UCX runs our callbacks only inside those calls,
 * so callbacks run under the lock too; they only record what happened in
 * the lists below, and whoever took the lock hands the records to the core
 * after unlocking (no core service that may run program code, such as
 * send_done or peer_failed, is ever called under the lock). The one
 * exception is the endpoint error handler, which may run on a UCX thread:
 * it only pushes the peer on an atomic stack.
 * The lock's rule, which the fast paths rely on:
 *   1. Every field of struct ucx below `lock` (but `failed`), every field
 *      of a peer but its error handler's, and every UCP call are touched
 *      only by the thread holding the lock.
 *   2. Every unlock but ucx_data_release's hands `done`, `dropped` and
 *      `reports` over (ucx_unlock), so they are empty whenever the lock is
 *      free; `ready` waits for the next progress() or finalize.
 *   3. `batch` is set only by progress(), for as long as it holds the
 *      lock, and cleared by its unlock: a frame the handler puts straight
 *      into it (ucx_rx.c) reaches the core when that progress() returns,
 *      on the driver's thread, never under the lock.
 *   4. A dead peer has no endpoint: whoever marks it dead (fail_locked,
 *      ucx_peers_close_all) closes its endpoint in the same locked
 *      section, setting `ep` to NULL; so a send tests `ep` alone. */

#define UCX_NAME "ucx"
#define UCX_COST 10
/* 2: shared-memory FIFO elements of UCX_FIFO_ELEM_DEFAULT bytes (1 had
 * UCX's 128), which both ends must agree on. */
#define UCX_WIRE_VERSION 2
#define UCX_AM_ID 0

/* Descriptor data (docs/ucx.md): u8 version, the 16-byte process uuid, the
 * 64-bit FNV-1a hash of the worker address, the 32-bit fingerprint of the
 * shared-memory FIFO settings (both little-endian; version 2 added it),
 * then the UCP worker address itself. UCP parses an address without knowing
 * its length, so only addresses whose hash matches are ever handed to it. */
#define UCX_DESC_VERSION 2
#define UCX_UUID_SIZE 16
#define UCX_DESC_HEAD (1 + UCX_UUID_SIZE + 8 + 4)
#define UCX_ADDR_MAX (NX_DESC_DATA_MAX - UCX_DESC_HEAD)

/* ucp_worker_progress calls per progress() at most, while they find
 * events but no frame. Frames end the call (ucx_progress): one call of
 * UCX hands over a bounded number (on shared memory at most
 * UCX_MM_FIFO_MAX_POLL, 16, per transport), so a peer flooding small
 * frames fills its own send queue, not our memory. */
#define UCX_PROGRESS_ROUNDS 16
/* Eager payloads from this size on are kept where UCX received them
 * (frame_wrap, ucx_rx.c) rather than copied. Measured with callgrind
 * (docs/performance.md, "ucx: eager payloads received without a copy"):
 * keeping costs 0.59x the instructions of copying at 1 KiB, but 1.14x at
 * 8 B, where the lock and ucp_am_data_release of giving the data back
 * cost more than the copy. */
#define UCX_WRAP_MIN 1024
/* Receive placement (docs/design.md): a frame whose payload has a lead
 * (nx_frame_lead) of at most this many bytes travels with the lead in the
 * active message's header, so that the receiver has it before the tail,
 * which a rendezvous then fetches straight into the memory the receiving
 * program names. Larger leads (values before a big array) go as any
 * frame. Bounded by the worker's max_am_header too (ucx.c). */
#define UCX_LEAD_MAX 1024
/* The worker's event fd is armed only after this much idleness (see
 * ucx_progress): arming costs system calls here and makes senders signal
 * us, which would slow a busy ping-pong down. */
#define UCX_ARM_IDLE_NS 200000u
/* How long finalize lets sends and endpoint closes complete. */
#define UCX_LINGER_MS 2000u
/* Keepalive interval set when UCX_KEEPALIVE_INTERVAL is not: UCX's default
 * (20 s) would leave a killed peer on shared memory unnoticed that long. */
#define UCX_KEEPALIVE_DEFAULT "1s"
/* Shared-memory FIFO element size set when UCX_MM_FIFO_ELEM_SIZE is not
 * (ucx.c's config_defaults; docs/ucx.md, "Sending"): frames of up to about
 * 150 bytes of payload go inline. Not larger: with 512 or more, UCX 1.13
 * did not report a killed peer within 20 s while 1 MiB sends to it were in
 * flight (conformance-ucx-peer-death). */
#define UCX_FIFO_ELEM_DEFAULT "256"
/* Receive buffers the shared-memory transports make at once (ucx.c). */
#define UCX_RX_BUFS_GROW_DEFAULT "128"
/* UCX_TLS when only this host is reached (ucx.c, config_defaults). */
#define UCX_TLS_LOCAL "sm,self"

struct ucx;
struct ucx_peer;

/* Our part of every UCP request (ucp_params_t.request_size): a send in
 * flight, on its peer's list. UCX does not always complete the requests of
 * an endpoint that failed (a rendezvous waiting for a dead receiver stays
 * pending), so the peer's list is how we find and fail them. */
struct ucx_req {
  nx_frame_t *frame;
  struct ucx_peer *peer;
  struct ucx_req *prev, *next;
  void *lead_hdr; /* a send with its lead apart (ucx_send), or NULL */
};

/* Another process: the endpoint connect() returns, shared by every
 * destination in that process. Everything but `failing`, `fail_next` and
 * `error` is under ucx.lock. */
struct ucx_peer {
  struct nx_endpoint base; /* first: its uuid, in ucx.peers */
  struct ucx *u;
  ucp_ep_h ep;          /* NULL once closed */
  void *close_req;      /* its ucp_ep_close_nbx request until complete */
  unsigned refs;        /* connect() calls not yet disconnected */
  size_t inflight;      /* bytes of send requests UCX has not completed */
  unsigned nreq;        /* those requests */
  struct ucx_req *reqs; /* ... on a list */
  int dead;             /* failed (or finalizing): sends return NX_EPEERDEAD */
  struct ucx_peer *report_next; /* ucx.reports */

  /* Set by the error handler, from any thread. `failing` stays set: a
   * peer is pushed once. */
  atomic_int failing;
  atomic_int error; /* the ucs_status_t it reported */
  struct ucx_peer *fail_next;
};

/* A rendezvous fetch in progress (or finished, waiting for its turn). */
struct ucx_rx {
  struct ucx *u;
  nx_frame_t *frame;
  struct ucx_rxq *q;
  void *req;    /* the ucp_am_recv_data_nbx request, NULL once complete */
  int state;    /* RX_PENDING, RX_DONE, RX_FAILED */
  int starting; /* inside ucp_am_recv_data_nbx: do not drain yet */
};

enum { RX_PENDING, RX_DONE, RX_FAILED };

/* The frames of one sender that wait behind a rendezvous fetch, in
 * arrival order: a frame is delivered only after every earlier one from
 * that sender. A frame's module_data[0] links the queue, [1] is its
 * struct ucx_rx (NULL for a frame that arrived complete). */
struct ucx_rxq {
  uint64_t from; /* the sending process: its frames' source >> 32 */
  nx_frame_t *head, *tail;
  struct ucx_rxq *next;
};

/* The module's state, one per nx_init. */
struct ucx {
  const struct nx_core_api *core;
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_address_t *address;
  size_t address_len;
  uint64_t address_hash;
  /* The shared-memory FIFO settings this process's UCX uses (ucx.c,
   * config_defaults), hashed: a peer on this host with others is not
   * reached over ucx (ucx_desc_parse). */
  uint32_t fifo_print;
  int efd;               /* the worker's event fd, or -1 */
  size_t queue_max;      /* bytes in flight to a peer (NX_UCX_QUEUE_MAX) */
  uint64_t queue_frames; /* frames in flight to a peer (NX_UCX_QUEUE_FRAMES) */
  size_t lead_max; /* the largest lead sent in the header (UCX_LEAD_MAX) */
  int remote;      /* reach other hosts too (NX_UCX_REMOTE, UCX_NET_DEVICES) */
  char version[64];

  nxu_lock_t lock; /* every UCP call, and all below */
  struct nxu_uuid_table peers;
  int received; /* frames the AM handler took during this progress() */
  /* Records of the callbacks, for the core (after unlocking). A frame's
   * module_data[0] links these lists; in `done`, [1] is its status. */
  nx_frame_t *done, *done_tail;   /* send_done */
  nx_frame_t *ready, *ready_tail; /* to deliver, in order */
  /* The core's batch while ucx_progress holds the lock, else NULL. The
   * handler puts frames that arrived whole straight into it while `ready`
   * is empty (ucx_rx.c); ucx_unlock hands it the ready frames. */
  nx_frame_batch_t *batch;
  nx_frame_t *dropped;      /* frame_free */
  struct ucx_peer *reports; /* peer_failed */
  struct ucx_rxq *rxqs;     /* senders with a fetch in progress */
  unsigned closing;         /* endpoint closes not yet complete */
  /* Eager payloads kept without a copy: given to the core, and not yet
   * given back (ucx_data_release); taken in all; copied because UCX's
   * data did not start 8-aligned. */
  size_t held;
  uint64_t wrapped, unaligned;
  int finalizing;

  /* Peers whose endpoint failed, pushed by the error handler. */
  struct ucx_peer *_Atomic failed;

  /* Driver only (progress, under the lock). */
  uint64_t idle_since; /* first idle progress() after the last event, or 0 */
  unsigned idle_polls; /* idle progress() calls since the last event */
  uint64_t last_arm;
  int armed;
};

/* What a locked section leaves for the core; handed over by
 * ucx_unlock(). */
struct ucx_batch {
  nx_frame_t *done, *ready, *dropped;
  struct ucx_peer *reports;
};

#define UCX_LOG(u, level, ...) (u)->core->log((level), UCX_NAME, __VA_ARGS__)

#endif /* NX_PROTO_UCX_H */
