/* The ledger (ledger.h): per peer process, the accepted RSRs it has not yet
 * confirmed handled, oldest first, and the count of its RSRs handled here.
 * A confirmation is a count (the peer has handled its first N RSRs from
 * here), so an entry needs no number on the wire: the oldest ones settle.
 * Counts are kept per route generation (ledger.h): when a route fails, the
 * RSRs it carried are settled by their own count, which the RSRs sent on
 * its successor do not swell, and what that count leaves is reported. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "modules/dlist.h"
#include "rsr/order.h"
#include "rsr/stages.h"
#include "buffers/frame.h"
#include "base/trace.h"
#include "services/ledger.h"
#include "threads/nxi_thread.h"
#include "nxu_time.h"

/* Peers are found by process id in a fixed open-addressed table: entries
 * are added under `table_lock` and never removed before nxi_ledger_finalize,
 * so a lookup needs no lock. */
#define SLOTS 4096u
/* A lost peer's last answers are waited for this long (nxi_ledger_lost). */
#define LOST_GRACE_NS (50 * 1000 * 1000ull)
/* The driver's tick asks a peer about RSRs unconfirmed for this long. */
#define QUIET_NS (200 * 1000 * 1000ull)
/* An unanswered request is sent again after this long. */
#define ASK_AGAIN_NS (200 * 1000 * 1000ull)
/* After a route failed: the fence question waits this long (for what the
 * old route still delivers), and without an answer its RSRs are reported
 * this long after the failure. */
#define FENCE_WAIT_NS (100 * 1000 * 1000ull)
#define FENCE_GIVE_UP_NS (2000 * 1000 * 1000ull)
#define GENS NXI_FRAME_GENS

struct entry {
  uint64_t context;
  uint32_t handler;
  uint8_t voided; /* VOIDED (reported, or never accepted) or SETTLED */
  uint8_t gen;    /* of the route it was sent on */
  uint16_t unused;
};

struct nxi_peer {
  uint32_t proc;
  struct nxi_peer *next_sender; /* the list of peers RSRs went to */
  atomic_int lock;              /* peer_lock */
  /* Sending: entries [base, base + count) in a ring of `cap`. */
  struct entry *ring;
  size_t head, count, cap;
  uint64_t base; /* sequence of the oldest entry */
  /* Entries that are closed or of another generation than cur_gen, that
   * of the latest entry: while there are none, a count settles the oldest
   * entries at once (nxi_ledger_confirm), without a look at each. */
  size_t foreign;
  unsigned cur_gen;
  uint64_t confirmed[GENS]; /* entries settled by the peer's counts */
  uint64_t open[GENS];      /* entries neither voided nor settled */
  uint64_t pending;         /* their sum */
  uint64_t asked_at;        /* `pending` when last asked */
  uint64_t ask_mark; /* `pending` from which a note asks (ask_mark_set) */
  uint64_t ask_ns;   /* when last asked, 0 if no request is out */
  /* Tracing: the clock the last question carried (0: none out), which
   * its answer must echo for a clock offset to be taken from it; and
   * whether one was asked at the first RSR to this peer. */
  uint64_t probe_at;
  int probed;
  uint64_t silent_since;  /* first question since its last answer, or 0 */
  uint64_t pending_since; /* the tick first saw RSRs unconfirmed, or 0 */
  int listed;             /* on the `senders` list */
  /* Listed, and neither lost nor closed: a note's common case (the flags
   * that make it 0 are set under the peer lock, and so is it). */
  int quick;
  int dying; /* lost: its entries are reported at `lost_at` */
  int lost_status;
  uint64_t lost_at;
  int dead;   /* lost: its entries were reported */
  int closed; /* nx_finalize reported its entries */
  /* Generations whose route failed (a bit each), and when to ask about
   * them with a fence and when to give up on the answer. */
  unsigned suspect;
  int suspect_status;
  uint64_t fence_at, fence_asked, give_up_at;
  int ack_owed; /* it told its final counts: the tick acknowledges them */
  struct nxi_dlist *dl; /* a list that reaches it (a reference) */
  /* Receiving: its RSRs handled here, and the counts it was last told. */
  atomic_uint_fast64_t handled[GENS];
  uint64_t told[GENS];
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nxi_peer *_Atomic table[SLOTS];

/* Strays: the counts of RSRs handled here from origins that are not (yet)
 * peers. An RSR's `source` is the sender's word only: a peer that forges
 * a new one per frame must not fill `table`, which is never emptied, and
 * leave no room for the processes that really talk to this one (issue
 * 44). An origin becomes a peer when this process sends to it or it asks
 * for its counts (peer_add), and takes its stray counts
 * along; until then its counts stay here, in one of STRAY_WAYS places of
 * the set its id picks, the set's oldest making way for a new origin. */
#define STRAYS 1024u
#define STRAY_WAYS 8u /* an origin's place: one of 8 in its set */
struct stray {
  uint32_t proc;
  uint64_t handled[NXI_FRAME_GENS];
  uint64_t told[NXI_FRAME_GENS]; /* as a peer's (nxi_ledger_untold) */
  struct nxi_dlist *dl; /* a list that names it (a reference), or NULL */
};
static pthread_mutex_t stray_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stray strays[STRAYS];
static uint8_t stray_next[STRAYS / STRAY_WAYS]; /* each set's oldest */
static atomic_int full_logged;
/* Peers this process sent RSRs to: pushed once, never removed before
 * nxi_ledger_finalize. */
static struct nxi_peer *_Atomic senders;
/* What confirm.c registered (ledger.h), or NULL. */
static const struct nxi_ledger_stages *_Atomic stages;

void nxi_ledger_stages_set(const struct nxi_ledger_stages *s) {
  atomic_store(&stages, s);
}

static const struct nxi_ledger_stages *st(void) {
  return atomic_load_explicit(&stages, memory_order_acquire);
}

static unsigned slot_of(uint32_t proc) { return (proc * 2654435761u) % SLOTS; }

/* A peer's lock: a word taken by exchange, spun on, and yielded between
 * tries after a while. Every hold is a few field updates (a report lets it
 * go first), and a pthread mutex pair was a third of what entering an RSR
 * cost (58 of 170 instructions, callgrind). Not reentrant. */
static __attribute__((noinline)) void peer_lock_wait(struct nxi_peer *p) {
  for (unsigned i = 0;
       atomic_exchange_explicit(&p->lock, 1, memory_order_acquire) != 0;)
    while (atomic_load_explicit(&p->lock, memory_order_relaxed) != 0) {
      if (++i < 100)
        nxi_cpu_relax();
      else
        sched_yield(); /* its holder may be off the CPU */
    }
}

/* The spinning apart (peer_lock_wait), so that a lock taken at once costs
 * its exchange and its test. */
static inline void peer_lock(struct nxi_peer *p) {
  if (atomic_exchange_explicit(&p->lock, 1, memory_order_acquire) != 0)
    peer_lock_wait(p);
}

static inline void peer_unlock(struct nxi_peer *p) {
  atomic_store_explicit(&p->lock, 0, memory_order_release);
}

/* Peer lock held: it is lost, being lost, or closed (nothing more is
 * entered for it, nor asked of it). */
static inline int peer_gone(const struct nxi_peer *p) {
  return p->dead | p->dying | p->closed;
}

/* Peer lock held: `pending` from which a note asks again, a window past
 * the last request; at once, while tracing, until a first question has
 * measured the clocks (nxi_ledger_note). */
static void ask_mark_set(struct nxi_peer *p) {
  p->ask_mark =
      nxi_tracing() && !p->probed ? 0 : p->asked_at + NXI_LEDGER_WINDOW;
}

/* The peer of `proc`, or NULL: one slot read in the common case. */
static inline struct nxi_peer *peer_find(uint32_t proc) {
  unsigned s = slot_of(proc);
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p =
        atomic_load_explicit(&table[(s + i) % SLOTS], memory_order_acquire);
    if (p == NULL || p->proc == proc)
      return p;
  }
  return NULL;
}

