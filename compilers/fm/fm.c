/* libfm channels: queues at the inport, outports as global pointers, send as an
 * RSR to an enqueue handler, receive on a condition variable, and ports that
 * move inside messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fm_internal.h"

struct fm_global fm_g;

/* Message kinds, the first value of every channel message. MSG_DUP tells
 * the queue that a stale copy of one of its outports tried to send. */
enum { MSG_DATA = 0, MSG_END = 1, MSG_DUP = 2 };

/* Port tags in a message. */
enum { TAG_INPORT = 1, TAG_OUTPORT = 2 };

static struct fm_port_impl *impl(fm_port_t *p) {
  return (struct fm_port_impl *)(void *)p;
}
static const struct fm_port_impl *cimpl(const fm_port_t *p) {
  return (const struct fm_port_impl *)(const void *)p;
}

const char *fm_strerror(int err) {
  switch (err) {
  case 0: return "success";
  case FM_END: return "end of channel";
  case FM_EINVAL: return "invalid argument";
  case FM_EUNDEFINED: return "the port is undefined (moved or never set)";
  case FM_EWRONGPORT: return "wrong kind of port for this operation";
  case FM_EMOVED: return "the inport moved away while waiting on it";
  case FM_EPEERDEAD: return "a process of the computation died";
  case FM_ENOPROCESS: return "no process registered under that name";
  case FM_ENDED: return "send after endchannel";
  case FM_ENOTINIT: return "fm_init was not called";
  case FM_ETYPE: return "argument of another type or size";
  case FM_ENOMEM: return "out of memory";
  case FM_EDUPLICATE:
    return "a copy of an outport wrote: a channel has one writer";
  default: return nx_strerror(err);
  }
}

int fm_port_kind(const fm_port_t *port) {
  if (port == NULL || cimpl(port)->magic != FM_PORT_MAGIC)
    return FM_UNDEFINED;
  return cimpl(port)->kind;
}

/* ---- process deaths ---------------------------------------------------- */

static int proc_in(const uint32_t *l, size_t n, uint32_t proc) {
  for (size_t i = 0; i < n; i++)
    if (l[i] == proc)
      return 1;
  return 0;
}

/* Adds to a list of processes; under fm_g.m. */
static void proc_add(uint32_t **l, size_t *n, size_t *cap, uint32_t proc) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 8;
    uint32_t *nl = realloc(*l, c * sizeof(*nl));
    if (nl == NULL)
      return;
    *l = nl;
    *cap = c;
  }
  (*l)[(*n)++] = proc;
}

/* Called by fm_processes_end before it ends a process context: its going
 * away is not a death. */
void fm_mark_ended(uint32_t proc) {
  nx_mutex_lock(&fm_g.m);
  proc_add(&fm_g.ended, &fm_g.nended, &fm_g.capended, proc);
  nx_mutex_unlock(&fm_g.m);
}

void fm_on_peer_dead(uint32_t proc) {
  nx_mutex_lock(&fm_g.m);
  int ended = proc_in(fm_g.ended, fm_g.nended, proc);
  if (!ended) {
    proc_add(&fm_g.deadl, &fm_g.ndead, &fm_g.capdead, proc);
    atomic_fetch_add(&fm_g.dead, 1);
  }
  /* Wake every receiver: an empty queue now reports the death. Under the
   * queue's mutex, so a receiver between its check and its wait cannot
   * miss the wake-up. */
  for (struct fm_queue *q = fm_g.queues; q != NULL && !ended; q = q->all_next) {
    nx_mutex_lock(&q->m);
    nx_cond_broadcast(&q->c);
    nx_mutex_unlock(&q->m);
  }
  nx_mutex_unlock(&fm_g.m);
  if (!ended)
    fm_blocks_peer_dead(proc);
}

static void claim_lost(uint64_t context);

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (err == NX_EPEERDEAD && handler == 0)
    fm_on_peer_dead((uint32_t)(context >> 32));
  else if (err == NX_EPEERDEAD && handler == fm_g.h_enq)
    claim_lost(context); /* or a message this process sent: no claim */
}

/* ---- outport destinations ---------------------------------------------- */

/* Interns a gp (taking its reference): ports carry only the index, so they
 * are plain values that need no release. */
static int gp_intern(nx_gp_t *gp, uint64_t *index) {
  nx_mutex_lock(&fm_g.m);
  for (size_t i = 0; i < fm_g.ngps; i++)
    if (nx_gp_equal(fm_g.gps[i], gp)) {
      nx_mutex_unlock(&fm_g.m);
      nx_gp_release(gp);
      *index = i;
      return 0;
    }
  if (fm_g.ngps == fm_g.capgps) {
    size_t cap = fm_g.capgps ? fm_g.capgps * 2 : 16;
    nx_gp_t **n = realloc(fm_g.gps, cap * sizeof(*n));
    if (n == NULL)
      goto nomem;
    fm_g.gps = n;
    fm_g.capgps = cap;
  }
  nx_gp_t *g = malloc(sizeof(*g));
  if (g == NULL)
    goto nomem;
  *g = *gp; /* takes the reference */
  fm_g.gps[fm_g.ngps] = g;
  *index = fm_g.ngps++;
  nx_mutex_unlock(&fm_g.m);
  return 0;
nomem:
  nx_mutex_unlock(&fm_g.m);
  nx_gp_release(gp);
  return FM_ENOMEM;
}

static const nx_gp_t *gp_at(uint64_t index) {
  nx_mutex_lock(&fm_g.m);
  const nx_gp_t *g = index < fm_g.ngps ? fm_g.gps[index] : NULL;
  nx_mutex_unlock(&fm_g.m);
  return g;
}

/* The destination of outports whose channel's inport left this process.
 * Their queue here forwards every message to the inport's new place, which
 * costs a copy of the message on each side and a hop. Once the queue knows
 * that place (it is FM_Q_FORWARD), the outports' destination entry `index`
 * is pointed there, for every outport of the channel in this process: the
 * receiving queue orders messages by their outport's sequence numbers,
 * whichever way they came. The replaced gp stays valid (a sender may hold
 * it) until fm_finalize. Returns the destination to use. */
