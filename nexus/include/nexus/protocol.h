/* The protocol module ABI: one versioned ops table per module, and the core
 * services a module may call. */
#ifndef NEXUS_PROTOCOL_H
#define NEXUS_PROTOCOL_H

/* For module authors only; programs include <nexus.h>. A module is a shared
 * object libnx_proto_<name>.so exporting exactly one symbol,
 * `const struct nx_protocol_ops nx_protocol_<name>`. The core owns framing:
 * a module moves whole frames (header + payload) and reports arrivals. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the one symbol a module exports (modules build with hidden
 * visibility). */
#define NX_PROTOCOL_EXPORT __attribute__((visibility("default")))

/* Bumped whenever either table below changes. The core loads only a
 * module built for this version and refuses any other with NX_EABI: no
 * older ABI ever shipped, so none is kept loadable. */
#define NX_PROTOCOL_ABI_VERSION 14u

/* send's answer for a frame sent at once (struct nx_protocol_ops): the
 * core takes the frame back without a send_done call. */
#define NX_PROTOCOL_SENT 1

/* A flag of send's `flags`, beside NX_RSR_NONBLOCK: a frame that a module
 * which bounds the number of frames in flight to a peer lets past that
 * bound (not past a bound in bytes). The core sets it for the runtime's
 * own messages (the confirmations' questions and answers: few, small, and
 * what lets the peers' ledgers settle), for a handler's RSRs (threaded
 * handlers' too) and for frames sent from inside progress (a frame a
 * gateway passes on), where a wait for room would run progress inside
 * progress, one level deeper for each frame that came meanwhile, and let
 * later frames overtake the waiting one. Other modules ignore it. */
#define NX_PROTOCOL_SEND_EXEMPT (1u << 8)

/* The frame header, fixed little-endian on the wire (docs/design.md):
 *   off size field
 *     0    4 magic       0x3152584e ("NXR1" read as bytes N X R 1)
 *     4    1 version     NX_FRAME_VERSION
 *     5    1 format      data-format tag of the payload (NX_FORMAT_*)
 *     6    2 flags       the core's (docs/design.md section 4): a module
 *                         passes them on unread
 *     8    4 handler     handler id
 *    12    4 order       the RSR's number in its ordered stream
 *                         (NX_RSR_ORDERED), 0 for an unordered RSR
 *    16    8 context     destination context id
 *    24    8 address     address within that context
 *    32    8 length      payload bytes that follow (with the flag
 *                         NX_FRAME_F_TAIL: the low 48 bits; the high 16
 *                         the payload's lead, nx_frame_lead)
 *    40    8 source      the sending context's id (0: not known); its
 *                         high 32 bits are the sending process's id */
#define NX_FRAME_HDR_SIZE 48u
#define NX_FRAME_MAGIC 0x3152584eu
#define NX_FRAME_VERSION 3u

/* Receive placement (docs/design.md, "Receive placement"): a frame whose
 * payload ends with a large array has flag bit 2 set and the length of
 * its "lead", the payload's bytes before that array's elements (the
 * tail), in the length field's high 16 bits. A module that receives in
 * two steps (frame_alloc_lead below) may read it to send the lead apart. */
#define NX_FRAME_F_TAIL 4u
static inline size_t nx_frame_lead(const void *hdr) {
  const unsigned char *h = (const unsigned char *)hdr;
  if (!((h[6] | h[7] << 8) & NX_FRAME_F_TAIL))
    return 0;
  return (size_t)(h[38] | h[39] << 8);
}

/* The payload's length the header announces (what follows the header),
 * for a module that reads it before frame_alloc checks the header. */
static inline uint64_t nx_frame_payload_len(const void *hdr) {
  const unsigned char *h = (const unsigned char *)hdr;
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--)
    len = len << 8 | h[32 + i];
  return nx_frame_lead(hdr) != 0 ? len & (((uint64_t)1 << 48) - 1) : len;
}

/* Largest scope and module bytes a descriptor may carry. */
#define NX_DESC_SCOPE_MAX 32u
#define NX_DESC_DATA_MAX 4096u /* a UCX worker address fits */
#define NX_PROTO_NAME_MAX 15u

/* A peer's descriptor, as the core shows it to a module. The core has
 * already checked that name and wire version are this module's. */
struct nx_desc {
  const char *name;
  uint16_t wire_version;
  uint8_t scope_len;
  const uint8_t *scope; /* where it is reachable: host id, job id, ... */
  uint16_t data_len;
  const uint8_t *data; /* the module's own bytes: addresses, ranks, ... */
};

