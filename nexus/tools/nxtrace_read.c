/* nxtrace's reader: the *.nxt logs of a directory (base/trace_format.h), in
 * either byte order, their names resolved and their times mapped to one
 * clock; nxtrace_model.c builds the rest of the model from them. */
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
_Static_assert(sizeof(struct nxt_chunk) == 56, "nxt_chunk layout");
_Static_assert(sizeof(struct nxt_rec) == 48, "nxt_rec layout");
_Static_assert(sizeof(struct nxt_send) == 32, "nxt_send layout");
_Static_assert(sizeof(struct nxt_end_s) == 16, "nxt_end_s layout");
_Static_assert(sizeof(struct nxt_end) == 24, "nxt_end layout");

#define REC sizeof(struct nxt_rec)

void *nxi_tr_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (q == NULL) {
    fprintf(stderr, "nxtrace: out of memory\n");
    exit(1);
  }
  return q;
}

void *nxi_tr_calloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (p == NULL) {
    fprintf(stderr, "nxtrace: out of memory\n");
    exit(1);
  }
  return p;
}

void nxi_tr_sort(void *base, size_t n, size_t sz,
                 int (*cmp)(const void *, const void *)) {
  if (n > 1)
    qsort(base, n, sz, cmp);
}

void nxi_tr_reserve(void **v, size_t *cap, size_t n, size_t sz) {
  if (n <= *cap)
    return;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < n)
    c *= 2;
  *v = nxi_tr_realloc(*v, c * sz);
  *cap = c;
}

