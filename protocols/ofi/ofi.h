/* The ofi protocol module's shared types: its state, rails, peers and
 * operations, and the wire helpers. Each source file's functions are in its
 * own header (ofi_rail.h, ofi_send.h, ofi_wake.h); ofi.c, the ops table,
 * has none. */
#ifndef NX_PROTO_OFI_H
#define NX_PROTO_OFI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "nexus/protocol.h"
#include "nxu_lock.h"
#include "nxu_uuid.h"

/* The files:
 *   ofi.c       the ops table, settings, init/finalize, descriptors,
 *               connect, progress;
 *   ofi_rail.c  status conversion and tags; rails (one opened provider
 *               each: fabric, domain, address vector, completion queue,
 *               endpoint), receive buffers and the receive path with its
 *               per-sender reordering; driver only;
 *   ofi_send.c  peers and the send path (any thread), send completions,
 *               peer failure;
 *   ofi_wake.c  the module's wait fd: the providers' wait fds, the wake-up
 *               channel for shm, and same-host peer liveness (pidfds).
 * Calls go one way, ofi.c -> ofi_send.c -> ofi_wake.c -> ofi_rail.c (and
 * from ofi.c to each); the lower files reach ofi_send.c only through the
 * hooks in struct ofi.
 * "Driver only" means: called from progress() (or init/finalize), which
 * the core runs on one thread at a time. docs/ofi.md has the design. */

#define OFI_NAME "ofi"
#define OFI_COST 20
/* 2: an RTS may carry a lead (OFI_LEAD_MAX). */
#define OFI_WIRE_VERSION 2
#define OFI_API_VERSION FI_VERSION(1, 17)
#define OFI_UUID_SIZE 16

/* At most one rail for peers on this host (shm) and one for the rest. */
#define OFI_MAX_RAILS 2
#define OFI_PROV_NAME_MAX 31
#define OFI_ADDR_MAX 1024

/* Descriptor data (wire version 1), little-endian:
 *   u8 version (1), u8 rail count,
 *   16-byte process uuid, u32 pid, u64 start time (clock ticks after
 *   boot), u64 pid namespace inode,
 *   per rail: u8 name length, provider name, u32 address format,
 *             u32 eager limit (the payload bytes its receive buffers
 *             take), u16 address length, address bytes (fi_getname). */
#define OFI_DESC_VERSION 1
#define OFI_DESC_HEAD (2 + OFI_UUID_SIZE + 4 + 8 + 8)
#define OFI_DESC_RAIL_FIXED (1 + 4 + 4 + 2) /* besides name and address */

/* Every untagged message starts with this 16-byte header:
 *   u16 magic, u8 kind, u8 flags (0), u32 sequence number (per pair of
 *   processes), u64 sender id (the first 8 bytes of its process uuid);
 * then, for a frame, the 48-byte frame header. An EAGER message carries
 * the payload after it; an RTS (ready to send) carries u64 fragment size,
 * and the payload follows as tagged messages, one per fragment, with the
 * tags ofi_tag(sender id, sequence, fragment index). The first message
 * from a process to another, sequence number 0, is a HELLO carrying the
 * computation's key (16 bytes, core->key); nothing else from that sender
 * is accepted before it. */
#define OFI_MAGIC 0x4f4eu /* "NO" */
#define OFI_HDR_SIZE 16u
#define OFI_PRE_SIZE (OFI_HDR_SIZE + NX_FRAME_HDR_SIZE)
#define OFI_RTS_SIZE (OFI_PRE_SIZE + 8u)
/* A large frame whose payload has a receive placement lead
 * (nx_frame_lead) of at most this many bytes, and that fits the peer's
 * receive buffers, sends it in its RTS after the fragment size; its
 * fragments then carry the tail, which the receiver fetches into the
 * memory the receiving program names (docs/ofi.md). */
#define OFI_LEAD_MAX 1024u
#define OFI_HELLO_SIZE (OFI_HDR_SIZE + NX_KEY_SIZE)
/* A HELLO then carries the sender's address on that rail (u16 length and
 * the bytes), so that a receiver that refuses its key can say so. */