/* The head of every endpoint (ABI 12). A module's struct for a peer begins
 * with one; connect gives the core a pointer to it, and send, disconnect,
 * endpoint_info and peer_failed take that pointer back. Set it up with
 * nx_endpoint_init before connect returns it. */
#define NX_UUID_SIZE 16u
struct nx_endpoint {
  /* The module's: the peer process's process_uuid (all zero while it is
   * not known), and the link of the module's table of peers by uuid
   * (nexus/util/nxu_uuid.h keeps one). */
  uint8_t uuid[NX_UUID_SIZE];
  struct nx_endpoint *uuid_next;
  /* The core's, read and written with atomic operations: 0 while the
   * endpoint works, then the NX_E* code of the first peer_failed for it.
   * The core stops sending through a failed endpoint, and a second
   * peer_failed for it changes nothing. */
  int failed;
};

static inline void nx_endpoint_init(struct nx_endpoint *ep,
                                    const uint8_t *uuid) {
  for (unsigned i = 0; i < NX_UUID_SIZE; i++)
    ep->uuid[i] = uuid != NULL ? uuid[i] : 0;
  ep->uuid_next = NULL;
  __atomic_store_n(&ep->failed, 0, __ATOMIC_RELAXED);
}

/* The NX_E* code the endpoint failed with (peer_failed), or 0. */
static inline int nx_endpoint_failed(const struct nx_endpoint *ep) {
  return __atomic_load_n(&ep->failed, __ATOMIC_ACQUIRE);
}

/* The module writes its own descriptor here. */
struct nx_desc_buf {
  uint8_t scope_len;
  uint8_t scope[NX_DESC_SCOPE_MAX];
  uint16_t data_len;
  uint8_t data[NX_DESC_DATA_MAX];
};

/* One frame. On send the core fills iov[0] (header) and iov[1] (payload);
 * on receive frame_alloc returns a frame whose iov[1] is where the payload
 * goes. `module_data` is scratch space for whoever owns the frame now.
 *
 * A frame to send may have more than two iovecs, when the program
 * put values by reference (nx_put_*_ref): `iovs` holds all `iovcnt` of
 * them, iovs[0] the header, the rest the payload pieces in order, each
 * non-empty; `len` is their sum. The core gives such a frame only to a
 * module whose ops table sets `iov_max` >= iovcnt; any other module gets
 * the payload copied into one piece, as before. For frames of at most two
 * iovecs `iovs` points at `iov`, on send and on receive, so a module may
 * read every frame through `iovs`. */
#define NX_FRAME_IOV_MAX                                                       \
  (2 + 2 * 8) /* header, then refs and the bytes between */
typedef struct nx_frame {
  struct iovec iov[2];
  int iovcnt;
  size_t len;
  void *module_data[2];
  const struct iovec *iovs;
} nx_frame_t;

/* A frame's iovecs, for a module that takes more than two: reads `iovs`
 * only for such a frame, so the module also works with a core (or a test
 * playing one) that fills only `iov`. */
static inline const struct iovec *nx_frame_iovs(const nx_frame_t *f) {
  return f->iovcnt > 2 ? f->iovs : f->iov;
}

/* The frames one call of a module's progress completed, in the order they
 * completed: the core owns it, and dispatches them once progress returned
 * (docs/design.md section 7, "Polling the modules"). */
#define NX_FRAME_BATCH_MAX 64
typedef struct nx_frame_batch {
  int count;
  nx_frame_t *frames[NX_FRAME_BATCH_MAX];
} nx_frame_batch_t;

/* Services of the core, handed to a module's init. Callable from any thread. */
struct nx_core_api {
  uint32_t abi_version;
  /* Identity of this process and host (16 random bytes each; the host id is
   * derived from /etc/machine-id where there is one). */
  const uint8_t *process_uuid;
  const uint8_t *host_uuid;

  /* Receiving. frame_alloc checks the NX_FRAME_HDR_SIZE header bytes `hdr`
   * and returns a frame whose iov[1] has room for the payload it announces
   * (NX_EPROTO for a bad header, which the core counts; NX_ENOMEM). Then
   * exactly one of delivering it (payload complete: nx_frame_batch_add,
   * which uses frame_deliver outside progress; frame_deliver queues it
   * for the driver) or frame_free (connection lost midway). After NX_EPROTO a
   * module whose framing is lost with it (a byte stream) drops the peer; one
   * whose transport keeps message boundaries may drop only that frame. It is
   * already counted: do not call bad_peer for it. */
  int (*frame_alloc)(const void *hdr, nx_frame_t **frame);
  void (*frame_deliver)(nx_frame_t *frame);
  void (*frame_free)(nx_frame_t *frame);