/* The first of the STRAY_WAYS places where `proc`'s counts may be. */
static unsigned stray_set(uint32_t proc) {
  return (proc * 2654435761u >> 16) % (STRAYS / STRAY_WAYS) * STRAY_WAYS;
}

/* stray_lock held: the stray entry of `proc`, or NULL. */
static struct stray *stray_find(uint32_t proc) {
  struct stray *set = &strays[stray_set(proc)];
  for (unsigned i = 0; proc != 0 && i < STRAY_WAYS; i++)
    if (set[i].proc == proc)
      return &set[i];
  return NULL;
}

/* A new peer takes its origin's stray counts. Its counts are only added
 * to after this: nxi_ledger_handled_from_peer looks for the peer under
 * stray_lock, so a count either finds the peer or is a stray taken here. */
static void adopt_strays(struct nxi_peer *p) {
  pthread_mutex_lock(&stray_lock);
  struct stray *s = stray_find(p->proc);
  struct nxi_dlist *dl = NULL;
  if (s != NULL) {
    peer_lock(p);
    for (unsigned g = 0; g < GENS; g++) {
      atomic_fetch_add(&p->handled[g], s->handled[g]);
      p->told[g] = s->told[g];
    }
    if (p->dl == NULL)
      p->dl = s->dl;
    else
      dl = s->dl;
    peer_unlock(p);
    memset(s, 0, sizeof(*s));
  }
  pthread_mutex_unlock(&stray_lock);
  if (dl != NULL)
    nxi_dlist_release(dl);
}

static struct nxi_peer *peer_add(uint32_t proc);

/* An RSR of generation `gen` from `origin`, which is no peer, ran here. */
static __attribute__((noinline)) void stray_handled(uint32_t origin,
                                                    unsigned gen) {
  struct nxi_dlist *evicted = NULL;
  int added = 0;
  pthread_mutex_lock(&stray_lock);
  struct nxi_peer *p = peer_find(origin);
  if (p != NULL) {
    atomic_fetch_add_explicit(&p->handled[gen], 1, memory_order_relaxed);
  } else {
    struct stray *s = stray_find(origin);
    if (s == NULL) {
      unsigned set = stray_set(origin);
      uint8_t *next = &stray_next[set / STRAY_WAYS];
      s = &strays[set + *next];
      *next = (uint8_t)((*next + 1) % STRAY_WAYS);
      evicted = s->dl;
      memset(s, 0, sizeof(*s));
      s->proc = origin;
      added = 1;
    }
    s->handled[gen]++;
  }
  pthread_mutex_unlock(&stray_lock);
  /* Not under stray_lock: these take dlist.c's. */
  if (evicted != NULL)
    nxi_dlist_release(evicted);
  if (added) {
    /* A way back to it, as a new peer gets one (peer_add): the program
     * may release every gp of that process before nx_finalize. */
    struct nxi_dlist *dl = nxi_dlist_of_proc(origin);
    if (dl != NULL) {
      nxi_ledger_known(origin, dl);
      nxi_dlist_release(dl);
    }
  }
}

/* The peer `proc`, created if absent; NULL if the table is full (said
 * once: its RSRs then go unrecorded, as before the ledger). */