static char *xstrndup(const char *s, size_t n) {
  char *d = nxi_tr_realloc(NULL, n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* The records of a log are read in the writer's byte order. */
static uint32_t sw32(uint32_t v, int s) { return nxt_sw32(v, s); }
static uint64_t sw64(uint64_t v, int s) { return nxt_sw64(v, s); }

/* Definitions are gathered while reading and resolved after. */
struct def_mod {
  uint32_t proc;
  uint8_t index;
  char *name;
};

struct reader {
  struct tr_trace *t;
  size_t cap_procs, cap_evs, cap_samples;
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
  unsigned char *b = nxi_tr_realloc(NULL, n);
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
  nxi_tr_reserve((void **)&t->handlers, &rd->cap_handlers, t->nhandlers + 1,
                 sizeof(*t->handlers));
  t->handlers[t->nhandlers].id = id;
  t->handlers[t->nhandlers].name = name;
  t->nhandlers++;
}

static int thread_index(struct tr_proc *p, uint64_t thread) {
  for (size_t i = 0; i < p->nthreads; i++)
    if (p->threads[i] == thread)
      return (int)i;
  p->threads = nxi_tr_realloc(p->threads, (p->nthreads + 1) * sizeof(uint64_t));
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
  nxi_tr_reserve((void **)&t->procs, &rd->cap_procs, t->nprocs + 1,
                 sizeof(*t->procs));
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
  size_t nsamples0 = t->nsamples;
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
    uint64_t bytes = sw32(c.bytes, s);
    if (bytes > len - off - sizeof(c)) {
      fprintf(stderr,
              "nxtrace: %s: the last chunk (at byte %zu, %llu "
              "bytes of records) is truncated: ignored\n",
              name, off, (unsigned long long)bytes);
      t->truncated++;
      break;
    }
    if (bytes % 8 != 0) {
      snprintf(why, whylen, "a chunk of %llu bytes at byte %zu",
               (unsigned long long)bytes, off);
      goto err;
    }
    c.thread = sw64(c.thread, s);
    c.tick0 = sw64(c.tick0, s);
    c.mono0 = sw64(c.mono0, s);
    c.tick1 = sw64(c.tick1, s);
    c.mono1 = sw64(c.mono1, s);
    c.runs0 = sw64(c.runs0, s);
    struct nxt_dstate st = {c.thread, c.runs0};
    int thread = thread_index(p, c.thread);
    const unsigned char *rp = b + off + sizeof(c);
    for (uint64_t at = 0; at < bytes;) {
      struct nxt_rec r;
      size_t rl = nxt_decode(rp + at, bytes - at, s, p->proc_id, &st, &r);
      if (rl == 0) {
        snprintf(why, whylen, "a record runs past its chunk at byte %zu", off);
        goto err;
      }
      const unsigned char *text = rp + at + REC;
      at += rl;
      if (r.type == NXT_DEF_HANDLER || r.type == NXT_DEF_MODULE) {
        char *nm = xstrndup((const char *)text, r.bytes);
        /* Names go into aligned text and gnuplot's scripts: no control
         * characters (a damaged log's). */
        for (char *c = nm; *c; c++)
          if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
        if (r.type == NXT_DEF_HANDLER) {
          add_handler_name(rd, r.handler, nm);
        } else {
          nxi_tr_reserve((void **)&rd->mods, &rd->cap_mods, rd->nmods + 1,
                         sizeof(*rd->mods));
          rd->mods[rd->nmods++] =
              (struct def_mod){(uint32_t)t->nprocs, r.module, nm};
        }
        continue;
      }
      if (r.type == NXT_CLOCK) {
        if (r.t > p->mono_last)
          p->mono_last = r.t;
        clock_pair(p, r.t, r.x);
        continue;
      }
      r.t = nxt_ns(&c, r.t);
      if (r.t > p->mono_last)
        p->mono_last = r.t;
      if (r.type == NXT_OFFSET) {
        nxi_tr_reserve((void **)&t->samples, &rd->cap_samples, t->nsamples + 1,
                       sizeof(*t->samples));
        t->samples[t->nsamples++] =
            (struct tr_sample){(uint32_t)t->nprocs, (uint32_t)(r.peer >> 32),
                               r.t, (int64_t)r.x, r.aux};
        continue;
      }
      if (r.type < NXT_SEND || r.type > NXT_CONTEXT_DESTROY) {
        t->unknown_recs++;
        continue;
      }
      nxi_tr_reserve((void **)&t->evs, &rd->cap_evs, t->nevs + 1,
                     sizeof(*t->evs));
      struct tr_ev *e = &t->evs[t->nevs];
      memset(e, 0, sizeof(*e));
      e->r = r;
      e->proc = (uint32_t)t->nprocs;
      e->thread = (uint32_t)thread;
      e->seq = t->nevs;
      t->nevs++;
    }
    off += sizeof(c) + bytes;
  }
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  p->file = xstrndup(base, strlen(base));
  t->nprocs++;
  return 0;
err:
  t->nevs = nevs0;
  t->nsamples = nsamples0;
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
      t->mods = nxi_tr_realloc(t->mods, (t->nmods + 1) * sizeof(char *));
      t->mods[t->nmods++] =
          xstrndup(rd->mods[i].name, strlen(rd->mods[i].name));
    }
  }
  nxi_tr_sort(t->mods, t->nmods, sizeof(char *), cmp_str);
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
    /* Every handler id a run or send names has its entry (and region),
     * named or not: 0 too, from a damaged log. */
    if (e->r.type == NXT_SEND || e->r.type == NXT_BEGIN || e->r.type == NXT_HOP)
      add_handler_name(rd, e->r.handler, NULL);
  }
  nxi_tr_sort(t->handlers, t->nhandlers, sizeof(*t->handlers), cmp_handler);
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

/* The samples between hosts `h` and `g` as (h's clock, g's clock less
 * h's) pairs, into `v` (room for all); to[i] is the host of sample i's
 * peer (SIZE_MAX: no log of it). Returns how many. */
static size_t host_samples(const struct tr_trace *t, const size_t *to_host,
                           size_t h, size_t g, struct tr_sample *v) {
  size_t n = 0;
  for (size_t i = 0; i < t->nsamples; i++) {
    const struct tr_sample *s = &t->samples[i];
    size_t from = t->procs[s->proc].host_ix, to = to_host[i];
    if (from == h && to == g) {
      v[n++] = *s;
    } else if (from == g && to == h) {
      /* Measured the other way: g's t is h's t + off. */
      v[n] = *s;
      v[n].t = s->t + (uint64_t)s->off;
      v[n].off = s->off == INT64_MIN ? INT64_MAX : -s->off;
      n++;
    }
  }
  return n;
}