  /* Sending. A module that accepted a frame (send returned 0) calls
   * send_done exactly once when it no longer needs the bytes. handover
   * delivers a frame that is being sent to this same process without
   * copying it, and counts as send_done. */
  void (*send_done)(nx_frame_t *frame, int status);
  void (*handover)(nx_frame_t *frame);

  /* Events. peer_failed: the endpoint returned by connect is dead; the
   * core marks it failed (struct nx_endpoint) and fails RSRs to it. Only
   * the first report of an endpoint counts. bad_peer: a peer sent
   * something malformed that frame_alloc did not see (counted); the module
   * dropped the peer, or only the message where its transport keeps
   * boundaries. wake: a module thread made work ready for a module without
   * a wait fd. */
  void (*peer_failed)(struct nx_endpoint *ep, int status);
  void (*bad_peer)(const char *module, const char *why);
  void (*wake)(void);

  /* One line on stderr, prefixed with the module name, if NX_DEBUG is set
   * (always for level 0). */
  void (*log)(int level, const char *module, const char *fmt, ...);

  /* The computation's key (NX_KEY_SIZE bytes). Modules that accept
   * connections make every peer present it before any frame. */
  const uint8_t *key;

  /* Receiving without a copy (ABI 11): frame_wrap is frame_alloc for a
   * payload that is complete already in memory the module owns (UCX's
   * eager active-message data). It checks the header `hdr` as
   * frame_alloc does and returns a frame whose iov[1] is `data` itself,
   * `len` bytes, which must be the length the header announces. The frame
   * is then delivered or freed as one from frame_alloc. When the core is
   * done with the payload (the handler returned and nobody retained the
   * buffer; a retained one when the program releases it, from whichever
   * thread that is), it calls release(arg, data) once, from any thread,
   * possibly inside the module's own frame_free or frame_deliver of it (a
   * frame the core drops at once): call those without holding a lock
   * that release takes. Keep `data` valid until then. A buffer the program
   * still holds at nx_finalize, and one a gateway passes on, gets its payload
   * copied out first, so release always comes before the module's finalize.
   * Returns 0; NX_EPROTO for a bad header or a length that differs from it
   * (counted, as for frame_alloc); NX_EINVAL when `data` is not 8-aligned
   * (the core promises handlers a payload that starts 8-aligned, so that
   * an array put by reference lands aligned for its type) or release is
   * NULL; NX_ENOMEM. On an error release is never called: the
   * data is still the module's, which may copy it with frame_alloc. */
  int (*frame_wrap)(const void *hdr, void *data, size_t len,
                    void (*release)(void *arg, void *data), void *arg,
                    nx_frame_t **frame);

  /* Receive placement (ABI 14): the payload in two steps, so that the
   * receiving program can say where its tail goes (docs/design.md,
   * "Receive placement"). frame_alloc_lead is frame_alloc, except that
   * for a frame with a lead (nx_frame_lead(hdr) != 0) the frame's iov[1]
   * has room for the lead only: then iov[1].iov_len + NX_FRAME_HDR_SIZE <
   * frame->len. Once the lead is in iov[1], the module calls frame_place,
   * which asks the handler's placement callback (on this thread: the
   * module's locks may be held, the callback calls no nexus function) and
   * sets iov[1] to where the tail goes, frame->len - NX_FRAME_HDR_SIZE -
   * lead bytes: the program's memory, or the core's. The module writes
   * exactly those bytes there, then delivers the frame or frees it as any
   * other (a placed frame freed is reported to the receiving program).
   * frame_place returns 0 or NX_ENOMEM (the frame is still the module's
   * to free). A module that uses frame_alloc only receives every frame
   * whole, as before. */
  int (*frame_alloc_lead)(const void *hdr, nx_frame_t **frame);
  int (*frame_place)(nx_frame_t *frame);
};

#define NX_KEY_SIZE 16u

/* Receive placement's second step for a module that has a frame's lead
 * whole in memory of its own (after the header of a message, say): copies
 * it into the frame frame_alloc_lead returned (iov[1], exactly its
 * length) and calls frame_place. Returns 0, or frame_place's error after
 * freeing the frame. */
static inline int nx_frame_place_lead(const struct nx_core_api *core,
                                      nx_frame_t *frame, const void *lead) {
  memcpy(frame->iov[1].iov_base, lead, frame->iov[1].iov_len);
  int r = core->frame_place(frame);
  if (r < 0)
    core->frame_free(frame);
  return r;
}