static struct nxi_peer *peer_add(uint32_t proc) {
  struct nxi_peer *known = peer_find(proc);
  if (known != NULL)
    return known;
  unsigned s = slot_of(proc);
  pthread_mutex_lock(&table_lock);
  struct nxi_peer *found = NULL;
  unsigned i;
  for (i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[(s + i) % SLOTS]);
    if (p == NULL)
      break;
    if (p->proc == proc) {
      found = p;
      break;
    }
  }
  int created = 0;
  if (found == NULL && i < SLOTS &&
      (found = calloc(1, sizeof(*found))) != NULL) {
    found->proc = proc;
    ask_mark_set(found);
    atomic_store_explicit(&table[(s + i) % SLOTS], found, memory_order_release);
    created = 1;
  }
  pthread_mutex_unlock(&table_lock);
  if (created) {
    adopt_strays(found);
    /* A way back to it, kept until finalize: the program may release
     * every gp of a process that sends here before nx_finalize, which
     * must still tell it what ran here (else it reports those RSRs). */
    struct nxi_dlist *dl = nxi_dlist_of_proc(proc);
    if (dl != NULL) {
      peer_lock(found);
      if (found->dl == NULL) {
        found->dl = dl;
        dl = NULL;
      }
      peer_unlock(found);
      if (dl != NULL)
        nxi_dlist_release(dl);
    }
  }
  if (found == NULL && atomic_exchange(&full_logged, 1) == 0)
    nxi_log(0, NULL,
            "ledger: no room for process %#x (more than %u peers or no "
            "memory): its RSRs are not confirmed",
            proc, SLOTS);
  return found;
}

static void wake(void) {
  const struct nxi_ledger_stages *s = st();
  if (s != NULL)
    s->wake();
}

/* Peer lock held. Removes the oldest entry, a closed one. */
static void pop(struct nxi_peer *p) {
  p->head = (p->head + 1) & (p->cap - 1);
  p->count--;
  p->base++;
  p->foreign--;
}

/* The ring's capacity is a power of two (grow): a mask, not a division. */
static struct entry *at(struct nxi_peer *p, size_t i) {
  return &p->ring[(p->head + i) & (p->cap - 1)];
}

enum { OPEN = 0, VOIDED = 1, SETTLED = 2 };

/* Peer lock held. Entry `e` leaves the open ones (`how`: VOIDED or
 * SETTLED); the closed ones at the front leave the ring. */
static void close_entry(struct nxi_peer *p, struct entry *e, int how) {
  if (e->gen == p->cur_gen)
    p->foreign++; /* open and of cur_gen until now */
  e->voided = (uint8_t)how;
  p->open[e->gen]--;
  p->pending--;
}

static void pop_closed(struct nxi_peer *p) {
  while (p->count > 0 && at(p, 0)->voided)
    pop(p);
}

/* Peer lock held. Room for one more entry. */
static int grow(struct nxi_peer *p) {
  if (p->count < p->cap)
    return 0;
  size_t cap = p->cap ? p->cap * 2 : 64;
  struct entry *r = malloc(cap * sizeof(*r));
  if (r == NULL)
    return NX_ENOMEM;
  for (size_t i = 0; i < p->count; i++)
    r[i] = *at(p, i);
  free(p->ring);
  p->ring = r;
  p->cap = cap;
  p->head = 0;
  return 0;
}

/* Peer lock held. Entries of generation `gen` follow (a route replaced
 * another): the entries foreign to it are counted again. */
static __attribute__((noinline)) void set_cur_gen(struct nxi_peer *p,
                                                  unsigned gen) {
  p->cur_gen = gen;
  p->foreign = 0;
  for (size_t i = 0; i < p->count; i++) {
    const struct entry *e = at(p, i);
    if (e->voided != OPEN || e->gen != gen)
      p->foreign++;
  }
}

/* Peer lock held: makes room in `p` for an entry of generation `gen` when
 * that is not the common case (its ring full, a new generation, its first
 * entry, or it is lost or closed). Returns 0 or NX_ENOMEM/NX_EPEERDEAD
 * (no entry is made). */
static __attribute__((noinline)) int note_room(struct nxi_peer *p,
                                               unsigned gen) {
  if (peer_gone(p))
    return NX_EPEERDEAD;
  if (grow(p) != 0)
    return NX_ENOMEM;
  if (gen != p->cur_gen)
    set_cur_gen(p, gen);
  if (!p->listed) {
    /* Its first entry: the tick looks at it from now on. */
    p->listed = 1;
    p->next_sender = atomic_load(&senders);
    while (!atomic_compare_exchange_weak(&senders, &p->next_sender, p))
      ;
  }
  p->quick = 1; /* not gone (above) */
  return 0;
}

/* Peer lock held, a window gathered since the last request: ask now, unless
 * a request is out and was sent less than ASK_AGAIN_NS ago (looked at once a
 * window). */
static __attribute__((noinline)) int ask_due(const struct nxi_peer *p) {
  return p->ask_ns == 0 || (p->pending % NXI_LEDGER_WINDOW == 0 &&
                            nxu_now_ns() - p->ask_ns > ASK_AGAIN_NS);
}

