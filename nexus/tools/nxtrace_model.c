/* nxtrace's model of a computation, built from its logs' events: the
 * contexts, the handler runs and waits, the locations they go to (runs that
 * do not nest get locations of their own), and which send each run ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nxtrace.h"

static uint64_t proc_last_gt(const struct tr_trace *t, uint32_t proc) {
  const struct tr_proc *p = &t->procs[proc];
  const struct tr_host *h = &t->hosts[p->host_ix];
  long double g =
      (long double)h->real0 +
      ((long double)p->mono_last - (long double)h->mono0) * h->slope;
  return g < 0 ? 0 : (uint64_t)g;
}

static int cmp_ev(const void *a, const void *b) {
  const struct tr_ev *x = a, *y = b;
  if (x->gt != y->gt)
    return x->gt < y->gt ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The sort keys of contexts: by process id, the process's own events
 * (id 0) first, then by id; two logs of one process id by log. */
static uint32_t ctx_proc_id(const struct tr_trace *t, const struct tr_ctx *c) {
  return c->id ? (uint32_t)(c->id >> 32) : t->procs[c->proc].proc_id;
}

static const struct tr_trace *sort_trace; /* qsort has no user pointer */

static int cmp_ctx(const void *a, const void *b) {
  const struct tr_ctx *x = a, *y = b;
  uint32_t px = ctx_proc_id(sort_trace, x), py = ctx_proc_id(sort_trace, y);
  if (px != py)
    return px < py ? -1 : 1;
  if (x->id != y->id)
    return x->id < y->id ? -1 : 1;
  return x->id == 0 && x->proc != y->proc ? (x->proc < y->proc ? -1 : 1) : 0;
}

long nxi_tr_ctx_find(const struct tr_trace *t, uint64_t id, uint32_t proc) {
  struct tr_ctx key = {.id = id, .proc = id ? -1 : (long)proc};
  sort_trace = t;
  if (t->nctxs == 0)
    return -1;
  const struct tr_ctx *c =
      bsearch(&key, t->ctxs, t->nctxs, sizeof(key), cmp_ctx);
  return c ? (long)(c - t->ctxs) : -1;
}

static void build_contexts(struct tr_trace *t) {
  size_t cap = 0;
  /* Every process has its own (id 0): a log without events still gets a
   * location in the archive, which needs one at least. */
  for (size_t p = 0; p < t->nprocs; p++) {
    nxi_tr_reserve((void **)&t->ctxs, &cap, t->nctxs + 1, sizeof(*t->ctxs));
    t->ctxs[t->nctxs++] = (struct tr_ctx){.id = 0, .proc = (long)p};
  }
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    nxi_tr_reserve((void **)&t->ctxs, &cap, t->nctxs + 2, sizeof(*t->ctxs));
    t->ctxs[t->nctxs++] =
        (struct tr_ctx){.id = e->r.ctx, .proc = e->r.ctx ? -1 : (long)e->proc};
    int peer_is_ctx =
        e->r.type == NXT_SEND || e->r.type == NXT_BEGIN || e->r.type == NXT_HOP;
    if (peer_is_ctx && e->r.peer != 0)
      t->ctxs[t->nctxs++] = (struct tr_ctx){.id = e->r.peer, .proc = -1};
  }
  sort_trace = t;
  nxi_tr_sort(t->ctxs, t->nctxs, sizeof(*t->ctxs), cmp_ctx);
  size_t n = 0;
  for (size_t i = 0; i < t->nctxs; i++)
    if (n == 0 || cmp_ctx(&t->ctxs[n - 1], &t->ctxs[i]) != 0)
      t->ctxs[n++] = t->ctxs[i];
  t->nctxs = n;
  uint32_t rank = 0;
  for (size_t i = 0; i < n; i++) {
    struct tr_ctx *c = &t->ctxs[i];
    if (c->id == 0)
      continue;
    c->rank = rank++;
    for (size_t p = 0; p < t->nprocs && c->proc < 0; p++)
      if (t->procs[p].proc_id == (uint32_t)(c->id >> 32))
        c->proc = (long)p;
  }
  t->nreal = rank;
}

static size_t ev_ctx(const struct tr_trace *t, const struct tr_ev *e) {
  return (size_t)nxi_tr_ctx_find(t, e->r.ctx, e->proc);
}

