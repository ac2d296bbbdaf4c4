/* libnxpvm's private declarations: the task state, buffers, the peer table
 * and the RSR wire layout shared by pvm_task.c, pvm_buf.c, pvm_msg.c and
 * pvm_group.c. */
#ifndef NXPVM_INTERNAL_H
#define NXPVM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <nexus.h>

#include "pvm3.h"

/* Element kinds on the wire. A PVM type maps to the kind that moves it:
 * signedness is the program's business, size and float-ness are the
 * receiver's conversion. */
enum kind { K_I8 = 1, K_I16, K_I32, K_I64, K_F32, K_F64, K_STR, K_MAX };

/* Thread-locals use the initial-exec model, as libnexus's do: a plain
 * fs-relative access instead of a __tls_get_addr call on the hot path. */
#define NXPVM_TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* One packed run of elements of one kind: in the buffer's arena (`ref`
 * NULL) or, for PvmDataInPlace, still in the program's memory. */
struct seg {
  int kind;
  size_t count;
  size_t off;
  const void *ref;
  int stride;   /* in program items, for an in-place run */
  size_t isize; /* bytes of a program item (a complex is two elements) */
};

/* A PVM message buffer: sent ones are packed into a native arena; received
 * ones are decoded into one (the receiver converts while decoding), so a
 * program may unpack in pieces of any size and forward a received buffer. */
struct pvmbuf {
  int id; /* 0 while it sits unprobed in the receive queue */
  int encoding;
  char *data;
  size_t len, cap;
  struct seg *segs;
  int nseg, segcap;
  int rseg;     /* unpack cursor: segment */
  size_t relem; /* and element inside it */
  int src, tag;
  int ctx, dst, wid; /* message context, destination, wait id (minfo) */
  size_t bytes;      /* payload bytes (the runs' sum), for pvm_bufinfo */
  int queued;        /* in the receive queue */
  nx_buffer_t *held; /* a direct message's RSR, retained: its run is there */
  struct pvmbuf *next;
  /* A new field is reset in buf_empty (pvm_buf.c) too. */
};

/* What this task knows of another: its gp once learnt, and whether it has
 * been told ours (the first RSR to a task carries our gp). PVM's pairwise
 * order is nexus's: every RSR between tasks is sent with NX_RSR_ORDERED
 * (nxpvmi_send). */
struct peer {
  int tid;
  nx_gp_t gp;
  int has_gp;
  int introduced;
  int dead;   /* the task has left PVM (pvm_exit) or its process ended */
  int gone;   /* its process has ended (nexus said so) */
  int child;  /* this task spawned it */
  int remote; /* on a module's node (an added host): see wait_for_tasks */
  int ptid;
  /* Messages ("nxpvm.msg" RSRs) sent to the task, and handled here from
   * it: a direct message carries its sender's count, which tells the
   * receiver whether every earlier one was handled (pvm_msg.c, "Receive
   * placement"). */
  uint32_t msgs_out, msgs_in;
};

/* A request waiting for its reply from the root task. */
struct rpc {
  int id;
  int done;
  int result;
  nx_gp_t gp;
  int has_gp;
  struct pvmbuf *b; /* a message in the reply (mailbox requests) */
  struct rpc *next;
};

struct notify {
  int tid, tag, ctx, fired;
};

/* A message handler (pvm_addmhf). */
struct mhf {
  int id, src, tag, ctx;
  int (*fn)(int);
};

/* A message handler id's slot, numbered as libpvm numbers them
 * (pvm_msg.c): `link` is the id itself while in use, else the next free
 * id (-1 ends the free list); `at` is where its handler is in mhfs. */
struct mhf_id {
  int link, at;
};

/* A mailbox entry and its class, as the root task holds them. */
struct mentry {
  int index, owner, flags;
  struct pvmbuf *b;
  struct mentry *next; /* in index order */
};

struct mclass {
  char *name;
  struct mentry *ents;
  struct mclass *next;
};

struct member {
  int tid, inst;
};