int nxi_ledger_note(struct nx_buffer *b, unsigned gen) {
  b->peer = NULL;
  gen &= GENS - 1;
  b->gen = (uint8_t)gen;
  uint32_t proc = nxi_ctxid_proc(b->context);
  if (proc == nxi_rt.proc_id || proc == 0)
    return 0;
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL && (p = peer_add(proc)) == NULL)
    return 0;
  peer_lock(p);
  if ((p->count >= p->cap || gen != p->cur_gen || !p->quick) &&
      note_room(p, gen) != 0) {
    peer_unlock(p);
    return 0;
  }
  *at(p, p->count) =
      (struct entry){b->context, b->handler, OPEN, (uint8_t)gen, 0};
  b->seq = p->base + p->count;
  b->peer = p;
  p->count++;
  p->open[gen]++;
  p->pending++;
  if (p->dl == NULL && b->dl != NULL) {
    nxi_dlist_retain(b->dl);
    p->dl = b->dl;
  }
  /* Ask once a window has gathered since the last request. */
  int ask = p->pending >= p->ask_mark && ask_due(p);
  if (ask) {
    p->probed = 1; /* the first question measures the clocks at start */
    ask_mark_set(p);
  }
  peer_unlock(p);
  return ask;
}

int nxi_ledger_void(struct nx_buffer *b) {
  struct nxi_peer *p = b->peer;
  if (p == NULL)
    return 1;
  b->peer = NULL;
  int open = 0;
  peer_lock(p);
  if (p->dead || p->closed) {
    /* Reported with the rest of the peer's entries already. */
  } else if (b->seq >= p->base && b->seq - p->base < p->count &&
             at(p, (size_t)(b->seq - p->base))->voided == OPEN) {
    close_entry(p, at(p, (size_t)(b->seq - p->base)), VOIDED);
    open = 1;
  } else if (b->seq < p->base ||
             (b->seq - p->base < p->count &&
              at(p, (size_t)(b->seq - p->base))->voided == SETTLED)) {
    /* Settled already by a count that did not include it (it never
     * arrived): that count covered the oldest entry of its generation
     * still open, which is settled instead. */
    for (size_t i = 0; i < p->count; i++) {
      struct entry *e = at(p, i);
      if (e->voided == OPEN && e->gen == b->gen) {
        close_entry(p, e, SETTLED);
        break;
      }
    }
    open = 1;
  }
  pop_closed(p);
  int settled = p->pending == 0;
  peer_unlock(p);
  if (settled)
    wake();
  return open;
}

/* Peer lock held: the generations with open entries. */
static unsigned open_gens(const struct nxi_peer *p) {
  unsigned gens = 0;
  for (unsigned g = 0; g < GENS; g++)
    if (p->open[g] > 0)
      gens |= 1u << g;
  return gens;
}

/* Asks `p` about `gens` (all with open entries if 0). */
static void ask(struct nxi_peer *p, unsigned gens, int fence) {
  const struct nxi_ledger_stages *s = st();
  if (s == NULL || p == NULL)
    return;
  peer_lock(p);
  struct nxi_dlist *dl = p->dl;
  if (dl != NULL)
    nxi_dlist_retain(dl);
  if (gens == 0)
    gens = open_gens(p);
  if (!fence) {
    p->asked_at = p->pending;
    p->ask_ns = nxu_now_ns();
    ask_mark_set(p);
  }
  peer_unlock(p);
  if (dl == NULL)
    return;
  if (gens != 0)
    s->ask(p->proc, dl, gens, fence);
  nxi_dlist_release(dl);
}

void nxi_ledger_ask(struct nxi_peer *p) { ask(p, 0, 0); }

void nxi_ledger_asked(uint32_t proc, uint64_t clock) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return;
  peer_lock(p);
  if (p->silent_since == 0)
    p->silent_since = nxu_now_ns();
  if (clock != 0)
    p->probe_at = clock;
  peer_unlock(p);
}

/* An answer echoed `asked` (this process's clock when it asked) and gave
 * `theirs` (the peer's when it answered): if it answers the question the
 * peer was last asked, the offset of the peer's clock to this one's goes
 * to the trace, NTP's way: off by at most half the round trip. */
static __attribute__((noinline, cold)) void clock_sample(struct nxi_peer *p,
                                                         uint32_t proc,
                                                         uint64_t asked,
                                                         uint64_t theirs) {
  uint64_t now = nxu_now_ns();
  peer_lock(p);
  int mine = asked != 0 && asked == p->probe_at;
  if (mine)
    p->probe_at = 0;
  peer_unlock(p);
  if (!mine || theirs == 0 || now < asked)
    return;
  uint64_t rtt = now - asked;
  int64_t off = (int64_t)(theirs - asked - rtt / 2);
  nxi_trace_event(NXT_OFFSET, 0, (uint64_t)proc << 32, 0, 0, 0xff, 0,
                  rtt >= UINT32_MAX ? UINT32_MAX : (uint32_t)rtt,
                  (uint64_t)off);
}

int nxi_ledger_silent_for(uint32_t proc, uint64_t ns) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return 0;
  peer_lock(p);
  int silent = p->silent_since != 0 && nxu_now_ns() - p->silent_since >= ns;
  peer_unlock(p);
  return silent;
}

uint32_t nxi_ledger_tell_id;

void nxi_ledger_gone(struct nx_buffer *b) {
  const struct nxi_ledger_stages *s = st();
  if (s != NULL)
    s->gone(b);
}