/* Sorting indices of events by a key computed per comparison. */
static int cmp_pair(const void *a, const void *b) {
  const struct tr_ev *x = &sort_trace->evs[*(const size_t *)a];
  const struct tr_ev *y = &sort_trace->evs[*(const size_t *)b];
  if (x->proc != y->proc)
    return x->proc < y->proc ? -1 : 1;
  if (x->r.x != y->r.x)
    return x->r.x < y->r.x ? -1 : 1;
  if (x->r.type != y->r.type)
    return x->r.type == NXT_BEGIN ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_wait(const void *a, const void *b) {
  const struct tr_ev *x = &sort_trace->evs[*(const size_t *)a];
  const struct tr_ev *y = &sort_trace->evs[*(const size_t *)b];
  if (x->proc != y->proc)
    return x->proc < y->proc ? -1 : 1;
  if (x->thread != y->thread)
    return x->thread < y->thread ? -1 : 1;
  return cmp_ev(x, y);
}

static struct tr_run *new_run(struct tr_trace *t, size_t *cap,
                              enum tr_run_kind kind, size_t begin) {
  nxi_tr_reserve((void **)&t->runs, cap, t->nruns + 1, sizeof(*t->runs));
  const struct tr_ev *e = &t->evs[begin];
  struct tr_run *r = &t->runs[t->nruns++];
  memset(r, 0, sizeof(*r));
  r->kind = kind;
  r->ctx = ev_ctx(t, e);
  r->proc = e->proc;
  r->thread = e->thread;
  r->handler = e->r.handler;
  r->t0 = e->gt;
  r->begin_ev = begin;
  r->send = -1;
  return r;
}

/* Runs: BEGIN and END paired by run number in each process; waits: a
 * WAIT_BEGIN and the next WAIT_END of the same thread. A run without its
 * END (the process died, or its chunk was lost) lasts to the process's
 * last event. */
static void build_runs(struct tr_trace *t) {
  size_t *ix = nxi_tr_realloc(NULL, (t->nevs + 1) * sizeof(size_t));
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < t->nevs; i++)
    if (t->evs[i].r.type == NXT_BEGIN || t->evs[i].r.type == NXT_END)
      ix[n++] = i;
  sort_trace = t;
  nxi_tr_sort(ix, n, sizeof(size_t), cmp_pair);
  for (size_t i = 0; i < n; i++) {
    const struct tr_ev *e = &t->evs[ix[i]];
    if (e->r.type == NXT_END) {
      t->unpaired_ends++;
      continue;
    }
    struct tr_run *r = new_run(t, &cap, TR_RUN_HANDLER, ix[i]);
    const struct tr_ev *f = i + 1 < n ? &t->evs[ix[i + 1]] : NULL;
    if (f && f->r.type == NXT_END && f->proc == e->proc && f->r.x == e->r.x) {
      r->t1 = f->gt < r->t0 ? r->t0 : f->gt;
      r->finished = 1;
      i++;
    } else {
      r->t1 = proc_last_gt(t, e->proc);
      t->unfinished++;
    }
  }
  n = 0;
  for (size_t i = 0; i < t->nevs; i++)
    if (t->evs[i].r.type == NXT_WAIT_BEGIN || t->evs[i].r.type == NXT_WAIT_END)
      ix[n++] = i;
  nxi_tr_sort(ix, n, sizeof(size_t), cmp_wait);
  for (size_t i = 0; i < n; i++) {
    const struct tr_ev *e = &t->evs[ix[i]];
    if (e->r.type == NXT_WAIT_END) {
      t->unpaired_ends++;
      continue;
    }
    struct tr_run *r = new_run(t, &cap, TR_RUN_WAIT, ix[i]);
    const struct tr_ev *f = i + 1 < n ? &t->evs[ix[i + 1]] : NULL;
    if (f && f->r.type == NXT_WAIT_END && f->proc == e->proc &&
        f->thread == e->thread) {
      r->t1 = f->gt < r->t0 ? r->t0 : f->gt;
      r->finished = 1;
      i++;
    } else {
      r->t1 = proc_last_gt(t, e->proc);
      t->unfinished++;
    }
  }
  free(ix);
  for (size_t i = 0; i < t->nruns; i++)
    if (t->runs[i].t1 > t->t_max)
      t->t_max = t->runs[i].t1;
}

int nxi_tr_cmp_span(const struct tr_run *x, const struct tr_run *y) {
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1)
    return x->t1 > y->t1 ? -1 : 1; /* the outer run first */
  return x->begin_ev < y->begin_ev ? -1 : x->begin_ev > y->begin_ev;
}