/* A group, as the root task (its sequencer) holds it. */
struct group {
  char name[64];
  struct member *m;
  int n, cap;
  int bar_count, bar_arrived;
  int frozen; /* pvm_freezegroup has completed */
  struct {
    int tid, rpc;
  } * w;
  int nw, wcap;
  struct group *next;
};

/* Work for a task's group thread: at the root (the sequencer), a
 * broadcast to fan out or a barrier's release; at any member, the part of
 * a tree it forwards. */
enum seq_kind { S_BCAST = 1, S_RELEASE, S_FORWARD };

struct seqitem {
  int kind;
  int tree_kind; /* for S_FORWARD: T_BCAST or T_RELEASE */
  int src, tag;
  char group[64];
  struct pvmbuf *b;
  int n;     /* S_RELEASE, S_FORWARD: tasks (and their barrier requests) */
  int *tids; /* tids[0] is this task for S_FORWARD */
  int *rpcs;
  struct seqitem *next;
};

/* What a tree message carries. */
enum tree_kind { T_BCAST = 0, T_RELEASE = 1 };

/* A group this task has joined. */
struct mygroup {
  char name[64];
  int inst;
  struct mygroup *next;
};

/* The task. One mutex guards it all; one condition variable wakes every
 * waiter (a receive, an RPC) whenever anything arrives or a peer dies. */
struct pvmstate {
  int started;
  int closing; /* pvm_exit is freeing the peers: handlers drop RSRs */
  nx_mutex_t m;
  nx_cond_t c;
  int mytid, ptid, roottid, is_root;
  int next_tid; /* the root: the tid the next spawned task gets */
  nx_gp_t self_gp;
  struct peer *peers;
  int npeers, peercap;
  int *siblings;
  int nsiblings;
  struct pvmbuf **bufs;
  int nbufs;
  int sbuf, rbuf;
  struct pvmbuf *qhead, *qtail;
  struct rpc *rpcs;
  int next_rpc;
  struct notify *notes;
  int nnotes, notecap;
  struct group *groups;
  struct mygroup *mygroups;
  struct seqitem *seq_head, *seq_tail;
  nx_cond_t seq_c;
  nx_thread_t seq_thread;
  int seq_running, seq_stop;
  int tree_min; /* groups larger than this use the binomial tree */
  int autoerr, route, fake_format;
  int ctx;      /* the current message context */
  int next_ctx; /* root: the last context handed out */
  struct mhf *mhfs;
  int nmhfs, mhfcap;
  struct mhf_id *mhf_ids; /* every id ever given, nmhf_ids of them */
  int nmhf_ids, mhf_free; /* the first free id + 1 (0: none) */
  int in_mhf;             /* a message handler is running */
  int (*recvf)(int, int, int);
  struct mclass *mboxes; /* root: the mailbox database */
  int noreset;           /* this task set PvmNoReset */
  int fds[2];            /* pvm_getfds: readable while a message is queued */
  int has_fds;
  FILE *catch_ff;   /* pvm_catchout's file */
  int out_tid;      /* where this task's output goes (0: its own stdout) */
  uint64_t out_key; /* its keeper on this host, pvm_out.c (0: none) */
  int showtids;     /* PvmShowTids */
  int *gone_q;      /* children whose end the root has not been told yet */
  int ngone, gonecap;
  unsigned deaths; /* tasks marked dead so far: receives look again */
};

extern struct pvmstate nxpvm;

/* Handler names (their ids are hashes of these). */
#define H_MSG "nxpvm.msg"
#define H_HELLO "nxpvm.hello"
#define H_KILL "nxpvm.kill"
#define H_BYE "nxpvm.bye"
#define H_WHO "nxpvm.who"
#define H_REG "nxpvm.reg"
#define H_REP "nxpvm.rep"
#define H_GRP "nxpvm.grp"
#define H_GBC "nxpvm.gbc"
#define H_GTREE "nxpvm.gtree"
#define H_MBOX "nxpvm.mbox"
#define H_GONE "nxpvm.gone"
#define H_OUT "nxpvm.out"
#define H_SIBS "nxpvm.sibs"

/* Group requests to the root. */
enum grp_op {
  G_JOIN = 1,
  G_LEAVE,
  G_SIZE,
  G_INST,
  G_TID,
  G_BARRIER,
  G_NEWCTX,
  G_FREEZE
};