int nxi_ledger_take_tell(struct nx_buffer *b) {
  /* proc, generations (a bit each), fence, a count per generation, then
   * the asker's clock echoed and the peer's (confirm.c). */
  uint32_t proc;
  uint8_t gens, fence;
  uint64_t counts[GENS], asked = 0, theirs = 0;
  int ok = nx_get_uint32(b, &proc) == 0 && nx_get_uint8(b, &gens) == 0 &&
           nx_get_uint8(b, &fence) == 0;
  /* A process tells its own counts: one in another's name is refused. */
  ok = ok && proc != 0 && proc == nxi_ctxid_proc(b->source);
  for (unsigned g = 0; ok && g < GENS; g++)
    if (gens & 1u << g)
      ok = nx_get_uint64(b, &counts[g]) == 0;
  ok = ok && nx_get_uint64(b, &asked) == 0 && nx_get_uint64(b, &theirs) == 0;
  if (!ok) {
    b->pos = 0; /* its handler refuses it, and counts it */
    return 0;
  }
  struct nxi_peer *p = peer_find(proc);
  if (p != NULL) {
    peer_lock(p);
    p->silent_since = 0;
    peer_unlock(p);
    if (asked != 0 && nxi_tracing())
      clock_sample(p, proc, asked, theirs);
  }
  for (unsigned g = 0; g < GENS; g++)
    if (gens & 1u << g)
      nxi_ledger_confirm(proc, g, counts[g]);
  if (fence == 1)
    nxi_ledger_fenced(proc, gens);
  if (fence == NXI_LEDGER_TELL_FINAL) {
    if (p != NULL) {
      peer_lock(p);
      p->ack_owed = 1;
      peer_unlock(p);
      atomic_store_explicit(&nxi_stage_tick_at, 0, memory_order_relaxed);
    }
  }
  nxi_buffer_handler_done(b);
  return 1;
}

static void report_dead(struct nxi_peer *p, int status);
static void report_gens(struct nxi_peer *p, unsigned gens, int status);

/* Ordered RSRs waiting to be sent again (nxi_ledger_resend), in the order
 * they failed, linked through held_next. */
static pthread_mutex_t resend_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nx_buffer *resend_head, **resend_tail = &resend_head;
static atomic_uint_fast64_t resend_count;

int nxi_ledger_resend(struct nx_buffer *b) {
  if (st() == NULL || nxi_ledger_is_lost(nxi_ctxid_proc(b->context)))
    return 0;
  pthread_mutex_lock(&resend_lock);
  b->held_next = NULL;
  *resend_tail = b;
  resend_tail = &b->held_next;
  atomic_fetch_add(&resend_count, 1);
  pthread_mutex_unlock(&resend_lock);
  atomic_store_explicit(&nxi_stage_tick_at, 0, memory_order_relaxed);
  wake();
  return 1;
}

/* The tick's part: each waiting RSR once, in order; one the module cannot
 * take yet stops the round (what follows it in its stream must wait). */
static void resend_run(void) {
  const struct nxi_ledger_stages *s = st();
  int (*fn)(struct nx_buffer *) = s != NULL ? s->resend : NULL;
  for (;;) {
    pthread_mutex_lock(&resend_lock);
    struct nx_buffer *b = resend_head;
    if (b != NULL && (resend_head = b->held_next) == NULL)
      resend_tail = &resend_head;
    pthread_mutex_unlock(&resend_lock);
    if (b == NULL)
      return;
    b->held_next = NULL;
    if (fn != NULL && fn(b) == NX_EAGAIN) {
      pthread_mutex_lock(&resend_lock);
      if ((b->held_next = resend_head) == NULL)
        resend_tail = &b->held_next;
      resend_head = b;
      pthread_mutex_unlock(&resend_lock);
      return;
    }
    if (fn == NULL) {
      nxi_drop(NX_EPEERDEAD, b->context, b->handler);
      nxi_buffer_free(b);
    }
    atomic_fetch_sub(&resend_count, 1);
  }
}

void nxi_ledger_tick_run(uint64_t now) {
  atomic_store_explicit(&nxi_stage_tick_at, now + NXI_LEDGER_TICK_NS,
                        memory_order_relaxed);
  if (atomic_load_explicit(&resend_count, memory_order_relaxed) != 0) {
    resend_run();
    if (atomic_load(&resend_count) != 0) /* a full queue: soon again */
      atomic_store_explicit(&nxi_stage_tick_at, now + 1000 * 1000,
                            memory_order_relaxed);
  }
  for (struct nxi_peer *p = atomic_load(&senders); p != NULL;
       p = p->next_sender) {
    peer_lock(p);
    /* Only a peer whose RSRs stayed unconfirmed for QUIET_NS: right after
     * a send, a peer that just died may not be known dead yet, and a send
     * to it can hang inside a backend (libfabric's shm, a killed peer
     * holding a lock in the shared region). */
    if (p->dying && now >= p->lost_at)
      report_dead(p, p->lost_status);
    else if (p->dying)
      atomic_store_explicit(&nxi_stage_tick_at, p->lost_at,
                            memory_order_relaxed);
    /* A failed route's RSRs: a fence once what it still carried has had
     * time to arrive, and a report when no answer comes. */
    unsigned fence = 0;
    if (p->suspect != 0 && !p->dead && !p->dying) {
      if (now >= p->give_up_at) {
        report_gens(p, p->suspect, p->suspect_status);
      } else if (now >= p->fence_at &&
                 (p->fence_asked == 0 || now - p->fence_asked > ASK_AGAIN_NS)) {
        fence = p->suspect;
        p->fence_asked = now;
      }
    }
    if (p->pending == 0 || p->dead)
      p->pending_since = 0;
    else if (p->pending_since == 0)
      p->pending_since = now;
    int due = p->pending > 0 && !p->dead && !p->dying &&
              now - p->pending_since >= QUIET_NS &&
              (p->ask_ns == 0 || now - p->ask_ns > ASK_AGAIN_NS);
    int ack = p->ack_owed && p->dl != NULL;
    struct nxi_dlist *dl = ack ? p->dl : NULL;
    if (ack) {
      p->ack_owed = 0;
      nxi_dlist_retain(dl);
    }
    peer_unlock(p);
    if (fence)
      ask(p, fence, 1);
    if (due)
      nxi_ledger_ask(p);
    if (ack) {
      const struct nxi_ledger_stages *s = st();
      if (s != NULL)
        s->ack(p->proc, dl);
      nxi_dlist_release(dl);
    }
  }
}

