/* nxtrace's reader: the *.nxt logs of a directory (base/trace_format.h), in
 * either byte order, mapped to one clock, and the model built from them:
 * contexts, handler runs and waits, the locations they go to. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nxtrace.h"

_Static_assert(sizeof(struct nxt_file_hdr) == 120, "nxt_file_hdr layout");
_Static_assert(sizeof(struct nxt_chunk) == 16, "nxt_chunk layout");
_Static_assert(sizeof(struct nxt_rec) == 48, "nxt_rec layout");

#define REC sizeof(struct nxt_rec)

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (q == NULL) {
    fprintf(stderr, "nxtrace: out of memory\n");
    exit(1);
  }
  return q;
}

/* Grows *v (of elements of size sz, *cap of them) to hold n. */
static void reserve(void **v, size_t *cap, size_t n, size_t sz) {
  if (n <= *cap)
    return;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < n)
    c *= 2;
  *v = xrealloc(*v, c * sz);
  *cap = c;
}

static char *xstrndup(const char *s, size_t n) {
  char *d = xrealloc(NULL, n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* The records of a log are read in the writer's byte order. */
static uint16_t sw16(uint16_t v, int s) { return s ? __builtin_bswap16(v) : v; }
static uint32_t sw32(uint32_t v, int s) { return s ? __builtin_bswap32(v) : v; }
static uint64_t sw64(uint64_t v, int s) { return s ? __builtin_bswap64(v) : v; }

static void rec_to_host(struct nxt_rec *r, int s) {
  r->t = sw64(r->t, s);
  r->ctx = sw64(r->ctx, s);
  r->peer = sw64(r->peer, s);
  r->x = sw64(r->x, s);
  r->handler = sw32(r->handler, s);
  r->bytes = sw32(r->bytes, s);
  r->flags = sw16(r->flags, s);
  r->aux = sw32(r->aux, s);
}

/* Definitions are gathered while reading and resolved after. */
struct def_mod {
  uint32_t proc;
  uint8_t index;
  char *name;
};

struct reader {
  struct tr_trace *t;
  size_t cap_procs, cap_evs;
  struct def_mod *mods;
  size_t nmods, cap_mods;
  size_t cap_handlers;
};

static int read_whole(const char *path, unsigned char **buf, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  size_t n = (size_t)st.st_size, got = 0;
  unsigned char *b = xrealloc(NULL, n);
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break; /* a file shrinking under us: read what is there */
    got += (size_t)r;
  }
  close(fd);
  *buf = b;
  *len = got;
  return 0;
}

static void add_handler_name(struct reader *rd, uint32_t id, char *name) {
  struct tr_trace *t = rd->t;
  reserve((void **)&t->handlers, &rd->cap_handlers, t->nhandlers + 1,
          sizeof(*t->handlers));
  t->handlers[t->nhandlers].id = id;
  t->handlers[t->nhandlers].name = name;
  t->nhandlers++;
}

static int thread_index(struct tr_proc *p, uint64_t thread) {
  for (size_t i = 0; i < p->nthreads; i++)
    if (p->threads[i] == thread)
      return (int)i;
  p->threads = xrealloc(p->threads, (p->nthreads + 1) * sizeof(uint64_t));
  p->threads[p->nthreads] = thread;
  return (int)p->nthreads++;
}

static void clock_pair(struct tr_proc *p, uint64_t mono, uint64_t real) {
  if (mono < p->mono_lo) {
    p->mono_lo = mono;
    p->real_lo = real;
  }
  if (mono >= p->mono_hi) {
    p->mono_hi = mono;
    p->real_hi = real;
  }
}

/* Parses one log into rd (appending its events); on a malformed log says
 * why in *why and returns -1, having appended nothing that stays. */
static int parse_log(struct reader *rd, const char *name,
                     const unsigned char *b, size_t len, char *why,
                     size_t whylen) {
  struct tr_trace *t = rd->t;
  struct nxt_file_hdr h;
  if (len < sizeof(h)) {
    snprintf(why, whylen, "shorter than a header (%zu bytes)", len);
    return -1;
  }
  memcpy(&h, b, sizeof(h));
  if (memcmp(h.magic, NXT_MAGIC, 8) != 0) {
    snprintf(why, whylen, "not an nxtrace log (bad magic)");
    return -1;
  }
  int s;
  if (h.version == NXT_VERSION)
    s = 0;
  else if (h.version == __builtin_bswap32(NXT_VERSION))
    s = 1;
  else {
    snprintf(why, whylen, "unknown version %u (this nxtrace reads %u)",
             h.version, NXT_VERSION);
    return -1;
  }
  reserve((void **)&t->procs, &rd->cap_procs, t->nprocs + 1, sizeof(*t->procs));
  struct tr_proc *p = &t->procs[t->nprocs];
  memset(p, 0, sizeof(*p));
  p->proc_id = sw32(h.proc_id, s);
  p->pid = sw64(h.pid, s);
  p->swapped = s;
  memcpy(p->uuid, h.host_uuid, 16);
  memcpy(p->host, h.host, 64);
  p->host[64] = '\0';
  p->mono_lo = UINT64_MAX;
  clock_pair(p, sw64(h.mono0, s), sw64(h.real0, s));
  p->mono_last = sw64(h.mono0, s);
  for (int i = 0; i < 256; i++)
    p->modmap[i] = TR_NOMOD;
  size_t nevs0 = t->nevs, nmods0 = rd->nmods, nhandlers0 = t->nhandlers;
  size_t off = sizeof(h);
  while (off < len) {
    struct nxt_chunk c;
    if (len - off < sizeof(c)) {
      fprintf(stderr,
              "nxtrace: %s: a truncated chunk header at byte %zu "
              "ignored\n",
              name, off);
      t->truncated++;
      break;
    }
    memcpy(&c, b + off, sizeof(c));
    if (sw32(c.magic, s) != NXT_CHUNK_MAGIC) {
      snprintf(why, whylen, "no chunk at byte %zu (bad chunk magic)", off);
      goto err;
    }
    uint64_t count = sw32(c.count, s);
    if (count * REC > len - off - sizeof(c)) {
      fprintf(stderr,
              "nxtrace: %s: the last chunk (at byte %zu, %llu "
              "records) is truncated: ignored\n",
              name, off, (unsigned long long)count);
      t->truncated++;
      break;
    }
    int thread = thread_index(p, sw64(c.thread, s));
    const unsigned char *rp = b + off + sizeof(c);
    for (uint64_t i = 0; i < count; i++) {
      struct nxt_rec r;
      memcpy(&r, rp + i * REC, REC);
      rec_to_host(&r, s);
      if (r.type == NXT_DEF_HANDLER || r.type == NXT_DEF_MODULE) {
        uint64_t nrec = ((uint64_t)r.bytes + REC - 1) / REC;
        if (nrec > count - i - 1) {
          snprintf(why, whylen, "a name runs past its chunk at byte %zu", off);
          goto err;
        }
        char *nm = xstrndup((const char *)rp + (i + 1) * REC, r.bytes);
        if (r.type == NXT_DEF_HANDLER) {
          add_handler_name(rd, r.handler, nm);
        } else {
          reserve((void **)&rd->mods, &rd->cap_mods, rd->nmods + 1,
                  sizeof(*rd->mods));
          rd->mods[rd->nmods++] =
              (struct def_mod){(uint32_t)t->nprocs, r.module, nm};
        }
        i += nrec;
        continue;
      }
      if (r.t > p->mono_last)
        p->mono_last = r.t;
      if (r.type == NXT_CLOCK) {
        clock_pair(p, r.t, r.x);
        continue;
      }
      if (r.type < NXT_SEND || r.type > NXT_CONTEXT_DESTROY) {
        t->unknown_recs++;
        continue;
      }
      reserve((void **)&t->evs, &rd->cap_evs, t->nevs + 1, sizeof(*t->evs));
      struct tr_ev *e = &t->evs[t->nevs];
      memset(e, 0, sizeof(*e));
      e->r = r;
      e->proc = (uint32_t)t->nprocs;
      e->thread = (uint32_t)thread;
      e->seq = t->nevs;
      t->nevs++;
    }
    off += sizeof(c) + count * REC;
  }
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  p->file = xstrndup(base, strlen(base));
  t->nprocs++;
  return 0;
err:
  t->nevs = nevs0;
  for (size_t i = nmods0; i < rd->nmods; i++)
    free(rd->mods[i].name);
  rd->nmods = nmods0;
  for (size_t i = nhandlers0; i < t->nhandlers; i++)
    free(t->handlers[i].name);
  t->nhandlers = nhandlers0;
  free(p->threads);
  return -1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_handler(const void *a, const void *b) {
  const struct tr_handler *x = a, *y = b;
  if (x->id != y->id)
    return x->id < y->id ? -1 : 1;
  /* Named before unnamed, then by name: the first kept is deterministic. */
  if ((x->name == NULL) != (y->name == NULL))
    return x->name == NULL ? 1 : -1;
  return x->name ? strcmp(x->name, y->name) : 0;
}

/* Module names: one sorted list for all logs, each log's indices mapped
 * into it; handler names: one per id. */
static void resolve_names(struct reader *rd) {
  struct tr_trace *t = rd->t;
  for (size_t i = 0; i < rd->nmods; i++) {
    int found = 0;
    for (size_t j = 0; j < t->nmods && !found; j++)
      found = strcmp(t->mods[j], rd->mods[i].name) == 0;
    if (!found) {
      t->mods = xrealloc(t->mods, (t->nmods + 1) * sizeof(char *));
      t->mods[t->nmods++] =
          xstrndup(rd->mods[i].name, strlen(rd->mods[i].name));
    }
  }
  qsort(t->mods, t->nmods, sizeof(char *), cmp_str);
  for (size_t i = 0; i < rd->nmods; i++) {
    struct def_mod *d = &rd->mods[i];
    for (size_t j = 0; j < t->nmods; j++)
      if (strcmp(t->mods[j], d->name) == 0)
        t->procs[d->proc].modmap[d->index] = (int16_t)j;
    free(d->name);
  }
  free(rd->mods);
  for (size_t i = 0; i < t->nevs; i++) {
    struct tr_ev *e = &t->evs[i];
    const struct tr_proc *p = &t->procs[e->proc];
    e->mod = e->r.module == 0xff ? TR_NOMOD : p->modmap[e->r.module];
    e->aux_mod = e->r.aux < 0xff ? p->modmap[e->r.aux] : TR_NOMOD;
    if (e->r.handler != 0 && (e->r.type == NXT_SEND || e->r.type == NXT_BEGIN ||
                              e->r.type == NXT_HOP))
      add_handler_name(rd, e->r.handler, NULL);
  }
  qsort(t->handlers, t->nhandlers, sizeof(*t->handlers), cmp_handler);
  size_t n = 0;
  for (size_t i = 0; i < t->nhandlers; i++) {
    if (n > 0 && t->handlers[n - 1].id == t->handlers[i].id) {
      free(t->handlers[i].name);
      continue;
    }
    t->handlers[n++] = t->handlers[i];
  }
  t->nhandlers = n;
}

static int same_host(const struct tr_proc *p, const struct tr_host *h) {
  static const uint8_t zero[16];
  if (memcmp(p->uuid, zero, 16) != 0 || memcmp(h->uuid, zero, 16) != 0)
    return memcmp(p->uuid, h->uuid, 16) == 0;
  return strcmp(p->host, h->name) == 0;
}

/* One clock: processes of a host share CLOCK_MONOTONIC, so they share one
 * mapping, the line through the host's earliest and latest clock pairs
 * (over all its logs); hosts are lined up by their realtime clocks. */
static void map_clocks(struct tr_trace *t) {
  t->hosts = xrealloc(NULL, (t->nprocs ? t->nprocs : 1) * sizeof(*t->hosts));
  for (size_t i = 0; i < t->nprocs; i++) {
    struct tr_proc *p = &t->procs[i];
    size_t h = 0;
    while (h < t->nhosts && !same_host(p, &t->hosts[h]))
      h++;
    if (h == t->nhosts) {
      struct tr_host *n = &t->hosts[t->nhosts++];
      memset(n, 0, sizeof(*n));
      memcpy(n->uuid, p->uuid, 16);
      memcpy(n->name, p->host, sizeof(n->name));
      n->mono0 = p->mono_lo;
      n->real0 = p->real_lo;
      n->slope = 0; /* used below to hold the latest pair */
    }
    p->host_ix = h;
  }
  for (size_t h = 0; h < t->nhosts; h++) {
    struct tr_host *host = &t->hosts[h];
    uint64_t mlo = UINT64_MAX, rlo = 0, mhi = 0, rhi = 0;
    for (size_t i = 0; i < t->nprocs; i++) {
      const struct tr_proc *p = &t->procs[i];
      if (p->host_ix != h)
        continue;
      if (p->mono_lo < mlo) {
        mlo = p->mono_lo;
        rlo = p->real_lo;
      }
      if (p->mono_hi >= mhi) {
        mhi = p->mono_hi;
        rhi = p->real_hi;
      }
    }
    host->mono0 = mlo;
    host->real0 = rlo;
    host->slope = 1;
    if (mhi > mlo) {
      long double s =
          ((long double)rhi - (long double)rlo) / (long double)(mhi - mlo);
      /* The realtime clock slews by less than 0.1 %; more is a step (set
       * by hand or by NTP), which would bend the whole log: take only the
       * offset then. */
      if (s > 0.999L && s < 1.001L)
        host->slope = s;
      else
        fprintf(stderr,
                "nxtrace: host %s: its realtime clock stepped "
                "during the run; using its first offset only\n",
                host->name);
    }
  }
  t->t_min = UINT64_MAX;
  t->t_max = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    struct tr_ev *e = &t->evs[i];
    const struct tr_host *h = &t->hosts[t->procs[e->proc].host_ix];
    long double d = ((long double)e->r.t - (long double)h->mono0) * h->slope;
    long double g = (long double)h->real0 + d;
    e->gt = g < 0 ? 0 : (uint64_t)g;
    if (e->gt < t->t_min)
      t->t_min = e->gt;
    if (e->gt > t->t_max)
      t->t_max = e->gt;
  }
  if (t->nevs == 0)
    t->t_min = t->t_max = 0;
}

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
  const struct tr_ctx *c =
      bsearch(&key, t->ctxs, t->nctxs, sizeof(key), cmp_ctx);
  return c ? (long)(c - t->ctxs) : -1;
}