static int cmp_sample_t(const void *a, const void *b) {
  const struct tr_sample *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t;
}

/* What `n` samples say of an offset: each puts it within half its round
 * trip of its estimate, so it lies in the intersection [lo, hi] of their
 * intervals, at the time of the best one (or, if they disagree, in the
 * best one's interval alone: a clock that drifted between them). */
struct bound {
  long double t, lo, hi;
};
static struct bound bound_of(const struct tr_sample *v, size_t n) {
  const struct tr_sample *best = &v[0];
  long double lo = -1e30L, hi = 1e30L;
  for (size_t i = 0; i < n; i++) {
    if (v[i].rtt < best->rtt)
      best = &v[i];
    long double half = (long double)v[i].rtt / 2;
    if ((long double)v[i].off - half > lo)
      lo = (long double)v[i].off - half;
    if ((long double)v[i].off + half < hi)
      hi = (long double)v[i].off + half;
  }
  if (lo > hi) {
    lo = (long double)best->off - (long double)best->rtt / 2;
    hi = (long double)best->off + (long double)best->rtt / 2;
  }
  return (struct bound){(long double)best->t, lo, hi};
}

/* Host h's clock less host g's at h's time `t`, by their realtime lines. */
static long double realtime_off(const struct tr_host *h,
                                const struct tr_host *g, long double t) {
  long double rt =
      (long double)h->real0 + (t - (long double)h->mono0) * h->slope;
  long double mg =
      (long double)g->mono0 + (rt - (long double)g->real0) / g->slope;
  return mg - t;
}

/* Host `h` against host `g`, by their samples (n > 0, in v, as g's clock
 * less h's at h's time), taken as Score-P takes offsets measured at start
 * and end: the earlier half and the later half. Where the hosts' realtime
 * clocks agree with both halves' bounds (to 1 us), h keeps its realtime
 * line (on one host, or hosts that NTP or PTP keeps closer than the round
 * trips can tell); else h is lined up with g by the bounds' middles, along
 * the line through them where they are far enough apart to tell a drift
 * (and it is one a clock can have: 500 ppm at most), else by the narrower
 * one. */
static void line_up(struct tr_host *h, const struct tr_host *g, size_t gi,
                    struct tr_sample *v, size_t n) {
  nxi_tr_sort(v, n, sizeof(*v), cmp_sample_t);
  struct bound a = bound_of(v, (n + 1) / 2);
  struct bound b = n > 1 ? bound_of(v + (n + 1) / 2, n / 2) : a;
  h->samples = n;
  h->best_rtt = UINT32_MAX;
  for (size_t i = 0; i < n; i++)
    if (v[i].rtt < h->best_rtt)
      h->best_rtt = v[i].rtt;
  long double ra = realtime_off(h, g, a.t), rb = realtime_off(h, g, b.t);
  long double slack = 1000;
  h->rt_off = ra < a.lo ? ra - a.lo : ra > a.hi ? ra - a.hi : 0;
  if (rb < b.lo - slack || rb > b.hi + slack)
    h->rt_off = rb < b.lo ? rb - b.lo : rb - b.hi;
  if (ra >= a.lo - slack && ra <= a.hi + slack && rb >= b.lo - slack &&
      rb <= b.hi + slack)
    return; /* its realtime line agrees: kept (via stays -1) */
  h->via = (long)gi;
  long double ca = (a.lo + a.hi) / 2, cb = (b.lo + b.hi) / 2;
  long double span = b.t - a.t, err = (a.hi - a.lo + b.hi - b.lo) / 4;
  h->off_t = a.t;
  h->off0 = ca;
  h->off_slope = 0;
  if (span > 0 && err / span <= 50e-6L && (cb - ca) / span <= 500e-6L &&
      (cb - ca) / span >= -500e-6L)
    h->off_slope = (cb - ca) / span;
  else if (b.hi - b.lo < a.hi - a.lo)
    h->off_t = b.t, h->off0 = cb;
}