void nxi_ledger_confirm(uint32_t proc, unsigned gen, uint64_t count) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL || gen >= GENS)
    return;
  peer_lock(p);
  p->ask_ns = 0;
  if (p->foreign == 0 && gen == p->cur_gen) {
    /* Every entry open and of that generation: the oldest settle at once. */
    uint64_t k = count > p->confirmed[gen] ? count - p->confirmed[gen] : 0;
    if (k > p->count)
      k = p->count;
    p->head = (p->head + (size_t)k) & (p->cap - 1);
    p->count -= (size_t)k;
    p->base += k;
    p->open[gen] -= k;
    p->pending -= k;
    p->confirmed[gen] += k;
  }
  /* Else the oldest open entries of that generation; those of others (a
   * failed route's, waiting for their fence) are stepped over. */
  for (size_t i = 0;
       i < p->count && p->confirmed[gen] < count && p->open[gen] > 0; i++) {
    struct entry *e = at(p, i);
    if (!e->voided && e->gen == gen) {
      close_entry(p, e, SETTLED);
      p->confirmed[gen]++;
    }
  }
  pop_closed(p);
  p->asked_at = p->pending < p->asked_at ? p->pending : p->asked_at;
  ask_mark_set(p);
  int settled = p->pending == 0;
  peer_unlock(p);
  if (settled)
    wake();
}

void nxi_ledger_fenced(uint32_t proc, unsigned gens) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return;
  peer_lock(p);
  gens &= p->suspect;
  if (gens != 0 && !p->dead && !p->dying)
    report_gens(p, gens, p->suspect_status);
  peer_unlock(p);
}

void nxi_ledger_rerouted(uint32_t proc, unsigned gen, int status) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL || gen >= GENS)
    return;
  peer_lock(p);
  if (!p->dead && !p->dying && !p->closed && p->open[gen] > 0) {
    uint64_t now = nxu_now_ns();
    if (p->suspect == 0) {
      p->fence_at = now + FENCE_WAIT_NS;
      p->give_up_at = now + FENCE_GIVE_UP_NS;
      p->fence_asked = 0;
    }
    p->suspect |= 1u << gen;
    p->suspect_status = status;
  }
  peer_unlock(p);
}

/* Peer lock held. Moves its open entries into a new array for reporting
 * (the count in *n) and empties its ring. */
static struct entry *take_open(struct nxi_peer *p, size_t *n) {
  struct entry *out = p->pending ? malloc(p->pending * sizeof(*out)) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < p->count; i++) {
    struct entry *e = at(p, i);
    if (!e->voided && out != NULL)
      out[k++] = *e;
  }
  if (out == NULL && p->pending > 0)
    k = 0; /* no memory: reported below as a count */
  p->base += p->count;
  p->head = p->count = p->foreign = 0;
  for (unsigned g = 0; g < GENS; g++)
    p->open[g] = 0;
  p->suspect = 0;
  *n = k;
  return out;
}

/* Reports the entries taken from a peer (each with `status`); `missing`
 * more could not be listed for want of memory and are reported once, for
 * the whole process. */
static void report(uint32_t proc, struct entry *e, size_t n, uint64_t missing,
                   int status) {
  for (size_t i = 0; i < n; i++)
    nxi_drop(status, e[i].context, e[i].handler);
  if (missing > 0)
    nxi_drop(status, nxi_ctxid(proc, 0), 0);
  free(e);
}

/* Peer lock held, released while it reports `total` entries of `p` (the
 * first `n` listed in `e`, which it frees) and wakes flushing threads. */
static void report_unlocked(struct nxi_peer *p, struct entry *e, size_t n,
                            uint64_t total, int status) {
  peer_unlock(p);
  if (total > 0)
    report(p->proc, e, n, total - n, status);
  else
    free(e);
  wake();
  peer_lock(p);
}

/* Peer lock held (released while it reports): reports the open entries of
 * generations `gens`, lost with their route. */
static void report_gens(struct nxi_peer *p, unsigned gens, int status) {
  p->suspect &= ~gens;
  uint64_t n = 0;
  for (unsigned g = 0; g < GENS; g++)
    if (gens & 1u << g)
      n += p->open[g];
  struct entry *out = n > 0 ? malloc(n * sizeof(*out)) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < p->count; i++) {
    struct entry *e = at(p, i);
    if (!e->voided && (gens & 1u << e->gen)) {
      if (out != NULL)
        out[k++] = *e;
      close_entry(p, e, VOIDED);
    }
  }
  pop_closed(p);
  if (n > 0)
    nxi_log(1, NULL,
            "ledger: %llu RSR(s) to process %#x were sent on a route that "
            "failed and not confirmed handled: reported lost",
            (unsigned long long)n, (unsigned)p->proc);
  report_unlocked(p, out, k, n, status);
}

/* Peer lock held: reports what `p` left unconfirmed and marks it dead. */
static void report_dead(struct nxi_peer *p, int status) {
  p->dead = 1;
  p->dying = 0;
  p->quick = 0;
  uint64_t pending = p->pending;
  size_t n;
  struct entry *e = take_open(p, &n);
  p->pending = 0;
  report_unlocked(p, e, n, pending, status);
}