static const nx_gp_t *gp_resolve(uint64_t index, const nx_gp_t *to) {
  if (to == NULL || atomic_load(&fm_g.forwarding) == 0)
    return to; /* no queue of this process forwards */
  uint64_t self = nx_context_id(nx_context_self());
  if (nx_gp_context(to) >> 32 != self >> 32)
    return to; /* not a queue of this process */
  void *addr = nx_gp_address(to);
  struct fm_queue *q = NULL;
  nx_mutex_lock(&fm_g.m);
  /* Only an address in the list is read as a queue: a gp may come from a
   * peer. Queues are freed only by fm_finalize. */
  for (struct fm_queue *x = fm_g.queues; x != NULL && q == NULL;
       x = x->all_next)
    if ((void *)x == addr)
      q = x;
  nx_mutex_unlock(&fm_g.m);
  if (q == NULL)
    return to;
  nx_gp_t *fwd = malloc(sizeof(*fwd));
  if (fwd == NULL)
    return to;
  nx_mutex_lock(&q->m);
  int moved = q->magic == FM_QUEUE_MAGIC && q->state == FM_Q_FORWARD &&
              nx_gp_copy(&q->fwd, fwd) == 0;
  nx_mutex_unlock(&q->m);
  if (!moved) {
    free(fwd);
    return to;
  }
  nx_mutex_lock(&fm_g.m);
  nx_gp_t **keep = NULL;
  if (index < fm_g.ngps && fm_g.gps[index] == to &&
      (fm_g.nretired < fm_g.capretired ||
       (keep = realloc(fm_g.retired,
                       (fm_g.capretired * 2 + 8) * sizeof(*keep))) != NULL)) {
    if (keep != NULL) {
      fm_g.retired = keep;
      fm_g.capretired = fm_g.capretired * 2 + 8;
    }
    fm_g.retired[fm_g.nretired++] = fm_g.gps[index];
    fm_g.gps[index] = fwd;
    nx_mutex_unlock(&fm_g.m);
    return fwd;
  }
  nx_mutex_unlock(&fm_g.m);
  /* Another sender redirected it meanwhile (or no memory): next time. */
  nx_gp_release(fwd);
  free(fwd);
  return to;
}

/* ---- writers: one per outport ------------------------------------------- */

/* Finds (or makes, expecting `seq` next) this process's record of the
 * outport (a, b). Under fm_g.m. NULL when out of memory. */
static struct fm_writer *writer_find(uint64_t a, uint64_t b, uint64_t seq) {
  size_t h = (size_t)((a * 31 + b) % FM_WRITER_BUCKETS);
  for (struct fm_writer *w = fm_g.writers[h]; w != NULL; w = w->next)
    if (w->a == a && w->b == b)
      return w;
  struct fm_writer *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return NULL;
  w->a = a;
  w->b = b;
  w->next_seq = seq;
  w->next = fm_g.writers[h];
  fm_g.writers[h] = w;
  return w;
}

/* Takes sequence number p->seq for a message (next_seq advances), or says
 * the port is a stale copy: another copy took that number, or the port
 * moved away. With `leave`, the port moves away (fm_put_port). */
static int writer_take(const struct fm_port_impl *p, int leave) {
  nx_mutex_lock(&fm_g.m);
  struct fm_writer *w = writer_find(p->sid_a, p->sid_b, p->seq);
  int r = w == NULL ? FM_ENOMEM : 0;
  if (r == 0 && (w->gone || w->next_seq != p->seq))
    r = FM_EDUPLICATE;
  else if (r == 0 && leave)
    w->gone = 1;
  else if (r == 0)
    w->next_seq++;
  nx_mutex_unlock(&fm_g.m);
  return r;
}

/* Gives back what writer_take took (an aborted message, a failed move). */
static void writer_undo(const struct fm_port_impl *p, int leave) {
  nx_mutex_lock(&fm_g.m);
  struct fm_writer *w = writer_find(p->sid_a, p->sid_b, p->seq);
  if (w != NULL && leave)
    w->gone = 0;
  else if (w != NULL && w->next_seq == p->seq + 1)
    w->next_seq = p->seq;
  nx_mutex_unlock(&fm_g.m);
}

/* An outport arrived here: its number is the one to expect. */
static void writer_arrive(uint64_t a, uint64_t b, uint64_t seq) {
  nx_mutex_lock(&fm_g.m);
  struct fm_writer *w = writer_find(a, b, seq);
  if (w != NULL) {
    w->next_seq = seq;
    w->gone = 0;
  }
  nx_mutex_unlock(&fm_g.m);
}

static void writers_free(void) {
  for (size_t h = 0; h < FM_WRITER_BUCKETS; h++)
    while (fm_g.writers[h] != NULL) {
      struct fm_writer *w = fm_g.writers[h];
      fm_g.writers[h] = w->next;
      free(w);
    }
}

/* ---- queues ------------------------------------------------------------ */

static struct fm_queue *queue_new(void) {
  struct fm_queue *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return NULL;
  q->magic = FM_QUEUE_MAGIC;
  nx_mutex_init(&q->m);
  nx_cond_init(&q->c);
  pthread_mutex_init(&q->pl, NULL);
  if (nx_gp_make(q, &q->self) != 0) {
    pthread_mutex_destroy(&q->pl);
    free(q);
    return NULL;
  }
  nx_mutex_lock(&fm_g.m);
  q->all_next = fm_g.queues;
  fm_g.queues = q;
  nx_mutex_unlock(&fm_g.m);
  return q;
}

static void msgs_free(struct fm_msg *m) {
  while (m != NULL) {
    struct fm_msg *n = m->next;
    nx_buffer_release(m->buf);
    free(m);
    m = n;
  }
}

static void post_close(struct fm_queue *q);

/* Releases what a queue holds; the memory stays (late handlers see DEAD). */
static void queue_clear_locked(struct fm_queue *q) {
  pthread_mutex_lock(&q->pl);
  post_close(q);
  pthread_mutex_unlock(&q->pl);
  msgs_free(q->head);
  msgs_free(q->held);
  q->head = q->tail = q->held = q->held_tail = NULL;
  while (q->senders != NULL) {
    struct fm_sender *s = q->senders;
    q->senders = s->next;
    msgs_free(s->pending);
    free(s);
  }
}

static struct fm_sender *sender_find(struct fm_queue *q, uint64_t a, uint64_t b,
                                     int create) {
  for (struct fm_sender *s = q->senders; s != NULL; s = s->next)
    if (s->a == a && s->b == b)
      return s;
  if (!create)
    return NULL;
  struct fm_sender *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  s->a = a;
  s->b = b;
  s->next = q->senders;
  q->senders = s;
  return s;
}

static void ready_append(struct fm_queue *q, struct fm_msg *m) {
  m->next = NULL;
  if (q->tail != NULL)
    q->tail->next = m;
  else
    q->head = m;
  q->tail = m;
}

/* Reads a channel message's header. */
static int header_get(nx_buffer_t *buf, int8_t *kind, uint64_t *a, uint64_t *b,
                      uint64_t *seq) {
  int r = nx_get_int8(buf, kind);
  if (r == 0)
    r = nx_get_uint64(buf, a);
  if (r == 0)
    r = nx_get_uint64(buf, b);
  if (r == 0)
    r = nx_get_uint64(buf, seq);
  return r;
}

