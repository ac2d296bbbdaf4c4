/* The ledger (ledger.h): per peer process, the accepted RSRs it has not yet
 * confirmed handled, oldest first, and the count of its RSRs handled here.
 * A confirmation is a count (the peer has handled its first N RSRs from
 * here), so an entry needs no number on the wire: the oldest ones settle. */
#include <pthread.h>
#include <stdlib.h>

#include "dlist.h"
#include "frame.h"
#include "ledger.h"
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

struct entry {
  uint64_t context;
  uint32_t handler;
  uint32_t voided; /* reported already, or never accepted */
};

struct nxi_peer {
  uint32_t proc;
  struct nxi_peer *next_sender; /* the list of peers RSRs went to */
  pthread_mutex_t lock;
  /* Sending: entries [base, base + count) in a ring of `cap`. */
  struct entry *ring;
  size_t head, count, cap;
  uint64_t base;          /* sequence of the oldest entry */
  uint64_t confirmed;     /* entries settled by the peer's counts */
  uint64_t pending;       /* entries neither voided nor settled */
  uint64_t asked_at;      /* `pending` when last asked */
  uint64_t ask_ns;        /* when last asked, 0 if no request is out */
  uint64_t pending_since; /* the tick first saw RSRs unconfirmed, or 0 */
  int listed;             /* on the `senders` list */
  int dying;              /* lost: its entries are reported at `lost_at` */
  int lost_status;
  uint64_t lost_at;
  int dead;             /* lost: its entries were reported */
  int closed;           /* nx_finalize reported its entries */
  struct nxi_dlist *dl; /* a list that reaches it (a reference) */
  /* Receiving: its RSRs handled here, and the count it was last told. */
  atomic_uint_fast64_t handled;
  uint64_t told;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nxi_peer *_Atomic table[SLOTS];
static atomic_int full_logged;
/* Peers this process sent RSRs to: pushed once, never removed before
 * nxi_ledger_finalize. */
static struct nxi_peer *_Atomic senders;
atomic_uint_fast64_t nxi_ledger_next_tick;
atomic_long nxi_ledger_ctl_inflight;
static _Atomic nxi_ledger_ask_fn asker;
static _Atomic nxi_ledger_wake_fn waker;

static unsigned slot_of(uint32_t proc) { return (proc * 2654435761u) % SLOTS; }

/* The peer `proc`, created if `create`; NULL if absent (or the table is
 * full, said once: its RSRs then go unrecorded, as before the ledger). */
static struct nxi_peer *peer_get(uint32_t proc, int create) {
  unsigned s = slot_of(proc);
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p =
        atomic_load_explicit(&table[(s + i) % SLOTS], memory_order_acquire);
    if (p == NULL)
      break;
    if (p->proc == proc)
      return p;
  }
  if (!create)
    return NULL;
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
  if (found == NULL && i < SLOTS &&
      (found = calloc(1, sizeof(*found))) != NULL) {
    found->proc = proc;
    pthread_mutex_init(&found->lock, NULL);
    atomic_store_explicit(&table[(s + i) % SLOTS], found, memory_order_release);
  }
  pthread_mutex_unlock(&table_lock);
  if (found == NULL && atomic_exchange(&full_logged, 1) == 0)
    nxi_log(0, NULL,
            "ledger: no room for process %#x (more than %u peers or no "
            "memory): its RSRs are not confirmed",
            proc, SLOTS);
  return found;
}

static void wake(void) {
  nxi_ledger_wake_fn fn = atomic_load(&waker);
  if (fn != NULL)
    fn();
}

/* Peer lock held. Removes the oldest entry. */
static void pop(struct nxi_peer *p) {
  p->head = (p->head + 1) % p->cap;
  p->count--;
  p->base++;
}