/* Hosts joined by measured offsets: each group is lined up with its first
 * host, which keeps its realtime line. */
static void line_up_hosts(struct tr_trace *t) {
  if (t->nsamples == 0 || t->nhosts < 2)
    return;
  struct tr_sample *v = nxi_tr_realloc(NULL, t->nsamples * sizeof(*v));
  size_t *to_host = nxi_tr_realloc(NULL, t->nsamples * sizeof(*to_host));
  for (size_t i = 0; i < t->nsamples; i++) {
    to_host[i] = SIZE_MAX;
    for (size_t k = 0; k < t->nprocs && to_host[i] == SIZE_MAX; k++)
      if (t->procs[k].proc_id == t->samples[i].peer)
        to_host[i] = t->procs[k].host_ix;
  }
  size_t *queue = nxi_tr_realloc(NULL, t->nhosts * sizeof(*queue));
  char *placed = nxi_tr_calloc(t->nhosts, 1);
  for (size_t root = 0; root < t->nhosts; root++) {
    if (placed[root])
      continue;
    placed[root] = 1;
    size_t qh = 0, qt = 0;
    queue[qt++] = root;
    while (qh < qt) {
      size_t g = queue[qh++];
      for (size_t h = 0; h < t->nhosts; h++) {
        size_t n;
        if (placed[h] || (n = host_samples(t, to_host, h, g, v)) == 0)
          continue;
        line_up(&t->hosts[h], &t->hosts[g], g, v, n);
        placed[h] = 1;
        queue[qt++] = h;
      }
    }
  }
  free(placed);
  free(queue);
  free(to_host);
  free(v);
}

/* A time of host `h`'s clock on the computation's one clock: along the
 * measured offsets to a host lined up by its realtime clock. */
static long double global_time(const struct tr_trace *t, size_t h,
                               long double mono) {
  for (size_t hops = 0; t->hosts[h].via >= 0 && hops < t->nhosts; hops++) {
    const struct tr_host *x = &t->hosts[h];
    mono += x->off0 + (mono - x->off_t) * x->off_slope;
    h = (size_t)x->via;
  }
  const struct tr_host *r = &t->hosts[h];
  return (long double)r->real0 + (mono - (long double)r->mono0) * r->slope;
}

/* One clock: processes of a host share CLOCK_MONOTONIC, so they share one
 * mapping. A host is lined up with another by the clock offsets its
 * processes measured (NXT_OFFSET) where there are any; else by its
 * realtime clock: the line through the host's earliest and latest clock
 * pairs (over all its logs). */
static void map_clocks(struct tr_trace *t) {
  t->hosts =
      nxi_tr_realloc(NULL, (t->nprocs ? t->nprocs : 1) * sizeof(*t->hosts));
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
      n->via = -1;
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
  line_up_hosts(t);
  t->t_min = UINT64_MAX;
  t->t_max = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    struct tr_ev *e = &t->evs[i];
    long double g =
        global_time(t, t->procs[e->proc].host_ix, (long double)e->r.t);
    e->gt = !(g > 0) ? 0 : g >= 1.8e19L ? UINT64_MAX : (uint64_t)g;
    if (e->gt < t->t_min)
      t->t_min = e->gt;
    if (e->gt > t->t_max)
      t->t_max = e->gt;
  }
  if (t->nevs == 0)
    t->t_min = t->t_max = 0;
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
    names = nxi_tr_realloc(names, (nnames + 1) * sizeof(char *));
    names[nnames++] = xstrndup(de->d_name, strlen(de->d_name));
  }
  closedir(d);
  nxi_tr_sort(names, nnames, sizeof(char *), cmp_str);
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
    nxi_tr_free(t);
    return -1;
  }
  resolve_names(&rd);
  map_clocks(t);
  nxi_tr_build(t);
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
  free(t->samples);
  free(t->ctxs);
  free(t->runs);
  free(t->locs);
  free(t->handlers);
  free(t->mods);
  memset(t, 0, sizeof(*t));
}