static void build_contexts(struct tr_trace *t) {
  size_t cap = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    reserve((void **)&t->ctxs, &cap, t->nctxs + 2, sizeof(*t->ctxs));
    t->ctxs[t->nctxs++] =
        (struct tr_ctx){.id = e->r.ctx, .proc = e->r.ctx ? -1 : (long)e->proc};
    int peer_is_ctx =
        e->r.type == NXT_SEND || e->r.type == NXT_BEGIN || e->r.type == NXT_HOP;
    if (peer_is_ctx && e->r.peer != 0)
      t->ctxs[t->nctxs++] = (struct tr_ctx){.id = e->r.peer, .proc = -1};
  }
  sort_trace = t;
  qsort(t->ctxs, t->nctxs, sizeof(*t->ctxs), cmp_ctx);
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
  reserve((void **)&t->runs, cap, t->nruns + 1, sizeof(*t->runs));
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
  size_t *ix = xrealloc(NULL, (t->nevs + 1) * sizeof(size_t));
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < t->nevs; i++)
    if (t->evs[i].r.type == NXT_BEGIN || t->evs[i].r.type == NXT_END)
      ix[n++] = i;
  sort_trace = t;
  qsort(ix, n, sizeof(size_t), cmp_pair);
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
  qsort(ix, n, sizeof(size_t), cmp_wait);
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

