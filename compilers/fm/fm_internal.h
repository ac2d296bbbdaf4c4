/* What the parts of libfm share: the global state, queues, the port layout and
 * the handler names. */
#ifndef FM_INTERNAL_H
#define FM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "fm.h"

#define FM_PORT_MAGIC 0x666d706fu  /* "fmpo" */
#define FM_QUEUE_MAGIC 0x666d7175u /* "fmqu" */
#define FM_QUEUE_DEAD 0x64656164u  /* freed by fm_finalize */
#define FM_BLOCK_MAGIC 0x666d626cu /* "fmbl" */

/* The private layout of fm_port_t. */
struct fm_port_impl {
  uint32_t magic;
  int32_t kind;   /* enum fm_port_kind */
  uint64_t ref;   /* inport: struct fm_queue *; outport: gp table index */
  uint64_t sid_a; /* outport: its sender id (creating context, serial) */
  uint64_t sid_b;
  uint64_t seq; /* outport: sequence number of the next message */
  uint32_t ended;
  uint32_t pad;
};
_Static_assert(sizeof(struct fm_port_impl) <= sizeof(fm_port_t),
               "fm_port_t too small");

/* A message in a queue: a buffer positioned after its header. */
struct fm_msg {
  struct fm_msg *next;
  nx_buffer_t *buf;
  uint64_t seq;
  int end;
};

/* What a queue knows of one outport: the next sequence number it expects
 * and the messages that overtook a missing one. */
struct fm_sender {
  struct fm_sender *next;
  uint64_t a, b;
  uint64_t next_seq;
  struct fm_msg *pending; /* sorted by seq */
};

enum fm_queue_state {
  FM_Q_LIVE = 0,   /* messages are queued here */
  FM_Q_MOVING = 1, /* the inport is in a message: arrivals are held */
  FM_Q_FORWARD = 2 /* the inport lives at `fwd`: arrivals go there */
};

/* A receive that waits with its variable named (fm.c, "Receive
 * placement"): the next message for it may be written there by the
 * protocol module, before its handler runs. */
enum fm_post_state {
  FM_POST_NONE = 0, /* no receive waits with its variable */
  FM_POST_OPEN,     /* one waits, and nothing is ready for it */
  FM_POST_CLAIMED   /* a message is being written into the variable */
};

/* An outport's next sequence number, as the queue knew it. */
struct fm_seen {
  uint64_t a, b, next_seq;
};

struct fm_post {
  int state;         /* enum fm_post_state */
  const void *owner; /* the receive that posted (one per queue at a time) */
  int type;          /* the variable: its type, count, address and bytes */
  uint64_t count;
  void *addr;
  size_t bytes;
  struct fm_seen *seen; /* every outport's next number when it opened */
  size_t nseen;
  nx_context_t *ctx;  /* claimed: the context that receives */
  struct fm_msg *msg; /* claimed: the message, once its handler ran */
};

/* The queue of a channel or merger, in the context of the inport holder. */
struct fm_queue {
  uint32_t magic;
  int state;
  nx_mutex_t m;
  nx_cond_t c;
  nx_gp_t self;
  nx_gp_t fwd;
  struct fm_msg *head, *tail; /* ready, in order */
  struct fm_msg *held, *held_tail;
  struct fm_sender *senders;
  int32_t nout, nended;
  int32_t dups; /* sends of stale outport copies, not yet reported */
  struct fm_queue *all_next; /* every queue of this process, for cleanup */
  /* The post: under `pl`, and under `m` too but for its claim by nexus's
   * placement callback, which takes `pl` alone. `pl` is a plain mutex that
   * no thread holds while it calls into nexus. */
  pthread_mutex_t pl;
  struct fm_post post;
};

/* What this process knows of one outport (a sender id): the sequence
 * number its next message must carry, or that it left in a message. Every
 * copy of the port value carries its own number, so a copy that falls
 * behind (or sends after the port moved away) is a second writer. */
struct fm_writer {
  struct fm_writer *next;
  uint64_t a, b;
  uint64_t next_seq;
  int gone;
};
#define FM_WRITER_BUCKETS 64