#define OFI_HELLO_ADDR (OFI_HELLO_SIZE + 2u)
/* A REFUSE carries the refused sender's id. */
#define OFI_REFUSE_SIZE (OFI_HDR_SIZE + 8u)
/* Refusals one process sends at most: each puts an address in the AV. */
#define OFI_REFUSALS_MAX 64
enum ofi_kind { OFI_EAGER = 1, OFI_RTS = 2, OFI_HELLO = 3, OFI_REFUSE = 4 };
/* Fragments of one frame: at most 2^16, each at most OFI_FRAG_CAP bytes.
 * The cap keeps the buffer that receives a dropped frame's fragments
 * bounded: shm (libfabric 1.17) spins forever on a truncated receive of
 * more than 4 KiB, so nothing may ever be received truncated. */
#define OFI_FRAGS_MAX (1u << 16)
#define OFI_FRAG_CAP ((size_t)4 << 20)

#define OFI_RX_BUFS 64
/* Fragment receives a rail keeps posted at most. */
#define OFI_FRAG_RECVS_MAX 256
#define OFI_CQ_BATCH 16
/* Frames one progress call delivers at most. */
#define OFI_DELIVER_MAX 64
/* A driver thread idle this long arms the wake-up (see ofi_wake.c). */
#define OFI_ARM_NS 250000ull
/* How often a busy module still looks at its peers' liveness. */
#define OFI_CHECK_NS 10000000ull
#define OFI_LINGER_MS 2000u
/* A part of a send that fails with a connection error while its peer's
 * process is alive (pidfd) is posted again, at most this many times per
 * part, the n-th time OFI_RESEND_NS << (n - 1) after the failure
 * (ofi_send.c, "Resending"). */
#define OFI_RESEND_MAX 8
#define OFI_RESEND_NS 1000000ull
#define OFI_SRC_BUCKETS 64

struct ofi;
struct ofi_peer;
struct ofi_op;

/* What a completion's context is; every context handed to libfabric is a
 * struct ofi_ctx, the provider's scratch space first. */
enum ofi_ctx_kind {
  CTX_RXBUF,  /* an eager receive buffer */
  CTX_TX,     /* one part of a send: the message or a fragment */
  CTX_INJECT, /* an injected send (only its errors complete) */
  CTX_RXFRAG, /* one fragment of a large frame being received */
  CTX_REFUSE  /* an injected refusal of a sender's key (nothing to do) */
};

struct ofi_ctx {
  struct fi_context2 fc;
  int kind;
  unsigned tries;            /* CTX_TX: times this part was posted again */
  void *obj;                 /* the rxbuf, op or rx */
  struct ofi_ctx *redo_next; /* CTX_TX: below it on peer.redo */
};

/* An eager receive buffer, posted with fi_recvmsg. */
struct ofi_rxbuf {
  struct ofi_ctx ctx;
  struct ofi_rail *rail;
  struct ofi_rxbuf *next; /* rail.repost */
  size_t size;
  uint8_t data[];
};

/* Where a peer is, as its descriptor says and connect decides. */
struct ofi_target {
  uint8_t uuid[OFI_UUID_SIZE];
  int same_host;
  uint32_t pid;
  uint64_t start_time, pidns;
  struct ofi_rail *rail; /* ours, that reaches it */
  const uint8_t *addr;   /* its endpoint name on that rail */
  size_t addr_len;
  size_t eager_max; /* its receive buffers' payload bytes there */
};

/* One opened provider. */
struct ofi_rail {
  struct ofi *o;
  int index;
  int local; /* shm: reaches this host only */
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  /* With FI_THREAD_DOMAIN every call on the domain holds `lock`; with
   * FI_THREAD_SAFE the provider serialises itself and `lock` is unused. */
  int serialize;
  nxu_lock_t lock;
  int wait_fd; /* the completion queue's fd (FI_WAIT_FD), or -1 */
  /* Small messages go with FI_INJECT and no completion, unless the
   * provider wants FI_CONTEXT (its scratch space would be shared). */
  int can_inject;

  char prov[OFI_PROV_NAME_MAX + 1];
  char fabric_name[64];
  uint32_t addr_format;
  uint8_t addr[OFI_ADDR_MAX];
  size_t addr_len;
  size_t inject_max; /* tx_attr->inject_size */
  size_t iov_max;    /* tx_attr->iov_limit */
  size_t msg_max;    /* ep_attr->max_msg_size */
  size_t frag_max;   /* fragment size for large frames */
  size_t eager_max;  /* payload bytes our receive buffers take */