void nxi_ledger_lost(uint32_t proc, int status) {
  nxi_order_skip(proc); /* its ordered RSRs held here run, gaps and all */
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return;
  peer_lock(p);
  if (!p->dead && !p->dying) {
    /* Its last answers may still be on their way (over another of the
     * transport's connections than the one that closed): the driver's
     * tick reports what is still unconfirmed after LOST_GRACE_NS. */
    p->dying = 1;
    p->quick = 0;
    p->lost_status = status;
    p->lost_at = nxu_now_ns() + LOST_GRACE_NS;
    atomic_store_explicit(&nxi_stage_tick_at, 0, memory_order_relaxed);
  }
  peer_unlock(p);
  wake(); /* a finalizing process stops waiting for its acknowledgement */
}

void nxi_ledger_handled_from_peer(const struct nx_buffer *b) {
  uint32_t origin = nxi_ctxid_proc(b->source);
  uint16_t flags = b->hflags;
  unsigned gen = (flags >> NXI_FRAME_GEN_SHIFT) & (GENS - 1);
  /* Only a peer's counts have room for certain (strays, above). */
  struct nxi_peer *p = peer_find(origin);
  if (p == NULL) {
    stray_handled(origin, gen); /* a call apart: the peer's add saves none */
    return;
  }
  atomic_fetch_add_explicit(&p->handled[gen], 1, memory_order_relaxed);
}

uint64_t nxi_ledger_handled_from(uint32_t proc, unsigned gen) {
  if (gen >= GENS)
    return 0;
  struct nxi_peer *p = peer_find(proc);
  if (p != NULL)
    return atomic_load(&p->handled[gen]);
  pthread_mutex_lock(&stray_lock);
  struct stray *s = stray_find(proc);
  uint64_t n = s != NULL ? s->handled[gen] : 0;
  pthread_mutex_unlock(&stray_lock);
  return n;
}

int nxi_ledger_unsettled(uint32_t *procs, struct nxi_dlist **dls,
                         unsigned *gens, int max, uint64_t *pending) {
  int n = 0;
  uint64_t total = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    peer_lock(p);
    if (p->pending > 0) {
      total += p->pending;
      if (n < max && p->dl != NULL) {
        nxi_dlist_retain(p->dl);
        procs[n] = p->proc;
        gens[n] = open_gens(p);
        dls[n++] = p->dl;
      }
    }
    peer_unlock(p);
  }
  *pending = total + atomic_load(&resend_count);
  return n;
}

int nxi_ledger_probe_targets(uint32_t only, uint32_t *procs,
                             struct nxi_dlist **dls, int max) {
  int n = 0;
  for (unsigned i = 0; i < SLOTS && n < max; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL || (only != 0 && p->proc != only))
      continue;
    peer_lock(p);
    if (p->dl != NULL && !peer_gone(p)) {
      nxi_dlist_retain(p->dl);
      procs[n] = p->proc;
      dls[n++] = p->dl;
    }
    peer_unlock(p);
  }
  return n;
}

int nxi_ledger_probes_out(uint32_t only) {
  int n = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL || (only != 0 && p->proc != only))
      continue;
    peer_lock(p);
    n += p->probe_at != 0 && !peer_gone(p);
    peer_unlock(p);
  }
  return n;
}

int nxi_ledger_is_lost(uint32_t proc) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return 0;
  peer_lock(p);
  int lost = p->dead || p->dying;
  peer_unlock(p);
  return lost;
}

uint64_t nxi_ledger_pending_of(uint32_t proc) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL)
    return 0;
  peer_lock(p);
  uint64_t n = p->pending;
  peer_unlock(p);
  return n;
}

uint64_t nxi_ledger_report_all(int status) {
  uint64_t total = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    peer_lock(p);
    uint64_t pending = p->pending;
    size_t n;
    struct entry *e = take_open(p, &n);
    p->pending = 0;
    p->closed = 1;
    p->quick = 0;
    peer_unlock(p);
    total += pending;
    if (pending > 0)
      report(p->proc, e, n, pending - n, status);
    else
      free(e);
  }
  return total;
}

/* nxi_ledger_untold's part for strays: those whose counts grew and that a
 * list names (one that sent here, but was never sent to and never asked).
 * One no list names is marked told: nobody is there to tell. It takes no
 * room in the round, so a round returns none only when none is left to
 * tell (nxi_confirm_tell_all stops there). One pass under the lock finds
 * them (most places are empty: a lock pair per place cost every exiting
 * process a thousand of them per call); a list is looked up outside it. */
static int untold_strays(uint32_t *procs, unsigned *gens,
                         struct nxi_dlist **dls, int max) {
  struct {
    uint32_t proc;
    uint16_t at, grew;
  } bare[STRAYS]; /* grown, no list held: looked up below */
  _Static_assert(STRAYS <= 65536 && GENS <= 16, "bare[] holds a place");
  unsigned nbare = 0;
  int n = 0;
  pthread_mutex_lock(&stray_lock);
  for (unsigned i = 0; i < STRAYS && n < max; i++) {
    uint32_t proc = strays[i].proc;
    unsigned grew = 0;
    for (unsigned g = 0; proc != 0 && g < GENS; g++)
      if (strays[i].handled[g] > strays[i].told[g])
        grew |= 1u << g;
    if (grew == 0)
      continue;
    if (strays[i].dl == NULL) {
      bare[nbare].proc = proc;
      bare[nbare].at = (uint16_t)i;
      bare[nbare++].grew = (uint16_t)grew;
      continue;
    }
    nxi_dlist_retain(strays[i].dl);
    dls[n] = strays[i].dl;
    procs[n] = proc;
    gens[n++] = grew;
  }
  pthread_mutex_unlock(&stray_lock);
  for (unsigned k = 0; k < nbare; k++) {
    struct nxi_dlist *dl = nxi_dlist_of_proc(bare[k].proc);
    if (dl != NULL && n < max) {
      procs[n] = bare[k].proc;
      gens[n] = bare[k].grew;
      dls[n++] = dl;
      continue;
    }
    if (dl != NULL) { /* no room: the next round takes it */
      nxi_dlist_release(dl);
      continue;
    }
    pthread_mutex_lock(&stray_lock);
    struct stray *s = &strays[bare[k].at];
    if (s->proc == bare[k].proc)
      memcpy(s->told, s->handled, sizeof(s->told));
    pthread_mutex_unlock(&stray_lock);
  }
  return n;
}