/* Hands a complete received frame to the core: into `batch` during
 * progress, through frame_deliver otherwise (batch NULL: a module thread,
 * or a poll outside the driver's round). A full batch goes to
 * frame_deliver first, so that the frames keep their order. */
static inline void nx_frame_batch_add(const struct nx_core_api *core,
                                      nx_frame_batch_t *batch,
                                      nx_frame_t *frame) {
  if (batch == NULL) {
    core->frame_deliver(frame);
    return;
  }
  if (batch->count == NX_FRAME_BATCH_MAX) {
    for (int i = 0; i < batch->count; i++)
      core->frame_deliver(batch->frames[i]);
    batch->count = 0;
  }
  batch->frames[batch->count++] = frame;
}

/* The launcher table: what a module that also starts processes or
 * knows a job of processes offers (the mpi module: mpirun's ranks, and
 * MPI_Comm_spawn). Hung off the ops table's `launch` slot. node_spec,
 * spawn, ctl_send, ctl_recv and ctl_close come together or not at all;
 * ctl_parent needs the three ctl_ slots. */
struct nx_launch_ops {
  /* job_peers (optional): the module knows a job this process belongs to (the
   * ranks an MPI launcher started) and can exchange the initial contexts
   * with the other members. `mine` is this process's entry (opaque bytes);
   * on success `*all` gets a malloc'ed concatenation of every member's
   * entry in rank order, `*lens` a malloc'ed array of their lengths,
   * `*count` the job size and `*rank` ours. Returns 0, NX_ENOENT (no job),
   * or another negative code. Collective: called on a program thread by
   * every member's nx_init (`mine` = the member's key, NX_KEY_SIZE bytes:
   * all take rank 0's) and by every call of nx_context_peers (`mine` = the
   * initial context's entry), in that order on every member. */
  int (*job_peers)(void *state, const void *mine, size_t len, void **all,
                   size_t **lens, int *count, int *rank);

  /* Process contexts started through the backend's own launcher (Open MPI's
   * MPI_Comm_spawn), for nodes acquired with a spec that names this module
   * ("mpi", "mpi:host=a,b"). Without them such specs are NX_ENOTSUP. All run on
   * program threads.
   *
   * node_spec checks a spec (the whole string, the module's name
   * included) for nx_nodes_acquire: 0, NX_EINVAL, or NX_ENOTSUP (the
   * module cannot start processes here, with a one-line reason in `why`).
   *
   * spawn starts one process running `exe` with `argv` (NULL-ended,
   * argv[0] the program name) and, on top of what the launcher gives it,
   * the variables `env` ("NAME=value", NULL-ended) on node number `node` of
   * `spec`, waiting at most timeout_ms. On success `*ctl` is the control
   * channel to it. Returns 0, NX_EINVAL, NX_ENOENT (no such program),
   * NX_ETIMEDOUT, NX_ENOTSUP, or another negative code.
   *
   * The control channel carries the core's messages (nexus/src/processes/ctl.h)
   * both ways, whole and in order: ctl_send sends one (blocking until the
   * backend took it); ctl_recv receives one into buf (cap bytes), waiting
   * at most timeout_ms (-1: forever), and returns its length, 0 when the
   * channel is closed, NX_ETIMEDOUT, NX_EMSGSIZE or another negative code.
   * ctl_close ends a channel; with NX_CTL_ABANDON the peer is gone or
   * broken and the module must not wait for it, otherwise it may (MPI's
   * disconnect waits for the peer's). ctl_parent, in a process started by
   * spawn, gives the channel to its creator (NX_ENOENT when there is
   * none); the core calls it once, after init. */
  int (*node_spec)(void *state, const char *spec, char *why, size_t why_len);
  int (*spawn)(void *state, const char *spec, uint32_t node, const char *exe,
               char *const argv[], const char *const env[], int timeout_ms,
               void **ctl);
  int (*ctl_send)(void *state, void *ctl, const void *msg, size_t len);
  long (*ctl_recv)(void *state, void *ctl, void *buf, size_t cap,
                   int timeout_ms);
  void (*ctl_close)(void *state, void *ctl, unsigned flags);
  int (*ctl_parent)(void *state, void **ctl);
};

struct nx_protocol_ops {
  uint32_t abi_version; /* NX_PROTOCOL_ABI_VERSION */
  const char *name;     /* "local", "tcp", ...: at most NX_PROTO_NAME_MAX */
  uint16_t wire_version;
  uint16_t cost; /* default cost; lower is preferred */