static struct entry *at(struct nxi_peer *p, size_t i) {
  return &p->ring[(p->head + i) % p->cap];
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

int nxi_ledger_note(struct nx_buffer *b) {
  b->peer = NULL;
  uint32_t proc = nxi_ctxid_proc(b->context);
  if (proc == nxi_rt.proc_id || proc == 0)
    return 0;
  struct nxi_peer *p = peer_get(proc, 1);
  if (p == NULL)
    return 0;
  int ask = 0;
  pthread_mutex_lock(&p->lock);
  if (!p->dead && !p->dying && !p->closed && grow(p) == 0) {
    *at(p, p->count) = (struct entry){b->context, b->handler, 0};
    b->seq = p->base + p->count;
    b->peer = p;
    if (!p->listed) {
      /* Its first entry: the tick looks at it from now on. */
      p->listed = 1;
      p->next_sender = atomic_load(&senders);
      while (!atomic_compare_exchange_weak(&senders, &p->next_sender, p))
        ;
    }
    p->count++;
    p->pending++;
    if (p->dl == NULL && b->dl != NULL) {
      nxi_dlist_retain(b->dl);
      p->dl = b->dl;
    }
    /* Ask once a window has gathered since the last request, and again
     * if a request went unanswered for long. */
    if (p->pending >= p->asked_at + NXI_LEDGER_WINDOW &&
        (p->ask_ns == 0 || (p->pending % NXI_LEDGER_WINDOW == 0 &&
                            nxu_now_ns() - p->ask_ns > ASK_AGAIN_NS)))
      ask = 1;
  }
  pthread_mutex_unlock(&p->lock);
  return ask;
}

int nxi_ledger_void(struct nx_buffer *b) {
  struct nxi_peer *p = b->peer;
  if (p == NULL)
    return 1;
  b->peer = NULL;
  int open = 0;
  pthread_mutex_lock(&p->lock);
  if (p->dead || p->closed) {
    /* Reported with the rest of the peer's entries already. */
  } else if (b->seq >= p->base && b->seq - p->base < p->count) {
    struct entry *e = at(p, (size_t)(b->seq - p->base));
    if (!e->voided) {
      e->voided = 1;
      p->pending--;
      open = 1;
    }
  } else if (b->seq < p->base && p->count > 0) {
    /* Settled already by a count that did not include it (it never
     * arrived): that count covered the oldest entry still open. */
    for (size_t i = 0; i < p->count; i++) {
      struct entry *e = at(p, i);
      if (!e->voided) {
        e->voided = 1;
        p->pending--;
        p->confirmed++;
        break;
      }
    }
    open = 1;
  }
  while (p->count > 0 && at(p, 0)->voided)
    pop(p);
  int settled = p->pending == 0;
  pthread_mutex_unlock(&p->lock);
  if (settled)
    wake();
  return open;
}

void nxi_ledger_set_asker(nxi_ledger_ask_fn fn) { atomic_store(&asker, fn); }
void nxi_ledger_set_wake(nxi_ledger_wake_fn fn) { atomic_store(&waker, fn); }

void nxi_ledger_ask(struct nxi_peer *p) {
  nxi_ledger_ask_fn fn = atomic_load(&asker);
  if (fn == NULL || p == NULL)
    return;
  pthread_mutex_lock(&p->lock);
  struct nxi_dlist *dl = p->dl;
  if (dl != NULL)
    nxi_dlist_retain(dl);
  p->asked_at = p->pending;
  p->ask_ns = nxu_now_ns();
  pthread_mutex_unlock(&p->lock);
  if (dl == NULL)
    return;
  fn(p->proc, dl);
  nxi_dlist_release(dl);
}

uint32_t nxi_ledger_tell_id;
static _Atomic nxi_ledger_gone_fn goner;

void nxi_ledger_set_gone(nxi_ledger_gone_fn fn) { atomic_store(&goner, fn); }

void nxi_ledger_gone(struct nx_buffer *b) {
  nxi_ledger_gone_fn fn = atomic_load(&goner);
  if (fn != NULL)
    fn(b);
}

int nxi_ledger_take_tell(struct nx_buffer *b) {
  uint32_t proc;
  uint64_t count;
  if (nx_get_uint32(b, &proc) < 0 || nx_get_uint64(b, &count) < 0) {
    b->pos = 0; /* its handler reads it again, and refuses it */
    return 0;
  }
  nxi_ledger_confirm(proc, count);
  nxi_buffer_handler_done(b);
  return 1;
}

static void report_dead(struct nxi_peer *p, int status);

void nxi_ledger_tick_run(uint64_t now) {
  atomic_store_explicit(&nxi_ledger_next_tick, now + NXI_LEDGER_TICK_NS,
                        memory_order_relaxed);
  for (struct nxi_peer *p = atomic_load(&senders); p != NULL;
       p = p->next_sender) {
    pthread_mutex_lock(&p->lock);
    /* Only a peer whose RSRs stayed unconfirmed for QUIET_NS: right after
     * a send, a peer that just died may not be known dead yet, and a send
     * to it can hang inside a backend (libfabric's shm, a killed peer
     * holding a lock in the shared region). */
    if (p->dying && now >= p->lost_at)
      report_dead(p, p->lost_status);
    else if (p->dying)
      atomic_store_explicit(&nxi_ledger_next_tick, p->lost_at,
                            memory_order_relaxed);
    if (p->pending == 0 || p->dead)
      p->pending_since = 0;
    else if (p->pending_since == 0)
      p->pending_since = now;
    int due = p->pending > 0 && !p->dead && !p->dying &&
              now - p->pending_since >= QUIET_NS &&
              (p->ask_ns == 0 || now - p->ask_ns > ASK_AGAIN_NS);
    pthread_mutex_unlock(&p->lock);
    if (due)
      nxi_ledger_ask(p);
  }
}

void nxi_ledger_confirm(uint32_t proc, uint64_t count) {
  struct nxi_peer *p = peer_get(proc, 0);
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->lock);
  p->ask_ns = 0;
  while (p->count > 0) {
    struct entry *e = at(p, 0);
    if (!e->voided) {
      if (p->confirmed >= count)
        break;
      p->confirmed++;
      p->pending--;
    }
    pop(p);
  }
  p->asked_at = p->pending < p->asked_at ? p->pending : p->asked_at;
  int settled = p->pending == 0;
  pthread_mutex_unlock(&p->lock);
  if (settled)
    wake();
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
  p->head = p->count = 0;
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

/* Peer lock held: reports what `p` left unconfirmed and marks it dead. */
static void report_dead(struct nxi_peer *p, int status) {
  p->dead = 1;
  p->dying = 0;
  uint64_t pending = p->pending;
  size_t n;
  struct entry *e = take_open(p, &n);
  p->pending = 0;
  pthread_mutex_unlock(&p->lock);
  if (pending > 0)
    report(p->proc, e, n, pending - n, status);
  else
    free(e);
  wake();
  pthread_mutex_lock(&p->lock);
}

void nxi_ledger_lost(uint32_t proc, int status) {
  struct nxi_peer *p = peer_get(proc, 0);
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->lock);
  if (!p->dead && !p->dying) {
    /* Its last answers may still be on their way (over another of the
     * transport's connections than the one that closed): the driver's
     * tick reports what is still unconfirmed after LOST_GRACE_NS. */
    p->dying = 1;
    p->lost_status = status;
    p->lost_at = nxu_now_ns() + LOST_GRACE_NS;
    atomic_store_explicit(&nxi_ledger_next_tick, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&p->lock);
}

uint32_t nxi_ledger_origin(const struct nx_buffer *b) {
  uint32_t origin = nxi_frame_hdr_origin(b->hdr);
  if (origin == nxi_rt.proc_id ||
      (nxi_frame_hdr_flags(b->hdr) & NXI_FRAME_F_CTL))
    return 0;
  return origin;
}

void nxi_ledger_handled(uint32_t origin) {
  if (origin == 0)
    return;
  struct nxi_peer *p = peer_get(origin, 1);
  if (p != NULL)
    atomic_fetch_add_explicit(&p->handled, 1, memory_order_relaxed);
}

uint64_t nxi_ledger_handled_from(uint32_t proc) {
  struct nxi_peer *p = peer_get(proc, 0);
  return p != NULL ? atomic_load(&p->handled) : 0;
}

int nxi_ledger_unsettled(uint32_t *procs, struct nxi_dlist **dls, int max,
                         uint64_t *pending) {
  int n = 0;
  uint64_t total = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    pthread_mutex_lock(&p->lock);
    if (p->pending > 0) {
      total += p->pending;
      if (n < max && p->dl != NULL) {
        nxi_dlist_retain(p->dl);
        procs[n] = p->proc;
        dls[n++] = p->dl;
      }
    }
    pthread_mutex_unlock(&p->lock);
  }
  *pending = total;
  return n;
}