static int cmp_run_order(const void *a, const void *b) {
  const struct tr_run *x = &sort_trace->runs[*(const size_t *)a];
  const struct tr_run *y = &sort_trace->runs[*(const size_t *)b];
  if (x->ctx != y->ctx)
    return x->ctx < y->ctx ? -1 : 1;
  if (x->thread != y->thread)
    return x->thread < y->thread ? -1 : 1;
  return nxi_tr_cmp_span(x, y);
}

int nxi_tr_cmp_loc(const void *a, const void *b) {
  const struct tr_loc *x = a, *y = b;
  if (x->ctx != y->ctx)
    return x->ctx < y->ctx ? -1 : 1;
  if (x->thread != y->thread)
    return x->thread < y->thread ? -1 : 1;
  return x->layer < y->layer ? -1 : x->layer > y->layer;
}

/* A layer of a (context, thread) location: the ends of its open runs. */
struct layer {
  uint64_t *end;
  size_t n, cap;
};

/* Puts each run on the first layer of its (context, thread) where it
 * nests: runs are taken by start (the longer first), and a run nests if it
 * ends before the innermost run still open there. */
static void assign_layers(struct tr_trace *t, size_t *order, uint32_t *layer) {
  struct layer *ls = NULL;
  size_t nls = 0;
  for (size_t i = 0; i < t->nruns;) {
    size_t j = i;
    const struct tr_run *g = &t->runs[order[i]];
    while (j < t->nruns && t->runs[order[j]].ctx == g->ctx &&
           t->runs[order[j]].thread == g->thread)
      j++;
    for (size_t k = 0; k < nls; k++)
      ls[k].n = 0;
    for (size_t k = i; k < j; k++) {
      struct tr_run *r = &t->runs[order[k]];
      uint32_t l = 0;
      for (;; l++) {
        if (l == nls) {
          ls = nxi_tr_realloc(ls, (nls + 1) * sizeof(*ls));
          memset(&ls[nls++], 0, sizeof(*ls));
        }
        struct layer *y = &ls[l];
        while (y->n > 0 && y->end[y->n - 1] <= r->t0)
          y->n--;
        if (y->n == 0 || r->t1 <= y->end[y->n - 1]) {
          r->top = y->n == 0;
          nxi_tr_reserve((void **)&y->end, &y->cap, y->n + 1, sizeof(uint64_t));
          y->end[y->n++] = r->t1;
          break;
        }
      }
      layer[order[k]] = l;
    }
    i = j;
  }
  for (size_t k = 0; k < nls; k++)
    free(ls[k].end);
  free(ls);
}

static void build_locations(struct tr_trace *t) {
  size_t *order = nxi_tr_realloc(NULL, (t->nruns + 1) * sizeof(size_t));
  uint32_t *layer = nxi_tr_realloc(NULL, (t->nruns + 1) * sizeof(uint32_t));
  for (size_t i = 0; i < t->nruns; i++)
    order[i] = i;
  sort_trace = t;
  nxi_tr_sort(order, t->nruns, sizeof(size_t), cmp_run_order);
  assign_layers(t, order, layer);
  free(order);
  size_t cap = 0, n = 0;
  for (size_t i = 0; i < t->nruns; i++) {
    nxi_tr_reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){t->runs[i].ctx, t->runs[i].thread, layer[i]};
  }
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    if (e->r.type == NXT_BEGIN || e->r.type == NXT_END ||
        e->r.type == NXT_WAIT_BEGIN || e->r.type == NXT_WAIT_END)
      continue;
    nxi_tr_reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){ev_ctx(t, e), e->thread, 0};
  }
  /* Every context has a location, the communicator's member for it: one
   * of its own if nothing happened in it (a destination without a log). */
  char *has = nxi_tr_calloc(t->nctxs, 1);
  for (size_t i = 0; i < n; i++)
    has[t->locs[i].ctx] = 1;
  for (size_t c = 0; c < t->nctxs; c++) {
    if (has[c])
      continue;
    nxi_tr_reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){c, 0, 0};
  }
  free(has);
  nxi_tr_sort(t->locs, n, sizeof(*t->locs), nxi_tr_cmp_loc);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (m == 0 || nxi_tr_cmp_loc(&t->locs[m - 1], &t->locs[i]) != 0)
      t->locs[m++] = t->locs[i];
  t->nlocs = m;
  /* Each context's (thread 0, layer 0) location sorts first among its. */
  for (size_t i = t->nlocs; i-- > 0;)
    t->ctxs[t->locs[i].ctx].loc0 = i;
  for (size_t i = 0; i < t->nruns; i++) {
    struct tr_loc key = {t->runs[i].ctx, t->runs[i].thread, layer[i]};
    const struct tr_loc *l =
        bsearch(&key, t->locs, t->nlocs, sizeof(key), nxi_tr_cmp_loc);
    t->runs[i].loc = (size_t)(l - t->locs);
  }
  free(layer);
}