/* Sends a whole message (header included) on to where the inport went. */
static void forward(const nx_gp_t *to, nx_buffer_t *buf) {
  const void *data;
  size_t len;
  nx_buffer_t *out;
  if (nx_buffer_bytes(buf, &data, &len) != 0 ||
      nx_rsr_init(&out, to, fm_g.h_fwd, len + 32) != 0)
    return;
  if (nx_put_int32(out, nx_buffer_format(buf)) != 0 ||
      nx_put_uint64(out, len) != 0 || nx_put_bytes(out, data, len) != 0) {
    nx_buffer_release(out);
    return;
  }
  nx_rsr_send(out);
}

/* ---- receive placement -------------------------------------------------
 *
 * A receive into a contiguous array (fmi_receive_into) that finds nothing
 * ready posts its variable on the queue. When a message's leading values
 * are in, nexus asks place_enq (a placement callback on "fm.enq", run by
 * the receiving thread, possibly inside a module with its lock held): if
 * that message is the one the receive would take next (its outport's next
 * number, nothing else ready, the same type and count), it claims the post
 * and the module writes the values straight into the variable. The
 * receive then takes exactly that message, whose get into the variable
 * copies nothing; it does not return before the claim is settled, by the
 * message's handler (claim_arrived) or by nexus's report that the message
 * was lost (claim_lost), so a variable is never written after its receive
 * returned. One claim per process at a time: the report names a context
 * and a handler, not a queue. Under the queue's `pl`; nothing under it
 * calls into nexus. */

/* Closes a post (under pl). */
static void post_close(struct fm_queue *q) {
  if (q->post.state == FM_POST_CLAIMED)
    atomic_store(&fm_g.claim, NULL);
  free(q->post.seen);
  memset(&q->post, 0, sizeof(q->post));
}

/* Opens a post for the receive `owner` that waits (under m, nothing
 * ready), unless another receive's is open: the variable and every
 * outport's next number, which stay what they are while it is open (a
 * message made ready closes it). */
static void post_open(struct fm_queue *q, const void *owner, int type, void *v,
                      size_t n) {
  size_t ns = 0;
  for (struct fm_sender *s = q->senders; s != NULL; s = s->next)
    ns++;
  struct fm_seen *seen = ns > 0 ? malloc(ns * sizeof(*seen)) : NULL;
  if (ns > 0 && seen == NULL)
    return; /* no post: the values are copied */
  size_t i = 0;
  for (struct fm_sender *s = q->senders; s != NULL; s = s->next, i++) {
    seen[i].a = s->a;
    seen[i].b = s->b;
    seen[i].next_seq = s->next_seq;
  }
  pthread_mutex_lock(&q->pl);
  if (q->post.state != FM_POST_NONE) { /* another receive's */
    pthread_mutex_unlock(&q->pl);
    free(seen);
    return;
  }
  q->post.state = FM_POST_OPEN;
  q->post.owner = owner;
  q->post.type = type;
  q->post.count = n;
  q->post.addr = v;
  q->post.bytes = n * fm_type_size(type);
  q->post.seen = seen;
  q->post.nseen = ns;
  pthread_mutex_unlock(&q->pl);
}

/* The placement callback of "fm.enq" (nexus/context.h: reads `lead` and
 * the queue's post, under pl; calls nothing else of nexus). */
static int place_enq(nx_context_t *ctx, void *address, nx_buffer_t *lead,
                     size_t tail_bytes, nx_place_t *where) {
  struct fm_queue *q = address;
  int8_t kind;
  uint64_t a, b, seq, count;
  int type;
  uint32_t len;
  if (q == NULL || header_get(lead, &kind, &a, &b, &seq) != 0 ||
      kind != MSG_DATA || fmi_value_head_get(lead, &type, &count, &len) != 0)
    return 0;
  int placed = 0;
  pthread_mutex_lock(&q->pl);
  struct fm_post *p = &q->post;
  uint64_t next = 0; /* an outport not seen yet starts at 0 */
  for (size_t i = 0; i < p->nseen; i++)
    if (p->seen[i].a == a && p->seen[i].b == b)
      next = p->seen[i].next_seq;
  struct fm_queue *none = NULL;
  if (p->state == FM_POST_OPEN && seq == next && type == p->type &&
      count == p->count && tail_bytes == p->bytes &&
      atomic_compare_exchange_strong(&fm_g.claim, &none, q)) {
    p->state = FM_POST_CLAIMED; /* msg stays NULL until it arrives */
    p->ctx = ctx;
    where->addr = p->addr;
    where->len = p->bytes;
    placed = 1;
  }
  pthread_mutex_unlock(&q->pl);
  return placed;
}

/* A message made ready (`m`, placed or not) or refused (`m` NULL,
 * `placed` its buffer's placement) by queue_accept, under m: a placed one
 * settles the claim, for the receive to take it; any other ready message
 * closes an open post (the receive wakes and takes it); a placed one
 * refused voids the claim (the receive goes on waiting, its variable
 * written). */
static void post_accepted(struct fm_queue *q, struct fm_msg *m, int placed) {
  pthread_mutex_lock(&q->pl);
  if (q->post.state == FM_POST_CLAIMED && placed && m != NULL)
    q->post.msg = m;
  else if (q->post.state == FM_POST_OPEN ||
           (placed && q->post.state == FM_POST_CLAIMED))
    post_close(q);
  pthread_mutex_unlock(&q->pl);
}

/* nexus reported a message for "fm.enq" in `context` lost after it was
 * placed: the claimed post of that context, if its message never came,
 * is void (the receive goes on, and reports the death if nothing comes). */
static void claim_lost(uint64_t context) {
  struct fm_queue *q = atomic_load(&fm_g.claim);
  if (q == NULL)
    return;
  nx_mutex_lock(&q->m);
  pthread_mutex_lock(&q->pl);
  nx_context_t *ctx = q->post.state == FM_POST_CLAIMED && q->post.msg == NULL
                          ? q->post.ctx
                          : NULL;
  pthread_mutex_unlock(&q->pl);
  /* Stable while m is held: only holders of m settle a claim. */
  if (ctx != NULL && nx_context_id(ctx) == context) {
    pthread_mutex_lock(&q->pl);
    post_close(q);
    pthread_mutex_unlock(&q->pl);
    nx_cond_broadcast(&q->c);
  }
  nx_mutex_unlock(&q->m);
}

/* Puts a message in its place (takes `buf`, positioned after the header):
 * in order per outport, held while the inport moves, forwarded after. */