  /* Lifecycle (mandatory). init returns 0, or a negative code with a
   * one-line reason in `why` (the module is then skipped). */
  int (*init)(const struct nx_core_api *core, void **state, char *why,
              size_t why_len);
  void (*finalize)(void *state);

  /* Descriptors (mandatory). reachable returns the cost (>= 0) of reaching
   * `peer` from here, or NX_EUNREACH. */
  int (*descriptor)(void *state, struct nx_desc_buf *out);
  int (*reachable)(void *state, const struct nx_desc *peer);

  /* Connections (mandatory). connect returns the endpoint (struct
   * nx_endpoint) for `peer`, set up, in `*ep`; every destination in one
   * peer process may share it. It may complete lazily; errors that show
   * later come through peer_failed. disconnect drops one connect's
   * reference. */
  int (*connect)(void *state, const struct nx_desc *peer,
                 struct nx_endpoint **ep);
  void (*disconnect)(void *state, struct nx_endpoint *ep);

  /* Data (mandatory). Returns 0 (the module owns the frame until it calls
   * send_done or handover); NX_PROTOCOL_SENT when it sent the frame at
   * once and needs its bytes no more (the frame is the core's again, and
   * no send_done comes for it: UCX's send returning NULL, an inject);
   * NX_EAGAIN when its queue to that peer is full
   * (the core keeps the frame, drives progress and tries again, unless the
   * caller passed NX_RSR_NONBLOCK in `flags`, which may also hold
   * NX_PROTOCOL_SEND_EXEMPT); or another negative code (the core
   * keeps the frame and fails the RSR). Once peer_failed reported `ep`,
   * the core fails RSRs to it without calling send (one that raced with
   * the report may still come: refuse it as before). */
  int (*send)(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
              unsigned flags);

  /* Progress. progress never blocks and returns the number of events
   * handled; the frames it completes go into `batch` (with
   * nx_frame_batch_add), which the core dispatches once progress returned.
   * `batch` may be NULL (the core, or the module itself, polling outside
   * the driver's round): frames then go through frame_deliver. progress
   * is NULL in a module with nothing to poll (every send completes inside
   * send, and frames come only through handover or frame_deliver, as in
   * the local module): the core then never polls it. wait_fd
   * (optional) returns an fd that becomes readable when progress has
   * work, or a negative code if there is none. */
  int (*progress)(void *state, struct nx_frame_batch *batch);
  int (*wait_fd)(void *state);

  /* Information (optional): the backend library and its version. */
  const char *(*backend_version)(void *state);

  /* Optional: what carries endpoint `ep` underneath (for example
   * the UCX transports it uses), written into buf as one line; returns 0
   * or a negative code. */
  int (*endpoint_info)(void *state, struct nx_endpoint *ep, char *buf,
                       size_t len);

  /* Optional: the launcher table (NULL for a module that only moves
   * frames). */
  const struct nx_launch_ops *launch;

  /* Optional, for a module with a wait fd that signals only once
   * armed (UCX's ucp_worker_arm, libfabric's fi_trywait): a driver thread
   * found no work in any module and is about to sleep in epoll on the wait
   * fds. Make the fd signal the next event, now. Returns 0 (armed: sleep),
   * a positive count (events found while arming, or pending: the core
   * polls again instead of sleeping), or a negative code (cannot arm: the
   * core sleeps briefly and polls). Called like progress: only by the
   * thread holding the driver lock. Without it the core sleeps only after
   * polling idle for a millisecond or more, which a module may use to arm
   * itself (section 7 of docs/design.md). */
  int (*arm)(void *state);

  /* Optional: the most iovecs (header included) a frame given to
   * send may have, up to NX_FRAME_IOV_MAX; a module that sends from
   * several places at once (writev, UCP_DATATYPE_IOV, fi_sendmsg, an MPI
   * datatype) says so here. 0 (or 2) means two: the core then copies a
   * payload put by reference into one piece before send. */
  uint32_t iov_max;

  /* Optional: 1 for a module whose frames never leave this process (it
   * gives every frame back through handover, as the local module does).
   * The core's fast path then writes no wire header for them and hands
   * them over itself, without calling send; the frames send still gets
   * (the slow path's) have no header and iovecs set either, and the
   * module reads nothing of the frame but hands it over. 0 for every
   * module that moves bytes. */
  uint32_t in_process;
};

/* ctl_close flags. */
#define NX_CTL_ABANDON 1u

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_PROTOCOL_H */