/* Mailbox requests to the root, and the host requests that travel the
 * same way (pvm_host.c). */
enum mbox_op {
  M_PUT = 1,
  M_RECV,
  M_DEL,
  M_INFO,
  M_HADD,   /* add a host: name, its node spec in the message */
  M_HDEL,   /* delete a host */
  M_HLIST,  /* the hosts, in a message */
  M_HNOTE,  /* a PvmHostAdd/PvmHostDelete notify (or its cancel) */
  M_HWHERE, /* the host of a task (index) */
  M_HTASK   /* a task (index) was started on a host (name) */
};

/* pvm_task.c */
/* Whether the task has started (pvm_mytid starts it): inline, for the
 * calls of the hot path. */
static inline int nxpvmi_started(void) {
  return nxpvm.started || pvm_mytid() > 0;
}
int nxpvmi_err(const char *fn, int code);
int nxpvmi_gerr(int code);
const char *nxpvmi_errstr(int code);
/* What libpvm3 exports beside pvm3.h and programs declare themselves
 * (pvm_task.c, pvm_msg.c). */
extern int pvm_errno; /* the last error's code */
extern int pvmdebmask;
extern int pvm_nerr;
extern char *pvm_errlist[];
int lpvmerr(char *fn, int code);
int pvmsleep(int secs);
struct timeval;
int pvmgetclock(struct timeval *tm);
void pvmdisplaymhfinfo(char *who, char *msg, int tid);
struct peer *nxpvmi_peer(int tid, int create);
int nxpvmi_tid_of_context(uint64_t ctx);
int nxpvmi_resolve(int tid, nx_gp_t *gp);
int nxpvmi_resolve_root(nx_gp_t *gp);
int nxpvmi_resolve_process(int tid, nx_gp_t *gp);
int nxpvmi_rsr(int tid, const nx_gp_t *gp, const char *handler, size_t hint,
               nx_buffer_t **buf);
int nxpvmi_rsr_msg(int tid, size_t hint, nx_buffer_t **buf, uint32_t *seq);
uint32_t nxpvmi_msg_seq(int tid);
/* Sends a buffer made by nxpvmi_rsr or nxpvmi_rsr_msg: ordered, so that
 * the RSRs from one task to another run there one at a time, in the order
 * they were sent, as PVM's messages between two tasks arrive. */
static inline int nxpvmi_send(nx_buffer_t *b) {
  return nx_rsr_send_flags(b, NX_RSR_ORDERED);
}
/* Sends a request to the root, which keeps the groups, mailboxes and task
 * directory: a root that cannot be reached is PVM's lost daemon, PvmSysErr,
 * however nexus learnt it (a failed send here, or the error callback's
 * report, whichever comes first). Returns a PVM code. */
int nxpvmi_send_root(nx_buffer_t *b);
int nxpvmi_origin(nx_buffer_t *buf, int *from);
struct rpc *nxpvmi_rpc_new(void);
int nxpvmi_rpc_wait(struct rpc *r, int timeout_s, int grace_s);
void nxpvmi_rpc_free(struct rpc *r);
int nxpvmi_wait(const struct timespec *deadline);
int nxpvmi_nx_to_pvm(int rc);
int nxpvmi_put_name(nx_buffer_t *b, const char *s);
int nxpvmi_get_name(nx_buffer_t *b, char *s, size_t len);
void nxpvmi_deliver(struct pvmbuf *b);
void nxpvmi_flush_gone(void);
void nxpvmi_reply_buf(int tid, int id, int result, const struct pvmbuf *b);

/* pvm_buf.c */
struct pvmbuf *nxpvmi_buf_new(int encoding);
void nxpvmi_buf_free(struct pvmbuf *b);
struct pvmbuf *nxpvmi_buf_clone(const struct pvmbuf *b);
int nxpvmi_buf_register(struct pvmbuf *b);
struct pvmbuf *nxpvmi_buf_get(int id);
void nxpvmi_buf_drop_all(void);
void nxpvmi_buf_cache_drain(void);
void nxpvmi_buf_own_thread(void);
int nxpvmi_encode(nx_buffer_t *out, const struct pvmbuf *b);
int nxpvmi_encode_msg(nx_buffer_t *out, const struct pvmbuf *b, int src,
                      int tag);