  struct ofi_rxbuf *rxbufs[OFI_RX_BUFS];
  int nrxbufs;
  struct ofi_rxbuf *repost;  /* buffers to post again (EAGAIN) */
  struct ofi_rx *unposted;   /* large receives with fragments to post */
  int frag_recvs;            /* fragment receives posted, not completed */
  uint8_t *scratch;          /* OFI_FRAG_CAP bytes where dropped fragments go */
  struct ofi_ctx refuse_ctx; /* of refusals (CTX_REFUSE) */
};

/* Another process: the endpoint connect() returns, one per process uuid,
 * kept until finalize (so its sequence numbers never restart). */
struct ofi_peer {
  struct nx_endpoint base; /* first: its uuid, under ofi.peers_lock */
  nxu_lock_t lock;
  struct ofi_rail *rail;
  fi_addr_t addr;
  size_t eager_max;          /* the smaller of ours and its receive buffers' */
  struct ofi_peer *all_next; /* ofi.all, under ofi.peers_lock */

  /* Under `lock`: the send side. */
  uint32_t seq;                 /* the next frame's sequence number */
  size_t inflight;              /* bytes accepted and not yet send_done */
  unsigned nframes;             /* ... and those frames */
  struct ofi_op *qhead, *qtail; /* ops with parts still to post */
  /* Parts a connection error failed while the process lived: posted
   * again by the driver, not before redo_at (ofi_send.c). A stack: the
   * receiver orders frames by sequence number, not by arrival. */
  struct ofi_ctx *redo;
  uint64_t redo_at;
  int dead;
  const char *why; /* why it died, for the log */
  int status;      /* the NX_E* it is reported with (0: NX_EPEERDEAD) */

  /* Waiting for the driver: under ofi.attn_lock. */
  int attn;
  struct ofi_peer *attn_next;
  struct ofi_peer *serve_next; /* driver only: the list being served */
  atomic_int reported;         /* peer_failed was called */
  struct ofi_op *live;         /* every op not finished, under `lock` */
  struct ofi_ctx inj_ctx;      /* the context of injected sends (errors) */

  /* Liveness and wake-up (ofi_wake.c); set at connect, then read-only. */
  int same_host;
  uint32_t pid;
  uint64_t start_time;
  uint64_t pidns;
  int pidfd; /* readable when the process ends; -1 if none */
  int gone;  /* found dead at connect (no pidfd needed) */
  const _Atomic uint32_t *wake_word; /* its page's armed word, or NULL */
  void *wake_map;
  struct sockaddr_un wake_addr;
  socklen_t wake_len;
};

/* The endpoint is a peer's first member. */
static inline struct ofi_peer *ofi_peer_of(struct nx_endpoint *ep) {
  return (struct ofi_peer *)(void *)ep;
}

/* A fragment of a large frame whose bytes lie in more of the frame's
 * pieces than the provider takes iovecs in one message: the iovecs it is
 * sent from, some of them over copies of runs of small pieces. */
struct ofi_gplan {
  uint32_t frag; /* fragment index */
  uint32_t n;
  struct iovec iov[NX_FRAME_IOV_MAX];
};

/* The plans of a frame's fragments that need one, by fragment index, and
 * the copies they point into. */
struct ofi_gather {
  unsigned n;
  struct ofi_gplan plan[NX_FRAME_IOV_MAX];
  _Alignas(16) uint8_t copies[];
};

/* A frame being sent: the message (and, for a large frame, its
 * fragments) and the headers they start with. */
struct ofi_op {
  struct ofi_peer *peer;
  nx_frame_t *frame;                    /* NULL for the HELLO */
  struct ofi_op *next;                  /* peer queue */
  struct ofi_op *live_prev, *live_next; /* peer.live */
  size_t bytes;                         /* counted in peer.inflight */
  uint32_t seq;
  int large;
  size_t frag;     /* fragment size (large) */
  unsigned nparts; /* 1 + fragments (large) or 1 */
  unsigned posted; /* parts handed to libfabric */
  unsigned done;   /* parts completed */
  int status;      /* the first error */
  int abandoned;   /* the peer died: the parts not posted never will be */
  uint8_t *bounce; /* the whole message, when the provider takes fewer
                      iovecs than it has pieces */
  struct ofi_gather *gather; /* fragments sent partly from copies, or NULL */
  uint8_t pre[OFI_RTS_SIZE];
  /* An RTS that carries the payload's lead (receive placement: the
   * fragments carry the tail only), in the op's own allocation after
   * ctx[], or NULL; and the lead's length. */
  uint8_t *rts;
  size_t lead;
  struct ofi_ctx ctx[]; /* one per part */
};