/* The key that pairs an RSR's SEND with the BEGIN of its run. */
struct pair_key {
  uint64_t from, to, t;
  uint32_t handler;
  size_t index, seq;
};

static int cmp_key(const void *a, const void *b) {
  const struct pair_key *x = a, *y = b;
  if (x->from != y->from)
    return x->from < y->from ? -1 : 1;
  if (x->to != y->to)
    return x->to < y->to ? -1 : 1;
  if (x->handler != y->handler)
    return x->handler < y->handler ? -1 : 1;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Pairs the sends of each (sender, destination, handler) with the runs
 * there in order of time: the n-th send with the n-th run that began after
 * it. Unordered RSRs may swap runs of one handler; the pairs stay
 * plausible (no receive before its send). */
static void pair_sends(struct tr_trace *t) {
  struct pair_key *s = nxi_tr_realloc(NULL, (t->nevs + 1) * sizeof(*s));
  struct pair_key *r = nxi_tr_realloc(NULL, (t->nruns + 1) * sizeof(*r));
  size_t ns = 0, nr = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    if (e->r.type == NXT_SEND)
      s[ns++] = (struct pair_key){e->r.ctx,     e->r.peer, e->gt,
                                  e->r.handler, i,         e->seq};
  }
  for (size_t i = 0; i < t->nruns; i++) {
    const struct tr_run *u = &t->runs[i];
    const struct tr_ev *e = &t->evs[u->begin_ev];
    if (u->kind == TR_RUN_HANDLER && e->r.peer != 0 && e->r.ctx != 0)
      r[nr++] =
          (struct pair_key){e->r.peer, e->r.ctx, u->t0, u->handler, i, e->seq};
  }
  nxi_tr_sort(s, ns, sizeof(*s), cmp_key);
  nxi_tr_sort(r, nr, sizeof(*r), cmp_key);
  size_t i = 0;
  for (size_t j = 0; j < nr; j++) {
    /* Sends of keys before this run's are never paired. */
    while (i < ns && (s[i].from < r[j].from ||
                      (s[i].from == r[j].from && s[i].to < r[j].to) ||
                      (s[i].from == r[j].from && s[i].to == r[j].to &&
                       s[i].handler < r[j].handler)))
      i++;
    if (i < ns && s[i].from == r[j].from && s[i].to == r[j].to &&
        s[i].handler == r[j].handler && s[i].t <= r[j].t) {
      t->runs[r[j].index].send = (long)s[i].index;
      i++;
    }
  }
  free(s);
  free(r);
}

void nxi_tr_build(struct tr_trace *t) {
  nxi_tr_sort(t->evs, t->nevs, sizeof(*t->evs), cmp_ev);
  build_contexts(t);
  build_runs(t);
  build_locations(t);
  pair_sends(t);
}

size_t nxi_tr_handler_index(const struct tr_trace *t, uint32_t id) {
  size_t lo = 0, hi = t->nhandlers;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->handlers[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

const char *nxi_tr_handler_name(const struct tr_trace *t, uint32_t id,
                                char *buf, size_t len) {
  size_t i = nxi_tr_handler_index(t, id);
  if (i < t->nhandlers && t->handlers[i].id == id && t->handlers[i].name)
    return t->handlers[i].name;
  snprintf(buf, len, "handler 0x%08x", id);
  return buf;
}

const char *nxi_tr_ctx_name(const struct tr_trace *t, size_t ctx, char *buf,
                            size_t len) {
  const struct tr_ctx *c = &t->ctxs[ctx];
  if (c->id == 0)
    snprintf(buf, len, "process %08x", t->procs[c->proc].proc_id);
  else
    snprintf(buf, len, "%016llx", (unsigned long long)c->id);
  return buf;
}
