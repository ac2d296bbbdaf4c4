/* nxtrace's model of a traced computation, shared by its parts: the logs
 * read (nxtrace_read.c), the model built (nxtrace_model.c), the OTF2
 * archive (nxtrace_otf2.c), the summary and the pictures
 * (nxtrace_report.c). docs/tracing.md describes them. */
#ifndef NXTRACE_H
#define NXTRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/trace_format.h"

#define TR_NOMOD (-1)

/* One record of a log in this machine's byte order, where it came from and
 * its time on the computation's one clock. */
struct tr_ev {
  struct nxt_rec r;
  uint64_t gt;     /* global time: ns since 1970 (the clock mapping) */
  uint32_t proc;   /* index in tr_trace.procs */
  uint32_t thread; /* index in its process's threads (order of appearance) */
  int32_t mod;     /* r.module as an index in tr_trace.mods, or TR_NOMOD */
  int32_t aux_mod; /* FALLBACK: aux as an index in tr_trace.mods */
  size_t seq;      /* position among all records read: the last tie-break */
};

struct tr_proc {
  char *file;
  uint32_t proc_id;
  uint64_t pid;
  char host[65];
  uint8_t uuid[16];
  size_t host_ix;
  int swapped;       /* written in the other byte order */
  uint64_t *threads; /* thread ids, in order of first appearance */
  size_t nthreads;
  int16_t modmap[256]; /* the log's module index -> tr_trace.mods */
  /* Its earliest and latest clock pairs (CLOCK_MONOTONIC, CLOCK_REALTIME). */
  uint64_t mono_lo, real_lo, mono_hi, real_hi;
  uint64_t mono_last; /* its last event's time, CLOCK_MONOTONIC */
};

struct tr_host {
  uint8_t uuid[16];
  char name[65];
  /* The host's clock mapping: realtime = real0 + (mono - mono0) * slope,
   * for a host lined up by its realtime clock (via -1). */
  uint64_t mono0, real0;
  long double slope;
  /* Or lined up with host `via` by measured offsets (NXT_OFFSET): via's
   * clock reads this one's plus off(mono) = off0 + (mono - off_t) *
   * off_slope. `samples` measurements to the host it was reached from
   * (0: none), the best round trip best_rtt ns; rt_off: how far outside
   * their bounds the realtime clocks put the offset (0: within). */
  long via;
  long double off_t, off0, off_slope, rt_off;
  size_t samples;
  uint32_t best_rtt;
};

/* A clock offset measured by process `proc` (an index in procs) to the
 * process whose id is `peer`: at `t` (proc's CLOCK_MONOTONIC), peer's
 * clock read `off` ns more, to within rtt / 2. */
struct tr_sample {
  uint32_t proc, peer;
  uint64_t t;
  int64_t off;
  uint32_t rtt;
};

/* A context, or (id 0) a process's own events outside any context. */
struct tr_ctx {
  uint64_t id;
  long proc;     /* index in procs, -1: no log of its process was read */
  uint32_t rank; /* in the communicator of all contexts (id != 0) */
  size_t loc0;   /* its first location (the communicator's member) */
};

enum tr_run_kind { TR_RUN_HANDLER, TR_RUN_WAIT };

/* A handler's run (BEGIN to END) or a wait on a full queue. */
struct tr_run {
  enum tr_run_kind kind;
  size_t ctx; /* index in ctxs */
  uint32_t proc, thread;
  uint32_t handler;
  uint64_t t0, t1; /* global times */
  size_t begin_ev; /* index in evs of its BEGIN (or WAIT_BEGIN) */
  int finished;    /* its END was read; else t1 is its process's last */
  size_t loc;      /* index in locs */
  int top;         /* not nested in another run of its location */
  long send;       /* the SEND it ran (index in evs), -1: none paired */
};

/* An OTF2 location: a (context, thread) pair, layer 0, or the extra
 * locations for runs that do not nest on it (layer 1, 2, ...). */
struct tr_loc {
  size_t ctx;
  uint32_t thread;
  uint32_t layer;
};

struct tr_handler {
  uint32_t id;
  char *name; /* NULL: no NXT_DEF_HANDLER for it */
};

struct tr_trace {
  struct tr_proc *procs;
  size_t nprocs;
  struct tr_host *hosts;
  size_t nhosts;
  struct tr_ev *evs; /* all events but definitions, sorted by (gt, seq) */
  size_t nevs;
  struct tr_ctx *ctxs; /* sorted: by process id, then id (0 first) */
  size_t nctxs;
  size_t nreal; /* contexts with an id: ranks 0..nreal-1 */
  struct tr_run *runs;
  size_t nruns;
  struct tr_loc *locs; /* sorted by (ctx, thread, layer) */
  size_t nlocs;
  struct tr_handler *handlers; /* sorted by id */
  size_t nhandlers;
  char **mods; /* module names, sorted */
  size_t nmods;
  uint64_t t_min, t_max;     /* the first and the last global time */
  struct tr_sample *samples; /* NXT_OFFSET records */
  size_t nsamples;
  /* What was read but could not be used. */
  size_t truncated, unpaired_ends, unfinished, unknown_recs;
};

/* Reads every *.nxt in dir into t, building contexts, runs and
 * locations. Notes on skipped files and truncated chunks go to stderr.
 * Returns 0, or -1 if no log could be read (said on stderr). */
int nxi_tr_load(const char *dir, struct tr_trace *t);
void nxi_tr_free(struct tr_trace *t);

/* The model from the events read, their times mapped (nxtrace_model.c). */
void nxi_tr_build(struct tr_trace *t);
/* Orders: locations by (context, thread, layer), for qsort and bsearch;
 * two runs of one location by start, the outer (longer) one first, then
 * by their BEGIN's place in the events. */
int nxi_tr_cmp_loc(const void *a, const void *b);
int nxi_tr_cmp_span(const struct tr_run *x, const struct tr_run *y);

/* Allocation that ends the tool when memory runs out; reserve grows *v (of
 * *cap elements of size sz) to hold n. */
void *nxi_tr_realloc(void *p, size_t n);
void *nxi_tr_calloc(size_t n, size_t sz);
void nxi_tr_reserve(void **v, size_t *cap, size_t n, size_t sz);
/* qsort, for arrays that may be empty and NULL (qsort's base may not). */
void nxi_tr_sort(void *base, size_t n, size_t sz,
                 int (*cmp)(const void *, const void *));

/* Helpers for the parts that print: a handler's index in handlers (every
 * handler of a run, send or hop is there), its name, a context's name and
 * a context's index (id 0: the process's own, by its index in procs). */
size_t nxi_tr_handler_index(const struct tr_trace *t, uint32_t id);
const char *nxi_tr_handler_name(const struct tr_trace *t, uint32_t id,
                                char *buf, size_t len);
const char *nxi_tr_ctx_name(const struct tr_trace *t, size_t ctx, char *buf,
                            size_t len);
long nxi_tr_ctx_find(const struct tr_trace *t, uint64_t id, uint32_t proc);

/* Writes dir/nexus.otf2 (and nexus.def, nexus/). Returns 0 or -1 (said). */
int nxi_tr_write_otf2(const struct tr_trace *t, const char *dir);

/* Prints the summary on out. */
void nxi_tr_summary(const struct tr_trace *t, FILE *out);

/* Writes prefix-matrix.png and prefix-timeline.png through gnuplot;
 * by_bytes colours the matrix by bytes. Returns 0 or -1 (said). */
int nxi_tr_png(const struct tr_trace *t, const char *prefix, int by_bytes);

#endif