uint64_t nxi_ledger_pending_of(uint32_t proc) {
  struct nxi_peer *p = peer_get(proc, 0);
  if (p == NULL)
    return 0;
  pthread_mutex_lock(&p->lock);
  uint64_t n = p->pending;
  pthread_mutex_unlock(&p->lock);
  return n;
}

uint64_t nxi_ledger_report_all(int status) {
  uint64_t total = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    pthread_mutex_lock(&p->lock);
    uint64_t pending = p->pending;
    size_t n;
    struct entry *e = take_open(p, &n);
    p->pending = 0;
    p->closed = 1;
    pthread_mutex_unlock(&p->lock);
    total += pending;
    if (pending > 0)
      report(p->proc, e, n, pending - n, status);
    else
      free(e);
  }
  return total;
}

int nxi_ledger_untold(uint32_t *procs, uint64_t *counts, struct nxi_dlist **dls,
                      int max) {
  int n = 0;
  for (unsigned i = 0; i < SLOTS && n < max; i++) {
    struct nxi_peer *p = atomic_load(&table[i]);
    if (p == NULL)
      continue;
    pthread_mutex_lock(&p->lock);
    uint64_t h = atomic_load(&p->handled);
    if (h > p->told && p->dl == NULL && !p->dead)
      p->dl = nxi_dlist_of_proc(p->proc); /* it sent, but never asked */
    if (h > p->told && p->dl != NULL && !p->dead) {
      nxi_dlist_retain(p->dl);
      procs[n] = p->proc;
      counts[n] = h;
      dls[n++] = p->dl;
    }
    pthread_mutex_unlock(&p->lock);
  }
  return n;
}

void nxi_ledger_told(uint32_t proc, uint64_t count) {
  struct nxi_peer *p = peer_get(proc, 0);
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->lock);
  if (count > p->told)
    p->told = count;
  pthread_mutex_unlock(&p->lock);
}

void nxi_ledger_route(uint32_t proc, struct nxi_dlist *dl) {
  struct nxi_peer *p = peer_get(proc, 1);
  if (p == NULL || dl == NULL)
    return;
  pthread_mutex_lock(&p->lock);
  if (p->dl == NULL) {
    nxi_dlist_retain(dl);
    p->dl = dl;
  }
  pthread_mutex_unlock(&p->lock);
}

void nxi_ledger_init(void) {
  atomic_store(&full_logged, 0);
  atomic_store(&senders, NULL);
  atomic_store(&nxi_ledger_next_tick, 0);
}

void nxi_ledger_finalize(void) {
  atomic_store(&senders, NULL);
  for (unsigned i = 0; i < SLOTS; i++) {
    struct nxi_peer *p = atomic_exchange(&table[i], NULL);
    if (p == NULL)
      continue;
    if (p->dl != NULL)
      nxi_dlist_release(p->dl);
    pthread_mutex_destroy(&p->lock);
    free(p->ring);
    free(p);
  }
}