static int cmp_run_order(const void *a, const void *b) {
  const struct tr_run *x = &sort_trace->runs[*(const size_t *)a];
  const struct tr_run *y = &sort_trace->runs[*(const size_t *)b];
  if (x->ctx != y->ctx)
    return x->ctx < y->ctx ? -1 : 1;
  if (x->thread != y->thread)
    return x->thread < y->thread ? -1 : 1;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1)
    return x->t1 > y->t1 ? -1 : 1; /* the outer run first */
  return x->begin_ev < y->begin_ev ? -1 : x->begin_ev > y->begin_ev;
}

static int cmp_loc(const void *a, const void *b) {
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
          ls = xrealloc(ls, (nls + 1) * sizeof(*ls));
          memset(&ls[nls++], 0, sizeof(*ls));
        }
        struct layer *y = &ls[l];
        while (y->n > 0 && y->end[y->n - 1] <= r->t0)
          y->n--;
        if (y->n == 0 || r->t1 <= y->end[y->n - 1]) {
          r->top = y->n == 0;
          reserve((void **)&y->end, &y->cap, y->n + 1, sizeof(uint64_t));
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
  size_t *order = xrealloc(NULL, (t->nruns + 1) * sizeof(size_t));
  uint32_t *layer = xrealloc(NULL, (t->nruns + 1) * sizeof(uint32_t));
  for (size_t i = 0; i < t->nruns; i++)
    order[i] = i;
  sort_trace = t;
  qsort(order, t->nruns, sizeof(size_t), cmp_run_order);
  assign_layers(t, order, layer);
  free(order);
  size_t cap = 0, n = 0;
  for (size_t i = 0; i < t->nruns; i++) {
    reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){t->runs[i].ctx, t->runs[i].thread, layer[i]};
  }
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    if (e->r.type == NXT_BEGIN || e->r.type == NXT_END ||
        e->r.type == NXT_WAIT_BEGIN || e->r.type == NXT_WAIT_END)
      continue;
    reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){ev_ctx(t, e), e->thread, 0};
  }
  /* Every context has a location: the communicator's member for it. */
  for (size_t c = 0; c < t->nctxs; c++) {
    reserve((void **)&t->locs, &cap, n + 1, sizeof(*t->locs));
    t->locs[n++] = (struct tr_loc){c, 0, 0};
  }
  qsort(t->locs, n, sizeof(*t->locs), cmp_loc);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (m == 0 || cmp_loc(&t->locs[m - 1], &t->locs[i]) != 0)
      t->locs[m++] = t->locs[i];
  t->nlocs = m;
  /* Each context's (thread 0, layer 0) location sorts first among its. */
  for (size_t i = t->nlocs; i-- > 0;)
    t->ctxs[t->locs[i].ctx].loc0 = i;
  for (size_t i = 0; i < t->nruns; i++) {
    struct tr_loc key = {t->runs[i].ctx, t->runs[i].thread, layer[i]};
    const struct tr_loc *l =
        bsearch(&key, t->locs, t->nlocs, sizeof(key), cmp_loc);
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
  struct pair_key *s = xrealloc(NULL, (t->nevs + 1) * sizeof(*s));
  struct pair_key *r = xrealloc(NULL, (t->nruns + 1) * sizeof(*r));
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
  qsort(s, ns, sizeof(*s), cmp_key);
  qsort(r, nr, sizeof(*r), cmp_key);
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

static int is_log(const char *name) {
  size_t n = strlen(name);
  return n > 4 && strcmp(name + n - 4, ".nxt") == 0;
}

int nxi_tr_load(const char *dir, struct tr_trace *t) {
  memset(t, 0, sizeof(*t));
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "nxtrace: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t nnames = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!is_log(de->d_name))
      continue;
    names = xrealloc(names, (nnames + 1) * sizeof(char *));
    names[nnames++] = xstrndup(de->d_name, strlen(de->d_name));
  }
  closedir(d);
  qsort(names, nnames, sizeof(char *), cmp_str);
  struct reader rd = {.t = t};
  for (size_t i = 0; i < nnames; i++) {
    char path[4096], why[160];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    unsigned char *buf = NULL;
    size_t len = 0;
    int r = read_whole(path, &buf, &len);
    if (r < 0) {
      fprintf(stderr, "nxtrace: %s: %s: skipped\n", path, strerror(-r));
    } else {
      if (parse_log(&rd, path, buf, len, why, sizeof(why)) < 0)
        fprintf(stderr, "nxtrace: %s: %s: skipped\n", path, why);
      free(buf);
    }
    free(names[i]);
  }
  free(names);
  for (size_t i = 0; i < t->nprocs; i++)
    for (size_t j = 0; j < i; j++)
      if (t->procs[i].proc_id == t->procs[j].proc_id)
        fprintf(stderr,
                "nxtrace: %s and %s are logs of one process id "
                "(%08x): their contexts are merged\n",
                t->procs[j].file, t->procs[i].file, t->procs[i].proc_id);
  if (t->nprocs == 0) {
    fprintf(stderr, "nxtrace: %s: no readable log (*.nxt)\n", dir);
    for (size_t i = 0; i < rd.nmods; i++)
      free(rd.mods[i].name);
    free(rd.mods);
    return -1;
  }
  resolve_names(&rd);
  map_clocks(t);
  qsort(t->evs, t->nevs, sizeof(*t->evs), cmp_ev);
  build_contexts(t);
  build_runs(t);
  build_locations(t);
  pair_sends(t);
  return 0;
}

void nxi_tr_free(struct tr_trace *t) {
  for (size_t i = 0; i < t->nprocs; i++) {
    free(t->procs[i].file);
    free(t->procs[i].threads);
  }
  for (size_t i = 0; i < t->nhandlers; i++)
    free(t->handlers[i].name);
  for (size_t i = 0; i < t->nmods; i++)
    free(t->mods[i]);
  free(t->procs);
  free(t->hosts);
  free(t->evs);
  free(t->ctxs);
  free(t->runs);
  free(t->locs);
  free(t->handlers);
  free(t->mods);
  memset(t, 0, sizeof(*t));
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