/* A frame from one sender that cannot be delivered yet: its payload is
 * still arriving (a large frame), or an earlier frame is. */
struct ofi_rx {
  struct ofi_src *src;
  struct ofi_rail *rail;
  uint32_t seq;
  nx_frame_t *frame; /* NULL: dropped (it still takes its turn) */
  uint64_t id;       /* sender id, for the tags */
  size_t total;      /* payload bytes announced */
  size_t frag;
  unsigned nparts, posted, done;
  int failed;
  struct ofi_rx *next;          /* src.pending, by sequence number */
  struct ofi_rx *unposted_next; /* rail.unposted */
  struct ofi_ctx ctx[];         /* one per fragment */
};

/* A sending process, as this one receives from it: frames are delivered in
 * its sequence order. Driver only. */
struct ofi_src {
  uint64_t id;
  int authed; /* its HELLO had our key */
  int banned; /* it had not: everything from it is dropped */
  uint32_t next_seq;
  struct ofi_rx *pending, *tail;
  struct ofi_src *next;
};

/* The state shared with peers on this host for the wake-up (ofi_wake.c). */
struct ofi_wake_page {
  uint32_t magic;
  _Atomic uint32_t armed;
};

/* The module's state, one per nx_init. */
struct ofi {
  const struct nx_core_api *core;
  /* The core's batch while ofi_progress runs (driver only), else NULL:
   * where ofi_rail.c delivers what completes. */
  nx_frame_batch_t *batch;
  uint64_t id;  /* this process's sender id */
  int refusals; /* of wrong keys, sent (driver only) */
  uint32_t pid;
  uint64_t start_time, pidns;
  size_t queue_max;      /* NX_OFI_QUEUE_MAX */
  uint64_t queue_frames; /* NX_OFI_QUEUE_FRAMES */
  size_t eager_max;      /* NX_OFI_EAGER_MAX */
  size_t frag_max;       /* NX_OFI_FRAG_MAX */
  int force_domain;      /* NX_OFI_THREADING=domain */
  int nrails;
  struct ofi_rail rails[OFI_MAX_RAILS];
  char version[128];

  pthread_mutex_t peers_lock;
  struct nxu_uuid_table peers;
  struct ofi_peer *all;

  /* Peers that need the driver: ops to post, a death to report. */
  pthread_mutex_t attn_lock;
  struct ofi_peer *attn_head;
  atomic_int attn_any;

  /* Driver only. */
  struct ofi_src *srcs[OFI_SRC_BUCKETS];
  int events;  /* work done in the current progress call */
  int budget;  /* frames this progress call may still deliver */
  int closing; /* finalize: arrivals are freed, not delivered */

  /* The wait fd and the wake-up (ofi_wake.c). */
  int epfd;
  int sources;   /* provider fds and wake-up socket in it */
  int wake_sock; /* bound: where peers on this host wake us */
  int send_sock; /* unbound: how we wake them */
  struct ofi_wake_page *wake_page;
  char wake_path[96];
  _Atomic int armed;
  uint64_t last_check;

  /* Hooks ofi.c installs at init: how the rails (a send's completion
   * read from a completion queue, a failed inject) and the wake-up code
   * (a peer's pidfd) reach ofi_send.c, which is above them. So the files
   * form no circle: ofi.c, then ofi_send.c, ofi_wake.c, ofi_rail.c. */
  void (*send_completed)(struct ofi *o, struct ofi_ctx *part, int err);
  void (*peer_kill)(struct ofi *o, struct ofi_peer *p, const char *why);
  /* A REFUSE from the process whose sender id is `id` (ofi_rail.c). */
  void (*peer_refused)(struct ofi *o, uint64_t id);
};

/* A process's sender id: the first 8 bytes of its uuid, big-endian (its
 * own, o->id; a peer's, to find what it sends here or its REFUSE). */
static inline uint64_t ofi_sender_id(const uint8_t *uuid) {
  uint64_t id = 0;
  for (int i = 0; i < 8; i++)
    id = id << 8 | uuid[i];
  return id;
}

/* Little-endian fields of the descriptor and the message headers. */
static inline void ofi_put16(uint8_t *p, unsigned v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static inline void ofi_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ofi_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static inline unsigned ofi_get16(const uint8_t *p) {
  return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static inline uint32_t ofi_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static inline uint64_t ofi_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

#define OFI_LOG(o, level, ...) (o)->core->log((level), OFI_NAME, __VA_ARGS__)

#endif /* NX_PROTO_OFI_H */