static void queue_accept(struct fm_queue *q, nx_buffer_t *buf, int8_t kind,
                         uint64_t a, uint64_t b, uint64_t seq) {
  int placed = nx_buffer_placement(buf) == 1;
  nx_mutex_lock(&q->m);
  if (q->magic != FM_QUEUE_MAGIC) {
    if (placed)
      post_accepted(q, NULL, 1);
    nx_mutex_unlock(&q->m);
    nx_buffer_release(buf);
    return;
  }
  /* A claimed post keeps the queue live (queue_pack waits for it): a
   * placed message is never held or forwarded. */
  if (q->state == FM_Q_FORWARD) {
    nx_gp_t to;
    int r = nx_gp_copy(&q->fwd, &to);
    nx_mutex_unlock(&q->m);
    if (r == 0) {
      forward(&to, buf);
      nx_gp_release(&to);
    }
    nx_buffer_release(buf);
    return;
  }
  struct fm_msg *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    post_accepted(q, NULL, placed);
    nx_mutex_unlock(&q->m);
    nx_buffer_release(buf);
    return;
  }
  m->buf = buf;
  m->seq = seq;
  m->end = kind == MSG_END;
  if (q->state == FM_Q_MOVING) {
    /* Kept whole (header included is not needed: we re-read from start). */
    if (q->held_tail != NULL)
      q->held_tail->next = m;
    else
      q->held = m;
    q->held_tail = m;
    nx_mutex_unlock(&q->m);
    return;
  }
  if (kind == MSG_DUP) { /* a stale copy of an outport tried to send */
    post_accepted(q, NULL, placed);
    q->dups++;
    nx_cond_broadcast(&q->c);
    nx_mutex_unlock(&q->m);
    nx_buffer_release(buf);
    free(m);
    return;
  }
  struct fm_sender *s = sender_find(q, a, b, 1);
  int dup = s != NULL && seq < s->next_seq;
  for (struct fm_msg *p = s ? s->pending : NULL; p != NULL && !dup; p = p->next)
    dup = p->seq == seq;
  if (s == NULL || dup) { /* out of memory, or a number taken twice */
    post_accepted(q, NULL, placed);
    if (dup) {
      q->dups++; /* the receiver is told, never silently short */
      nx_cond_broadcast(&q->c);
    }
    nx_mutex_unlock(&q->m);
    nx_buffer_release(buf);
    free(m);
    return;
  }
  if (seq == s->next_seq) {
    ready_append(q, m);
    s->next_seq++;
    while (s->pending != NULL && s->pending->seq == s->next_seq) {
      struct fm_msg *p = s->pending;
      s->pending = p->next;
      ready_append(q, p);
      s->next_seq++;
    }
    post_accepted(q, m, placed);
  } else { /* overtook an earlier message of its outport: wait for it
            * (never a placed one: place_enq claims only the next) */
    struct fm_msg **pp = &s->pending;
    while (*pp != NULL && (*pp)->seq < seq)
      pp = &(*pp)->next;
    m->next = *pp;
    *pp = m;
  }
  nx_cond_broadcast(&q->c);
  nx_mutex_unlock(&q->m);
}

/* "fm.enq": a message sent on an outport. */
static void h_enq(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  struct fm_queue *q = addr;
  int8_t kind;
  uint64_t a, b, seq;
  if (q == NULL || header_get(buf, &kind, &a, &b, &seq) != 0 ||
      nx_buffer_retain(buf) != 0)
    return;
  queue_accept(q, buf, kind, a, b, seq);
}

/* Rebuilds a whole message that was packed as bytes (forwarded, or carried
 * along with a moving inport) and reads its header. */
static nx_buffer_t *blob_get(nx_buffer_t *buf, int8_t *kind, uint64_t *a,
                             uint64_t *b, uint64_t *seq) {
  int32_t fmt;
  uint64_t len;
  if (nx_get_int32(buf, &fmt) != 0 || nx_get_uint64(buf, &len) != 0 ||
      len > nx_buffer_remaining(buf))
    return NULL;
  /* Read in place: the only copy is the new buffer's. */
  const void *data;
  nx_buffer_t *nb = NULL;
  if (nx_get_bytes_ptr(buf, &data, len) != 0 ||
      nx_buffer_from_bytes(data, len, fmt, &nb) != 0)
    return NULL;
  if (header_get(nb, kind, a, b, seq) != 0) {
    nx_buffer_release(nb);
    return NULL;
  }
  return nb;
}

static int blob_put(nx_buffer_t *out, nx_buffer_t *msg) {
  const void *data;
  size_t len;
  int r = nx_buffer_bytes(msg, &data, &len);
  if (r == 0)
    r = nx_put_int32(out, nx_buffer_format(msg));
  if (r == 0)
    r = nx_put_uint64(out, len);
  if (r == 0)
    r = nx_put_bytes(out, data, len);
  return r;
}

/* "fm.fwd": a message forwarded from the inport's old place. */
static void h_fwd(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  int8_t kind;
  uint64_t a, b, seq;
  nx_buffer_t *nb = blob_get(buf, &kind, &a, &b, &seq);
  if (addr != NULL && nb != NULL)
    queue_accept(addr, nb, kind, a, b, seq);
  else if (nb != NULL)
    nx_buffer_release(nb);
}

/* "fm.moved": the inport arrived at its new place; forward what was held
 * and everything that comes later. */
static void h_moved(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  struct fm_queue *q = addr;
  nx_gp_t to = NX_GP_NULL;
  if (q == NULL || nx_get_gp(buf, &to) != 0)
    return;
  nx_mutex_lock(&q->m);
  if (q->magic != FM_QUEUE_MAGIC || q->state != FM_Q_MOVING) {
    nx_mutex_unlock(&q->m);
    nx_gp_release(&to);
    return;
  }
  q->state = FM_Q_FORWARD;
  atomic_fetch_add(&fm_g.forwarding, 1);
  nx_gp_copy(&to, &q->fwd);
  struct fm_msg *held = q->held;
  q->held = q->held_tail = NULL;
  nx_mutex_unlock(&q->m);
  for (struct fm_msg *m = held; m != NULL; m = m->next)
    forward(&to, m->buf);
  msgs_free(held);
  nx_gp_release(&to);
}