int nxpvmi_decode(nx_buffer_t *in, struct pvmbuf **out);
int nxpvmi_decode_from(nx_buffer_t *in, int sender, struct pvmbuf **out);
/* A direct message (pvm_psend's large arrays): its values the RSR's last
 * array, by reference, typed, so that they may be placed (pvm_msg.c). */
#define NXPVM_DIRECT 1 /* the u16 that starts one */
int nxpvmi_encode_direct(nx_buffer_t *out, uint32_t seq, int tag, int ctx,
                         int kind, const void *p, size_t count,
                         nx_release_fn fn, void *arg);
int nxpvmi_decode_direct(nx_buffer_t *in, int sender, struct pvmbuf **out,
                         void *at);
int nxpvmi_kind_of_type(int datatype);
size_t nxpvmi_kind_size(int kind);
int nxpvmi_pack(int kind, const void *p, int n, int stride, size_t esize);
int nxpvmi_unpack(int kind, void *p, int n, int stride, size_t esize);
int nxpvmi_pack_type(int datatype, const void *p, int n);
int nxpvmi_unpack_type(int datatype, void *p, int n);
int nxpvmi_type_size(int datatype);
int nxpvmi_pack_into(struct pvmbuf *b, int kind, const void *p, int n,
                     int stride, size_t esize);
int nxpvmi_unpack_from(struct pvmbuf *b, int kind, void *p, int n, int stride,
                       size_t esize);

/* pvm_msg.c */
int nxpvmi_send_buf(int tid, int tag, struct pvmbuf *b);
int nxpvmi_send_as(int src, int tid, int tag, const struct pvmbuf *b);
int nxpvmi_place(nx_context_t *ctx, void *addr, nx_buffer_t *lead,
                 size_t tail_bytes, nx_place_t *where);
void *nxpvmi_place_target(void);
void nxpvmi_place_arrived(int tid, uint32_t msgs_in);
void nxpvmi_place_done(int ok, int tag, size_t bytes);
void nxpvmi_place_lost(void);

/* pvm_group.c */
void nxpvmi_on_grp(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void nxpvmi_on_gbc(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void nxpvmi_on_gtree(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void nxpvmi_groups_free(void);
void nxpvmi_seq_stop(void);
void nxpvmi_groups_forget(int tid);

/* pvm_host.c */
int nxpvmi_host_tid(void);
int nxpvmi_host_spec(const char *name, char *spec, size_t len);
void nxpvmi_on_host(int from, int id, int op, const char *name, int index,
                    int flags, const struct pvmbuf *in);
void nxpvmi_hosts_forget(int tid);
int nxpvmi_host_notify(int what, int tag, int cnt, const int *tids);
void nxpvmi_host_placed(int tid, const char *where);
void nxpvmi_hosts_free(void);
const char *nxpvmi_arch(void);
int nxpvmi_is_this_host(const char *name);

/* pvm_out.c */
int nxpvmi_out_dest(uint64_t *key);
int nxpvmi_out_keep_start(void);
void nxpvmi_out_keep_stop(void);
int nxpvmi_out_start(int tid);
int nxpvmi_out_start_log(void);
void nxpvmi_out_stop(void);
void nxpvmi_out_stop_at_exit(void);
void nxpvmi_out_end(void);
void nxpvmi_on_out(nx_context_t *ctx, void *addr, nx_buffer_t *buf);

/* pvm_mbox.c */
int nxpvmi_mbox_call(int op, const char *name, int index, int flags,
                     const struct pvmbuf *b, struct pvmbuf **reply);
void nxpvmi_on_mbox(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void nxpvmi_mbox_forget(int tid);
void nxpvmi_mbox_free(void);

/* Sends the reply for request `id` of task `tid` (pvm_task.c). */
void nxpvmi_reply(int tid, int id, int result);

#endif /* NXPVM_INTERNAL_H */