int nxi_ledger_untold(uint32_t *procs, unsigned *gens, struct nxi_dlist **dls,
                      int max) {
  int n = 0;
  for (unsigned i = 0; i < SLOTS && n < max; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    peer_lock(p);
    unsigned grew = 0;
    for (unsigned g = 0; g < GENS; g++)
      if (atomic_load(&p->handled[g]) > p->told[g])
        grew |= 1u << g;
    if (grew && p->dl == NULL && !p->dead && !p->dying)
      p->dl = nxi_dlist_of_proc(p->proc); /* it sent, but never asked */
    if (grew && p->dl != NULL && !p->dead && !p->dying) {
      nxi_dlist_retain(p->dl);
      procs[n] = p->proc;
      gens[n] = grew;
      dls[n++] = p->dl;
    }
    peer_unlock(p);
  }
  return n + untold_strays(procs + n, gens + n, dls + n, max - n);
}

void nxi_ledger_told(uint32_t proc, unsigned gen, uint64_t count) {
  if (gen >= GENS)
    return;
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL) {
    pthread_mutex_lock(&stray_lock);
    struct stray *s = stray_find(proc);
    if (s != NULL && count > s->told[gen])
      s->told[gen] = count;
    pthread_mutex_unlock(&stray_lock);
    return;
  }
  peer_lock(p);
  if (count > p->told[gen])
    p->told[gen] = count;
  peer_unlock(p);
}

void nxi_ledger_route(uint32_t proc, struct nxi_dlist *dl) {
  struct nxi_peer *p = peer_add(proc);
  if (p == NULL || dl == NULL)
    return;
  struct nxi_dlist *old = NULL;
  peer_lock(p);
  if (p->dl != dl && !p->dead) {
    /* The asker's own list now replaces the one kept: a list learnt
     * earlier (its gp at start, say) may lack what reaches it today (a
     * gateway it joined since), and a tell unasked over that one would
     * not leave (NX_EUNREACH). */
    nxi_dlist_retain(dl);
    old = p->dl;
    p->dl = dl;
  }
  peer_unlock(p);
  if (old != NULL)
    nxi_dlist_release(old);
}

void nxi_ledger_known(uint32_t proc, struct nxi_dlist *dl) {
  struct nxi_peer *p = peer_find(proc);
  if (p == NULL && dl != NULL) {
    /* A stray keeps it too, so that nx_finalize can tell it its counts
     * after the gp that named it was released. */
    pthread_mutex_lock(&stray_lock);
    struct stray *s = stray_find(proc);
    if (s != NULL && s->dl == NULL) {
      nxi_dlist_retain(dl);
      s->dl = dl;
    }
    pthread_mutex_unlock(&stray_lock);
    return;
  }
  if (p == NULL || dl == NULL)
    return;
  peer_lock(p);
  if (p->dl == NULL && !p->dead) {
    nxi_dlist_retain(dl);
    p->dl = dl;
  }
  peer_unlock(p);
}

/* The take stage: an answer for this process is settled where it is
 * delivered (ledger.h, nxi_ledger_take_tell). */
static int take(struct nx_buffer *b) {
  return b->handler == nxi_ledger_tell_id && nxi_ledger_take_tell(b);
}

/* What the RSR layer calls (rsr/stages.h). */
static const struct nxi_reliability_stages reliability = {
    .note = nxi_ledger_note,
    .voided = nxi_ledger_void,
    .ask = nxi_ledger_ask,
    .resend = nxi_ledger_resend,
    .handled = nxi_ledger_handled_from_peer,
    .take = take,
    .gone = nxi_ledger_gone,
    .tick = nxi_ledger_tick_run,
};

void nxi_ledger_init(void) {
  atomic_store(&full_logged, 0);
  pthread_mutex_lock(&stray_lock);
  memset(strays, 0, sizeof(strays));
  memset(stray_next, 0, sizeof(stray_next));
  pthread_mutex_unlock(&stray_lock);
  atomic_store(&senders, NULL);
  nxi_reliability_stages_set(&reliability); /* the tick runs at once */
}

void nxi_ledger_finalize(void) {
  nxi_reliability_stages_set(NULL);
  nxi_ledger_stages_set(NULL);
  resend_run(); /* what is left is reported */
  atomic_store(&senders, NULL);
  /* The lists go after the lock: a release may take the lists' lock. */
  struct nxi_dlist *dls[STRAYS];
  unsigned n = 0;
  pthread_mutex_lock(&stray_lock);
  for (unsigned i = 0; i < STRAYS; i++)
    if (strays[i].dl != NULL)
      dls[n++] = strays[i].dl;
  memset(strays, 0, sizeof(strays));
  pthread_mutex_unlock(&stray_lock);
  for (unsigned i = 0; i < n; i++)
    nxi_dlist_release(dls[i]);
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load_explicit(&table[i], memory_order_relaxed);
    if (p == NULL || (p = atomic_exchange(&table[i], NULL)) == NULL)
      continue;
    if (p->dl != NULL)
      nxi_dlist_release(p->dl);
    free(p->ring);
    free(p);
  }
}