int fm_register_handlers(nx_context_t *ctx) {
  int r =
      nx_handler_register(ctx, "fm.enq", h_enq, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_set_place(ctx, "fm.enq", place_enq);
  if (r == 0)
    r = nx_handler_register(ctx, "fm.fwd", h_fwd, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "fm.moved", h_moved, NX_HANDLER_NONTHREADED,
                            NULL);
  /* A process may run for the whole program: its own thread. */
  if (r == 0)
    r = nx_handler_register(ctx, "fm.run", fm_h_run, NX_HANDLER_NEW_THREAD,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "fm.done", fm_h_done, NX_HANDLER_NONTHREADED,
                            NULL);
  return r;
}

/* ---- channels ---------------------------------------------------------- */

/* Handlers read this on runtime threads: fm_init publishes everything it
 * set up with the release store below. */
static int need_init(void) {
  return __atomic_load_n(&fm_g.init, __ATOMIC_ACQUIRE) > 0 ? 0 : FM_ENOTINIT;
}

static void outport_make(fm_port_t *out, uint64_t gpi) {
  struct fm_port_impl *p = impl(out);
  memset(out, 0, sizeof(*out));
  p->magic = FM_PORT_MAGIC;
  p->kind = FM_OUTPORT;
  p->ref = gpi;
  p->sid_a = nx_context_id(nx_context_self());
  nx_mutex_lock(&fm_g.m);
  p->sid_b = ++fm_g.serial;
  nx_mutex_unlock(&fm_g.m);
}

int fm_merger(fm_port_t *in, fm_port_t *outs, int n) {
  int r = need_init();
  if (r != 0)
    return r;
  if (in == NULL || outs == NULL || n < 1)
    return FM_EINVAL;
  struct fm_queue *q = queue_new();
  if (q == NULL)
    return FM_ENOMEM;
  q->nout = n;
  nx_gp_t g;
  uint64_t gpi;
  if ((r = nx_gp_copy(&q->self, &g)) != 0 || (r = gp_intern(&g, &gpi)) != 0)
    return r;
  for (int i = 0; i < n; i++)
    outport_make(&outs[i], gpi);
  memset(in, 0, sizeof(*in));
  impl(in)->magic = FM_PORT_MAGIC;
  impl(in)->kind = FM_INPORT;
  impl(in)->ref = (uint64_t)(uintptr_t)q;
  return 0;
}

int fm_channel(fm_port_t *in, fm_port_t *out) { return fm_merger(in, out, 1); }

int fm_moveport(fm_port_t *from, fm_port_t *to) {
  if (from == NULL || to == NULL)
    return FM_EINVAL;
  if (fm_port_kind(from) == FM_UNDEFINED)
    return FM_EUNDEFINED;
  if (from != to) {
    *to = *from;
    memset(from, 0, sizeof(*from));
  }
  return 0;
}

static int outport_check(fm_port_t *out) {
  int k = fm_port_kind(out);
  if (k == FM_UNDEFINED)
    return out == NULL ? FM_EINVAL : FM_EUNDEFINED;
  if (k != FM_OUTPORT)
    return FM_EWRONGPORT;
  if (impl(out)->ended)
    return FM_ENDED;
  return 0;
}

/* Tells a queue that a stale copy of one of its outports tried to send, so
 * that its receiver learns it too (best effort: the sender has its code). */
static void dup_notice(const nx_gp_t *to, const struct fm_port_impl *p) {
  nx_buffer_t *b;
  if (nx_rsr_init(&b, to, fm_g.h_enq, 32) != 0)
    return;
  if (nx_put_int8(b, MSG_DUP) != 0 || nx_put_uint64(b, p->sid_a) != 0 ||
      nx_put_uint64(b, p->sid_b) != 0 || nx_put_uint64(b, p->seq) != 0) {
    nx_buffer_release(b);
    return;
  }
  nx_rsr_send(b);
}

static int start(fm_port_t *out, int8_t kind, size_t hint, nx_buffer_t **msg) {
  int r = need_init();
  if (r == 0)
    r = outport_check(out);
  if (r != 0)
    return r;
  struct fm_port_impl *p = impl(out);
  const nx_gp_t *to = gp_resolve(p->ref, gp_at(p->ref));
  if (to == NULL)
    return FM_EUNDEFINED;
  uint32_t proc = (uint32_t)(nx_gp_context(to) >> 32);
  if (atomic_load(&fm_g.dead) > 0) {
    nx_mutex_lock(&fm_g.m);
    int dead = proc_in(fm_g.deadl, fm_g.ndead, proc);
    nx_mutex_unlock(&fm_g.m);
    if (dead)
      return FM_EPEERDEAD; /* its process is gone */
  }
  if ((r = writer_take(p, 0)) != 0) {
    if (r == FM_EDUPLICATE)
      dup_notice(to, p);
    return r;
  }
  nx_buffer_t *b;
  if ((r = nx_rsr_init(&b, to, fm_g.h_enq, hint + 32)) != 0) {
    writer_undo(p, 0);
    return r;
  }
  if ((r = nx_put_int8(b, kind)) != 0 || (r = nx_put_uint64(b, p->sid_a)) ||
      (r = nx_put_uint64(b, p->sid_b)) || (r = nx_put_uint64(b, p->seq))) {
    writer_undo(p, 0);
    nx_buffer_release(b);
    return r;
  }
  p->seq++;
  *msg = b;
  return 0;
}

int fm_send_begin(fm_port_t *out, size_t size_hint, nx_buffer_t **msg) {
  if (msg == NULL)
    return FM_EINVAL;
  return start(out, MSG_DATA, size_hint, msg);
}

int fm_send_end(nx_buffer_t *msg) {
  if (msg == NULL)
    return FM_EINVAL;
  return nx_rsr_send(msg);
}

int fm_send_abort(fm_port_t *out, nx_buffer_t *msg) {
  if (msg == NULL || fm_port_kind(out) != FM_OUTPORT || impl(out)->seq == 0)
    return FM_EINVAL;
  impl(out)->seq--; /* the receiver must not wait for it */
  writer_undo(impl(out), 0);
  return nx_buffer_release(msg);
}

int fm_endchannel(fm_port_t *out) {
  nx_buffer_t *b;
  int r = start(out, MSG_END, 0, &b);
  if (r != 0)
    return r;
  impl(out)->ended = 1;
  return nx_rsr_send(b);
}

static int inport_queue(fm_port_t *in, struct fm_queue **q) {
  int r = need_init();
  if (r != 0)
    return r;
  int k = fm_port_kind(in);
  if (k == FM_UNDEFINED)
    return in == NULL ? FM_EINVAL : FM_EUNDEFINED;
  if (k != FM_INPORT)
    return FM_EWRONGPORT;
  *q = (struct fm_queue *)(uintptr_t)impl(in)->ref;
  return 0;
}

/* try_take's answer when the caller must wait (not an error code). */
#define TAKE_WAIT 0x7fff

/* Takes the next message or end; TAKE_WAIT when the caller must wait.
 * Under q->m. */
static int try_take(struct fm_queue *q, nx_buffer_t **msg) {
  if (q->dups > 0) {
    q->dups--;
    return FM_EDUPLICATE;
  }
  /* Not a message placed into another receive's variable: that one is
   * its (post.msg is set under m). */
  struct fm_msg **pp = &q->head, *prev = NULL;
  while (*pp != NULL) {
    struct fm_msg *m = *pp;
    if (m == q->post.msg) {
      prev = m;
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    if (q->tail == m)
      q->tail = prev;
    if (!m->end) {
      *msg = m->buf;
      free(m);
      return 0;
    }
    nx_buffer_release(m->buf);
    free(m);
    q->nended++;
  }
  if (q->state != FM_Q_LIVE || q->magic != FM_QUEUE_MAGIC)
    return FM_EMOVED;
  if (q->nended >= q->nout)
    return FM_END;
  if (atomic_load(&fm_g.dead) > 0)
    return FM_EPEERDEAD;
  return TAKE_WAIT;
}

/* Takes the claimed message out of the ready list (under m and pl). */
static nx_buffer_t *take_claimed(struct fm_queue *q) {
  struct fm_msg *m = q->post.msg, *prev = NULL;
  for (struct fm_msg *p = q->head; p != m; p = p->next)
    prev = p;
  if (prev != NULL)
    prev->next = m->next;
  else
    q->head = m->next;
  if (q->tail == m)
    q->tail = prev;
  nx_buffer_t *buf = m->buf;
  free(m);
  post_close(q);
  return buf;
}

/* Receives the next message; with `v` (a contiguous array of `n` values
 * of `type`, large and placeable), a wait posts it (see "Receive
 * placement" above). */
static int receive(fm_port_t *in, nx_buffer_t **msg, int type, void *v,
                   size_t n) {
  struct fm_queue *q;
  int r = inport_queue(in, &q);
  if (r != 0)
    return r;
  if (msg == NULL)
    return FM_EINVAL;
  char me; /* this receive's token: the owner of its post */
  nx_mutex_lock(&q->m);
  for (;;) {
    pthread_mutex_lock(&q->pl);
    int mine = q->post.state != FM_POST_NONE && q->post.owner == &me;
    int claimed = mine && q->post.state == FM_POST_CLAIMED;
    if (claimed && q->post.msg != NULL) {
      *msg = take_claimed(q);
      pthread_mutex_unlock(&q->pl);
      r = 0;
      break;
    }
    if (mine && !claimed)
      post_close(q); /* taken, or opened again below */
    pthread_mutex_unlock(&q->pl);
    if (!claimed && (r = try_take(q, msg)) != TAKE_WAIT)
      break;
    /* Nothing for us yet; or a message is being written into `v`: the
     * receive waits for it, whatever else comes (a death: claim_lost). */
    if (!claimed && v != NULL && q->state == FM_Q_LIVE)
      post_open(q, &me, type, v, n);
    nx_cond_wait(&q->c, &q->m);
  }
  nx_mutex_unlock(&q->m);
  return r;
}

int fm_receive(fm_port_t *in, nx_buffer_t **msg) {
  return receive(in, msg, 0, NULL, 0);
}

int fmi_receive_into(fm_port_t *in, int type, void *v, size_t n,
                     nx_buffer_t **msg) {
  int ok = v != NULL && fmi_type_placeable(type) &&
           n * fm_type_size(type) >= NX_PLACE_MIN;
  return receive(in, msg, type, ok ? v : NULL, n);
}

int fm_msg_free(nx_buffer_t *msg) {
  return msg == NULL ? FM_EINVAL : nx_buffer_release(msg);
}

/* Whether a receive on queue `q` would return at once. */
static int queue_ready(struct fm_queue *q) {
  nx_mutex_lock(&q->m);
  /* Skip ends of merger outports that are not the last: they are not
   * something a receive would return. */
  int ready = q->dups > 0;
  int32_t ended = q->nended;
  for (struct fm_msg *m = q->head; m != NULL && !ready; m = m->next)
    if (!m->end || ++ended >= q->nout)
      ready = 1;
  if (!ready)
    ready = q->state != FM_Q_LIVE || ended >= q->nout ||
            atomic_load(&fm_g.dead) > 0;
  nx_mutex_unlock(&q->m);
  return ready;
}

int fm_probe(fm_port_t *in) {
  struct fm_queue *q;
  int r = inport_queue(in, &q);
  if (r != 0)
    return r;
  if (queue_ready(q))
    return 1;
  /* Nothing yet: drive the network once and look again, so that a process
   * polling with PROBE finds a message as soon as it is there, not when
   * its progress thread next gets a core from the polling loop
   * (milliseconds, with as many busy processes as cores). */
  nx_poll();
  return queue_ready(q);
}

/* ---- ports in messages ------------------------------------------------- */

static int msgs_count(const struct fm_msg *m) {
  int n = 0;
  for (; m != NULL; m = m->next)
    n++;
  return n;
}

/* Packs a queue for its move: the old place (for "fm.moved"), the merger's
 * counts, every outport's next sequence number with the messages that
 * overtook, and the ready messages in order. */
static int queue_pack(nx_buffer_t *out, struct fm_queue *q) {
  nx_mutex_lock(&q->m);
  /* A message being written into a waiting receive's variable is that
   * receive's: the port moves once it has it. An open post closes, so
   * that nothing is placed for a port on its way. */
  for (;;) {
    if (q->state != FM_Q_LIVE) {
      nx_mutex_unlock(&q->m);
      return FM_EUNDEFINED;
    }
    pthread_mutex_lock(&q->pl);
    int claimed = q->post.state == FM_POST_CLAIMED;
    if (!claimed)
      post_close(q);
    pthread_mutex_unlock(&q->pl);
    if (!claimed)
      break;
    nx_cond_wait(&q->c, &q->m);
  }
  int r = nx_put_gp(out, &q->self);
  if (r == 0)
    r = nx_put_int32(out, q->nout);
  if (r == 0)
    r = nx_put_int32(out, q->nended);
  if (r == 0)
    r = nx_put_int32(out, q->dups);
  int ns = 0;
  for (struct fm_sender *s = q->senders; s != NULL; s = s->next)
    ns++;
  if (r == 0)
    r = nx_put_int32(out, ns);
  for (struct fm_sender *s = q->senders; s != NULL && r == 0; s = s->next) {
    r = nx_put_uint64(out, s->a);
    if (r == 0)
      r = nx_put_uint64(out, s->b);
    if (r == 0)
      r = nx_put_uint64(out, s->next_seq);
    if (r == 0)
      r = nx_put_int32(out, msgs_count(s->pending));
    for (struct fm_msg *m = s->pending; m != NULL && r == 0; m = m->next)
      r = blob_put(out, m->buf);
  }
  if (r == 0)
    r = nx_put_int32(out, msgs_count(q->head));
  for (struct fm_msg *m = q->head; m != NULL && r == 0; m = m->next)
    r = blob_put(out, m->buf);
  if (r == 0) {
    /* From now on arrivals are held until the new place is known. */
    q->state = FM_Q_MOVING;
    struct fm_sender *s = q->senders;
    q->senders = NULL;
    struct fm_msg *head = q->head;
    q->head = q->tail = NULL;
    while (s != NULL) {
      struct fm_sender *n = s->next;
      msgs_free(s->pending);
      free(s);
      s = n;
    }
    msgs_free(head);
    nx_cond_broadcast(&q->c); /* a (misused) waiter gets FM_EMOVED */
  }
  nx_mutex_unlock(&q->m);
  return r;
}

int fm_put_port(nx_buffer_t *msg, fm_port_t *port) {
  int r = need_init();
  if (r != 0)
    return r;
  if (msg == NULL || port == NULL)
    return FM_EINVAL;
  int k = fm_port_kind(port);
  if (k == FM_UNDEFINED)
    return FM_EUNDEFINED;
  struct fm_port_impl *p = impl(port);
  if (k == FM_OUTPORT) {
    const nx_gp_t *to = gp_resolve(p->ref, gp_at(p->ref));
    if (to == NULL)
      return FM_EUNDEFINED;
    if ((r = writer_take(p, 1)) != 0) {
      if (r == FM_EDUPLICATE)
        dup_notice(to, p);
      return r;
    }
    r = nx_put_int8(msg, TAG_OUTPORT);
    if (r == 0)
      r = nx_put_gp(msg, to);
    if (r == 0)
      r = nx_put_uint64(msg, p->sid_a);
    if (r == 0)
      r = nx_put_uint64(msg, p->sid_b);
    if (r == 0)
      r = nx_put_uint64(msg, p->seq);
    if (r == 0)
      r = nx_put_int32(msg, (int32_t)p->ended);
    if (r != 0)
      writer_undo(p, 1);
  } else {
    r = nx_put_int8(msg, TAG_INPORT);
    if (r == 0)
      r = queue_pack(msg, (struct fm_queue *)(uintptr_t)p->ref);
  }
  if (r == 0)
    memset(port, 0, sizeof(*port)); /* moved: the sender's copy is undefined */
  return r;
}

/* Unpacks a moved queue into a new one here, then tells the old place. */
static int queue_unpack(nx_buffer_t *msg, fm_port_t *port) {
  nx_gp_t old = NX_GP_NULL;
  int32_t nout, nended, dups, ns, nm;
  int r = nx_get_gp(msg, &old);
  if (r != 0)
    return r;
  if ((r = nx_get_int32(msg, &nout)) != 0 ||
      (r = nx_get_int32(msg, &nended)) != 0 ||
      (r = nx_get_int32(msg, &dups)) != 0 ||
      (r = nx_get_int32(msg, &ns)) != 0) {
    nx_gp_release(&old);
    return r;
  }
  struct fm_queue *q = queue_new();
  if (q == NULL) {
    nx_gp_release(&old);
    return FM_ENOMEM;
  }
  q->nout = nout;
  q->nended = nended;
  q->dups = dups > 0 ? dups : 0;
  for (int32_t i = 0; i < ns && r == 0; i++) {
    uint64_t a, b, next, sq;
    int32_t np;
    int8_t kind;
    if ((r = nx_get_uint64(msg, &a)) || (r = nx_get_uint64(msg, &b)) ||
        (r = nx_get_uint64(msg, &next)) || (r = nx_get_int32(msg, &np)))
      break;
    struct fm_sender *s = sender_find(q, a, b, 1);
    if (s == NULL) {
      r = FM_ENOMEM;
      break;
    }
    s->next_seq = next;
    for (int32_t j = 0; j < np && r == 0; j++) {
      nx_buffer_t *nb = blob_get(msg, &kind, &a, &b, &sq);
      if (nb == NULL)
        r = NX_EPROTO;
      else
        queue_accept(q, nb, kind, a, b, sq);
    }
  }
  if (r == 0)
    r = nx_get_int32(msg, &nm);
  for (int32_t j = 0; r == 0 && j < nm; j++) {
    uint64_t a, b, sq;
    int8_t kind;
    nx_buffer_t *nb = blob_get(msg, &kind, &a, &b, &sq);
    struct fm_msg *m = nb ? calloc(1, sizeof(*m)) : NULL;
    if (m == NULL) {
      if (nb != NULL)
        nx_buffer_release(nb);
      r = nb ? FM_ENOMEM : NX_EPROTO;
      break;
    }
    m->buf = nb;
    m->seq = sq;
    m->end = kind == MSG_END;
    ready_append(q, m); /* already in order: no sequence check */
  }
  if (r == 0) {
    nx_buffer_t *b;
    r = nx_rsr_init(&b, &old, fm_g.h_moved, 64);
    if (r == 0 && (r = nx_put_gp(b, &q->self)) != 0)
      nx_buffer_release(b);
    else if (r == 0)
      r = nx_rsr_send(b);
  }
  nx_gp_release(&old);
  if (r != 0) {
    nx_mutex_lock(&q->m);
    queue_clear_locked(q);
    nx_mutex_unlock(&q->m);
    return r;
  }
  memset(port, 0, sizeof(*port));
  impl(port)->magic = FM_PORT_MAGIC;
  impl(port)->kind = FM_INPORT;
  impl(port)->ref = (uint64_t)(uintptr_t)q;
  return 0;
}

int fm_get_port(nx_buffer_t *msg, fm_port_t *port) {
  int r = need_init();
  if (r != 0)
    return r;
  if (msg == NULL || port == NULL)
    return FM_EINVAL;
  int8_t tag;
  if ((r = nx_get_int8(msg, &tag)) != 0)
    return r;
  if (tag == TAG_INPORT)
    return queue_unpack(msg, port);
  if (tag != TAG_OUTPORT)
    return FM_ETYPE;
  nx_gp_t g = NX_GP_NULL;
  uint64_t a, b, seq, gpi;
  int32_t ended;
  if ((r = nx_get_gp(msg, &g)) != 0)
    return r;
  if ((r = nx_get_uint64(msg, &a)) || (r = nx_get_uint64(msg, &b)) ||
      (r = nx_get_uint64(msg, &seq)) || (r = nx_get_int32(msg, &ended))) {
    nx_gp_release(&g);
    return r;
  }
  if ((r = gp_intern(&g, &gpi)) != 0)
    return r;
  writer_arrive(a, b, seq);
  memset(port, 0, sizeof(*port));
  struct fm_port_impl *p = impl(port);
  p->magic = FM_PORT_MAGIC;
  p->kind = FM_OUTPORT;
  p->ref = gpi;
  p->sid_a = a;
  p->sid_b = b;
  p->seq = seq;
  p->ended = ended != 0;
  return 0;
}

/* ---- one-value messages ------------------------------------------------ */

static int send_values(fm_port_t *out, int type, const void *v, size_t n) {
  nx_buffer_t *b;
  if (v == NULL && n > 0)
    return FM_EINVAL;
  int r = fm_send_begin(out, 32 + n * fm_type_size(type), &b);
  if (r != 0)
    return r;
  if ((r = fm_put_values(b, type, v, n)) != 0) {
    fm_send_abort(out, b);
    return r;
  }
  return fm_send_end(b);
}

static int receive_values(fm_port_t *in, int type, void *v, size_t n) {
  nx_buffer_t *b;
  if (v == NULL && n > 0)
    return FM_EINVAL;
  int r = fmi_receive_into(in, type, v, n, &b);
  if (r != 0)
    return r;
  r = fm_get_values(b, type, v, n);
  fm_msg_free(b);
  return r;
}

int fm_send_int32(fm_port_t *out, int32_t v) {
  return send_values(out, FM_TYPE_INT32, &v, 1);
}
int fm_send_int32_array(fm_port_t *out, const int32_t *v, size_t n) {
  return send_values(out, FM_TYPE_INT32, v, n);
}
int fm_send_double_array(fm_port_t *out, const double *v, size_t n) {
  return send_values(out, FM_TYPE_DOUBLE, v, n);
}
int fm_receive_int32(fm_port_t *in, int32_t *v) {
  return receive_values(in, FM_TYPE_INT32, v, 1);
}
int fm_receive_int32_array(fm_port_t *in, int32_t *v, size_t n) {
  return receive_values(in, FM_TYPE_INT32, v, n);
}
int fm_receive_double_array(fm_port_t *in, double *v, size_t n) {
  return receive_values(in, FM_TYPE_DOUBLE, v, n);
}

/* ---- lifecycle --------------------------------------------------------- */

static int ctx_is_child(int *argc, char ***argv) {
  if (argc != NULL && argv != NULL && *argv != NULL) {
    for (int i = 1; i < *argc; i++)
      if ((*argv)[i] != NULL && strcmp((*argv)[i], "--fm-child") == 0)
        return 1;
    return 0;
  }
  /* Fortran passes no argv: read our own command line. */
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (f == NULL)
    return 0;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
    if (strcmp(buf + i, "--fm-child") == 0)
      return 1;
  return 0;
}

static void cleanup(void) {
  nx_mutex_lock(&fm_g.m);
  struct fm_queue *qs = fm_g.queues;
  nx_mutex_unlock(&fm_g.m);
  for (struct fm_queue *q = qs; q != NULL; q = q->all_next) {
    nx_mutex_lock(&q->m);
    queue_clear_locked(q);
    q->magic = FM_QUEUE_DEAD;
    nx_gp_release(&q->self);
    nx_gp_release(&q->fwd);
    nx_cond_broadcast(&q->c);
    nx_mutex_unlock(&q->m);
  }
  for (size_t i = 0; i < fm_g.ngps; i++) {
    nx_gp_release(fm_g.gps[i]);
    free(fm_g.gps[i]);
  }
  free(fm_g.gps);
  fm_g.gps = NULL;
  fm_g.ngps = fm_g.capgps = 0;
  for (size_t i = 0; i < fm_g.nretired; i++) {
    nx_gp_release(fm_g.retired[i]);
    free(fm_g.retired[i]);
  }
  free(fm_g.retired);
  fm_g.retired = NULL;
  fm_g.nretired = fm_g.capretired = 0;
}

static void free_queues(void) {
  struct fm_queue *q = fm_g.queues;
  fm_g.queues = NULL;
  while (q != NULL) {
    struct fm_queue *n = q->all_next;
    nx_cond_destroy(&q->c);
    nx_mutex_destroy(&q->m);
    pthread_mutex_destroy(&q->pl);
    free(q);
    q = n;
  }
  free(fm_g.ended);
  fm_g.ended = NULL;
  fm_g.nended = fm_g.capended = 0;
  free(fm_g.deadl);
  fm_g.deadl = NULL;
  fm_g.ndead = fm_g.capdead = 0;
}

int fm_init(int *argc, char ***argv) {
  if (__atomic_load_n(&fm_g.init, __ATOMIC_ACQUIRE) > 0) {
    __atomic_add_fetch(&fm_g.init, 1, __ATOMIC_ACQ_REL);
    return nx_init(argc, argv) < 0 ? NX_EINVAL : 0;
  }
  int r = nx_init(argc, argv);
  if (r != 0)
    return r;
  nx_mutex_init(&fm_g.m);
  atomic_store(&fm_g.dead, 0);
  atomic_store(&fm_g.forwarding, 0);
  fm_g.h_enq = nx_handler_id("fm.enq");
  fm_g.h_fwd = nx_handler_id("fm.fwd");
  fm_g.h_moved = nx_handler_id("fm.moved");
  fm_g.h_run = nx_handler_id("fm.run");
  fm_g.h_done = nx_handler_id("fm.done");
  ssize_t n = readlink("/proc/self/exe", fm_g.exe, sizeof(fm_g.exe) - 1);
  fm_g.exe[n > 0 ? n : 0] = '\0';
  if ((r = fm_register_handlers(nx_context_self())) != 0) {
    nx_finalize();
    return r;
  }
  /* Beside the program's own callback, if it installed one. */
  int h = nx_error_cb_add(on_error, NULL);
  fm_g.error_cb = h > 0 ? h : 0;
  __atomic_store_n(&fm_g.init, 1, __ATOMIC_RELEASE);
  if (ctx_is_child(argc, argv)) {
    /* A process context started by a process block: serve its process
     * calls until the block's end destroys it, then leave. */
    fm_g.child = 1;
    r = nx_context_serve();
    fm_finalize();
    exit(r == 0 ? 0 : 1);
  }
  return 0;
}

int fm_finalize(void) {
  if (__atomic_load_n(&fm_g.init, __ATOMIC_ACQUIRE) <= 0)
    return FM_ENOTINIT;
  if (__atomic_sub_fetch(&fm_g.init, 1, __ATOMIC_ACQ_REL) > 0)
    return nx_finalize();
  if (fm_g.error_cb > 0)
    nx_error_cb_remove(fm_g.error_cb);
  fm_g.error_cb = 0;
  fm_process_data_free(); /* the main program's */
  cleanup();
  int r = nx_finalize();
  free_queues();
  writers_free();
  fm_blocks_free();
  nx_mutex_destroy(&fm_g.m);
  return r;
}