/* Process-wide state. */
struct fm_global {
  nx_mutex_t m;
  int init;
  int child;
  nx_handler_id_t h_enq, h_fwd, h_moved, h_run, h_done;
  struct fm_queue *queues;
  nx_gp_t **gps; /* outport destinations: stable, freed by fm_finalize */
  size_t ngps, capgps;
  nx_gp_t **retired; /* destinations replaced by gp_resolve, ditto */
  size_t nretired, capretired;
  uint64_t serial;
  atomic_int dead;       /* processes of the computation found dead */
  atomic_int forwarding; /* queues here that forward (FM_Q_FORWARD) */
  uint32_t *ended;       /* processes we ended ourselves (not deaths) */
  size_t nended, capended;
  uint32_t *deadl; /* processes found dead */
  size_t ndead, capdead;
  struct fm_block *blocks; /* open blocks, to wake on a death */
  struct fm_writer *writers[FM_WRITER_BUCKETS]; /* under m */
  char exe[4096];
  /* The one queue of this process whose post is claimed, or NULL: a loss
   * report names a context and a handler, not a queue. */
  struct fm_queue *_Atomic claim;
  int error_cb; /* the handle of fm's error callback (nx_error_cb_add) */
};

extern struct fm_global fm_g;

int fm_register_handlers(nx_context_t *ctx);
void fm_on_peer_dead(uint32_t proc);
void fm_mark_ended(uint32_t proc);

/* fm_values.c: `n` values of `type` (characters, for the character types)
 * from or into contiguous memory, without a head; and a value's head. */
int fmi_type_is_char(int type);
size_t fmi_zerocopy_min(void);
int fmi_units_put(nx_buffer_t *b, int type, const void *v, size_t n);
int fmi_units_get(nx_buffer_t *b, int type, void *v, size_t n);
int fmi_units_put_ref(nx_buffer_t *b, int type, const void *v, size_t n,
                      nx_release_fn fn, void *arg);
int fmi_value_head_put(nx_buffer_t *b, int type, uint64_t count, uint32_t len);
int fmi_value_head_get(nx_buffer_t *b, int *type, uint64_t *count,
                       uint32_t *len);
int fmi_type_placeable(int type);

/* fm.c: a receive of `n` values of `type` into contiguous memory at `v`,
 * which the message's values may be written into before it is taken
 * (fm.c, "Receive placement"); the message as fm_receive gives it. */
int fmi_receive_into(fm_port_t *in, int type, void *v, size_t n,
                     nx_buffer_t **msg);

/* fm_fortran.c: the Fortran binding's entry points (module fm binds them
 * under the generic names fm_send, fm_receive, fm_put, fm_get, fm_arg,
 * fm_arg_get, fm_arg_set). `stat` is Fortran's optional argument: NULL when
 * absent, and then a nonzero result stops the program with a message. */
struct fm_f_msg { /* Fortran's type(fm_msg) */
  nx_buffer_t *p;
  int64_t tag;
};
#define FM_F_MSG_TAG INT64_C(0x666d6d7367) /* "fmmsg" */
#ifdef CFI_VERSION
void fm_f_send(fm_port_t *out, CFI_cdesc_t *d, int *stat);
void fm_f_receive(fm_port_t *in, CFI_cdesc_t *d, int *stat);
void fm_f_put(struct fm_f_msg *m, CFI_cdesc_t *d, int *stat);
void fm_f_get(struct fm_f_msg *m, CFI_cdesc_t *d, int *stat);
void fm_f_arg(fm_args_t **a, CFI_cdesc_t *d, const int *intent, int *stat);
void fm_f_arg_get(fm_args_t *args, const int *i, CFI_cdesc_t *d, int *stat);
void fm_f_arg_set(fm_args_t *args, const int *i, CFI_cdesc_t *d, int *stat);
#endif

/* fm_proc.c */
void fm_h_run(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void fm_h_done(nx_context_t *ctx, void *addr, nx_buffer_t *buf);
void fm_blocks_peer_dead(uint32_t proc);
void fm_blocks_free(void);       /* closed blocks, at fm_finalize */
void fm_process_data_free(void); /* the calling thread's fm_process_data */

#endif /* FM_INTERNAL_H */
