/* nxtrace's reports: the summary printed on stdout and the two pictures
 * drawn through gnuplot (docs/tracing.md explains their columns). */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nxtrace.h"

extern char **environ;

/* What the summary and the matrix count per (sender, destination). */
struct pair {
  size_t from, to; /* context indices */
  uint64_t rsrs, bytes;
  uint64_t mods; /* bit i: tr_trace.mods[i] carried some */
  int at_least;  /* some record said UINT32_MAX bytes: "that many or more" */
};

static int cmp_pair(const void *a, const void *b) {
  const struct pair *x = a, *y = b;
  if (x->from != y->from)
    return x->from < y->from ? -1 : 1;
  return x->to < y->to ? -1 : x->to > y->to;
}

/* The pairs, sorted by sender then destination (context order). */
static struct pair *count_pairs(const struct tr_trace *t, size_t *np) {
  struct pair *p = nxi_tr_calloc(t->nevs + 1, sizeof(*p));
  size_t n = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    if (e->r.type != NXT_SEND || e->r.peer == 0)
      continue;
    struct pair *q = &p[n++];
    q->from = (size_t)nxi_tr_ctx_find(t, e->r.ctx, e->proc);
    q->to = (size_t)nxi_tr_ctx_find(t, e->r.peer, 0);
    q->rsrs = 1;
    q->bytes = e->r.bytes;
    q->at_least = e->r.bytes == UINT32_MAX;
    q->mods = e->mod == TR_NOMOD || e->mod >= 64 ? 0 : 1ull << e->mod;
  }
  nxi_tr_sort(p, n, sizeof(*p), cmp_pair);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m > 0 && cmp_pair(&p[m - 1], &p[i]) == 0) {
      p[m - 1].rsrs++;
      p[m - 1].bytes += p[i].bytes;
      p[m - 1].mods |= p[i].mods;
      p[m - 1].at_least |= p[i].at_least;
    } else {
      p[m++] = p[i];
    }
  }
  *np = m;
  return p;
}

static void mods_list(const struct tr_trace *t, uint64_t mods, char *buf,
                      size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < t->nmods && i < 64; i++)
    if (mods & (1ull << i))
      n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s",
                            n ? "," : "", t->mods[i]);
  if (n == 0)
    snprintf(buf, len, "-");
}

/* The letters marking a matrix cell: each module's first letter. */
static void mods_letters(const struct tr_trace *t, uint64_t mods, char *buf,
                         size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < t->nmods && i < 64 && n + 1 < len; i++)
    if (mods & (1ull << i))
      buf[n++] = t->mods[i][0];
  buf[n] = '\0';
}

static const struct tr_trace *sort_t;

/* Handler runs by (handler name, destination context), then duration. */
static int cmp_hrun(const void *a, const void *b) {
  const struct tr_run *x = &sort_t->runs[*(const size_t *)a];
  const struct tr_run *y = &sort_t->runs[*(const size_t *)b];
  char bx[32], by[32];
  int c = strcmp(nxi_tr_handler_name(sort_t, x->handler, bx, sizeof(bx)),
                 nxi_tr_handler_name(sort_t, y->handler, by, sizeof(by)));
  if (c != 0)
    return c;
  if (x->handler != y->handler)
    return x->handler < y->handler ? -1 : 1;
  if (x->ctx != y->ctx)
    return x->ctx < y->ctx ? -1 : 1;
  uint64_t dx = x->t1 - x->t0, dy = y->t1 - y->t0;
  return dx < dy ? -1 : dx > dy;
}

static void summary_pairs(const struct tr_trace *t, FILE *out, uint64_t *rsrs,
                          uint64_t *bytes) {
  size_t np;
  struct pair *p = count_pairs(t, &np);
  char a[40], b[40], m[256];
  fprintf(out, "RSRs by pair (sender -> destination)\n");
  fprintf(out, "  %-17s %-17s %10s %14s  %s\n", "sender", "destination", "rsrs",
          "bytes", "modules");
  for (size_t i = 0; i < np; i++) {
    char by[32];
    snprintf(by, sizeof(by), "%s%" PRIu64, p[i].at_least ? ">=" : "",
             p[i].bytes);
    mods_list(t, p[i].mods, m, sizeof(m));
    fprintf(out, "  %-17s %-17s %10" PRIu64 " %14s  %s\n",
            nxi_tr_ctx_name(t, p[i].from, a, sizeof(a)),
            nxi_tr_ctx_name(t, p[i].to, b, sizeof(b)), p[i].rsrs, by, m);
    *rsrs += p[i].rsrs;
    *bytes += p[i].bytes;
  }
  if (np == 0)
    fprintf(out, "  (none)\n");
  free(p);
}

static void summary_handlers(const struct tr_trace *t, FILE *out) {
  size_t *ix = nxi_tr_calloc(t->nruns + 1, sizeof(size_t));
  size_t n = 0;
  int width = 7;
  char hb[32], cb[40];
  for (size_t i = 0; i < t->nruns; i++) {
    const struct tr_run *r = &t->runs[i];
    if (r->kind != TR_RUN_HANDLER || !r->finished)
      continue;
    ix[n++] = i;
    int w = (int)strlen(nxi_tr_handler_name(t, r->handler, hb, sizeof(hb)));
    if (w > width)
      width = w;
  }
  sort_t = t;
  nxi_tr_sort(ix, n, sizeof(size_t), cmp_hrun);
  fprintf(out, "\nHandler runs by handler and destination context\n");
  fprintf(out, "  %-*s %-17s %10s %12s %12s\n", width, "handler", "context",
          "runs", "mean us", "p99 us");
  for (size_t i = 0; i < n;) {
    const struct tr_run *r = &t->runs[ix[i]];
    size_t j = i;
    uint64_t sum = 0;
    while (j < n && t->runs[ix[j]].handler == r->handler &&
           t->runs[ix[j]].ctx == r->ctx) {
      sum += t->runs[ix[j]].t1 - t->runs[ix[j]].t0;
      j++;
    }
    size_t k = j - i;
    /* p99 by nearest rank: the ceil(0.99 k)-th shortest run. */
    size_t rank = (99 * k + 99) / 100;
    const struct tr_run *p99 = &t->runs[ix[i + rank - 1]];
    fprintf(out, "  %-*s %-17s %10zu %12.3f %12.3f\n", width,
            nxi_tr_handler_name(t, r->handler, hb, sizeof(hb)),
            nxi_tr_ctx_name(t, r->ctx, cb, sizeof(cb)), k,
            (double)sum / (double)k / 1e3, (double)(p99->t1 - p99->t0) / 1e3);
    i = j;
  }
  if (n == 0)
    fprintf(out, "  (none)\n");
  free(ix);
}

static void summary_contexts(const struct tr_trace *t, FILE *out,
                             uint64_t *busy_all, uint64_t *wait_all,
                             uint64_t *runs_all) {
  uint64_t *busy = nxi_tr_calloc(t->nctxs, sizeof(uint64_t));
  uint64_t *wait = nxi_tr_calloc(t->nctxs, sizeof(uint64_t));
  uint64_t *runs = nxi_tr_calloc(t->nctxs, sizeof(uint64_t));
  uint64_t *sent = nxi_tr_calloc(t->nctxs, sizeof(uint64_t));
  for (size_t i = 0; i < t->nruns; i++) {
    const struct tr_run *r = &t->runs[i];
    if (!r->finished)
      continue;
    if (r->kind == TR_RUN_WAIT) {
      wait[r->ctx] += r->t1 - r->t0;
      continue;
    }
    runs[r->ctx]++;
    if (r->top)
      busy[r->ctx] += r->t1 - r->t0;
  }
  for (size_t i = 0; i < t->nevs; i++)
    if (t->evs[i].r.type == NXT_SEND)
      sent[nxi_tr_ctx_find(t, t->evs[i].r.ctx, t->evs[i].proc)]++;
  fprintf(out, "\nContexts\n");
  fprintf(out, "  %-17s %-8s %8s %-16s %8s %8s %12s %12s\n", "context",
          "process", "pid", "host", "sent", "runs", "busy ms", "waiting ms");
  char cb[40];
  for (size_t c = 0; c < t->nctxs; c++) {
    const struct tr_ctx *x = &t->ctxs[c];
    char proc[16] = "-", pid[24] = "-", host[65] = "-";
    if (x->proc >= 0) {
      const struct tr_proc *p = &t->procs[x->proc];
      snprintf(proc, sizeof(proc), "%08x", p->proc_id);
      snprintf(pid, sizeof(pid), "%" PRIu64, p->pid);
      snprintf(host, sizeof(host), "%s", p->host);
    } else {
      snprintf(proc, sizeof(proc), "%08x", (uint32_t)(x->id >> 32));
      snprintf(pid, sizeof(pid), "(no log)");
    }
    fprintf(out,
            "  %-17s %-8s %8s %-16s %8" PRIu64 " %8" PRIu64 " %12.3f %12.3f\n",
            nxi_tr_ctx_name(t, c, cb, sizeof(cb)), proc, pid, host, sent[c],
            runs[c], (double)busy[c] / 1e6, (double)wait[c] / 1e6);
    *busy_all += busy[c];
    *wait_all += wait[c];
    *runs_all += runs[c];
  }
  free(busy);
  free(wait);
  free(runs);
  free(sent);
}

/* How the hosts' clocks were lined up: by measured offsets, or by their
 * realtime clocks. */
static void summary_clocks(const struct tr_trace *t, FILE *out) {
  if (t->nhosts < 2)
    return;
  fprintf(out, "clocks\n");
  for (size_t h = 0; h < t->nhosts; h++) {
    const struct tr_host *x = &t->hosts[h];
    if (x->via < 0 && x->samples == 0)
      fprintf(out, "  %-16s lined up by its realtime clock\n", x->name);
    else if (x->via < 0)
      fprintf(out,
              "  %-16s lined up by its realtime clock, within the bounds "
              "of %zu measured offset%s (best round trip %.3f us)\n",
              x->name, x->samples, x->samples == 1 ? "" : "s",
              (double)x->best_rtt / 1e3);
    else
      fprintf(out,
              "  %-16s lined up with %s by %zu measured offset%s (best "
              "round trip %.3f us): %s - %s = %+.3f us, drift %+.3f ppm; "
              "its realtime clock was off by %+.3f us or more\n",
              x->name, t->hosts[x->via].name, x->samples,
              x->samples == 1 ? "" : "s", (double)x->best_rtt / 1e3,
              t->hosts[x->via].name, x->name, (double)x->off0 / 1e3,
              (double)x->off_slope * 1e6, (double)x->rt_off / 1e3);
  }
  fprintf(out, "\n");
}

void nxi_tr_summary(const struct tr_trace *t, FILE *out) {
  uint64_t rsrs = 0, bytes = 0, busy = 0, wait = 0, runs = 0;
  fprintf(out,
          "nxtrace: %zu process%s on %zu host%s, %zu context%s, %zu "
          "location%s, %.3f ms traced\n\n",
          t->nprocs, t->nprocs == 1 ? "" : "es", t->nhosts,
          t->nhosts == 1 ? "" : "s", t->nreal, t->nreal == 1 ? "" : "s",
          t->nlocs, t->nlocs == 1 ? "" : "s",
          (double)(t->t_max - t->t_min) / 1e6);
  summary_clocks(t, out);
  summary_pairs(t, out, &rsrs, &bytes);
  summary_handlers(t, out);
  summary_contexts(t, out, &busy, &wait, &runs);
  size_t fallbacks = 0, hops = 0, losses = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    fallbacks += t->evs[i].r.type == NXT_FALLBACK;
    hops += t->evs[i].r.type == NXT_HOP;
    losses += t->evs[i].r.type == NXT_PROC_LOSS;
  }
  fprintf(out, "\nTotals\n");
  fprintf(out, "  %-18s %" PRIu64 "\n", "rsrs", rsrs);
  fprintf(out, "  %-18s %" PRIu64 "\n", "bytes", bytes);
  fprintf(out, "  %-18s %" PRIu64 "\n", "handler runs", runs);
  fprintf(out, "  %-18s %.3f\n", "busy ms", (double)busy / 1e6);
  fprintf(out, "  %-18s %.3f\n", "waiting ms", (double)wait / 1e6);
  fprintf(out, "  %-18s %zu\n", "fallbacks", fallbacks);
  fprintf(out, "  %-18s %zu\n", "hops", hops);
  fprintf(out, "  %-18s %zu\n", "losses", losses);
  fprintf(out, "  %-18s %zu\n", "unfinished runs", t->unfinished);
  fprintf(out, "  %-18s %zu\n", "unpaired ends", t->unpaired_ends);
  fprintf(out, "  %-18s %zu\n", "truncated chunks", t->truncated);
  if (t->unknown_recs)
    fprintf(out, "  %-18s %zu\n", "unknown records", t->unknown_recs);
}

/* Pictures. Names go into gnuplot's single-quoted strings, where a quote
 * is doubled. */
static void put_quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'')
      fputc('\'', f);
    fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
  }
  fputc('\'', f);
}

/* A short label for a context on an axis: process:low 32 bits. */
static void ctx_label(const struct tr_trace *t, size_t c, char *buf,
                      size_t len) {
  const struct tr_ctx *x = &t->ctxs[c];
  if (x->id == 0)
    nxi_tr_ctx_name(t, c, buf, len);
  else
    snprintf(buf, len, "%08x:%08x", (uint32_t)(x->id >> 32), (uint32_t)x->id);
}

/* Creates `name` in the folder `tmp` for writing, its path in `path` (of
 * PATH_BYTES); NULL, said, if it cannot. */
#define PATH_BYTES 4200
static FILE *create_in(const char *tmp, const char *name, char *path) {
  snprintf(path, PATH_BYTES, "%s/%s", tmp, name);
  FILE *f = fopen(path, "w");
  if (f == NULL)
    fprintf(stderr, "nxtrace: %s: %s\n", path, strerror(errno));
  return f;
}

static int write_matrix(const struct tr_trace *t, const char *tmp,
                        const char *prefix, int by_bytes, FILE *gp) {
  size_t np;
  struct pair *p = count_pairs(t, &np);
  /* The contexts that sent or received, in context order. */
  long *axis = nxi_tr_calloc(t->nctxs, sizeof(long));
  size_t n = 0;
  for (size_t c = 0; c < t->nctxs; c++) {
    axis[c] = -1;
    for (size_t i = 0; i < np && axis[c] < 0; i++)
      if (p[i].from == c || p[i].to == c)
        axis[c] = (long)n++;
  }
  char path[PATH_BYTES];
  FILE *f = create_in(tmp, "matrix.dat", path);
  if (f == NULL) {
    free(p);
    free(axis);
    return -1;
  }
  uint64_t *cell = nxi_tr_calloc(n * n + 1, sizeof(uint64_t));
  for (size_t i = 0; i < np; i++)
    cell[(size_t)axis[p[i].from] * n + (size_t)axis[p[i].to]] =
        by_bytes ? p[i].bytes : p[i].rsrs;
  for (size_t y = 0; y < n; y++) {
    for (size_t x = 0; x < n; x++)
      fprintf(f, "%s%" PRIu64, x ? " " : "", cell[y * n + x]);
    fprintf(f, "\n");
  }
  if (n == 0)
    fprintf(f, "0\n");
  fclose(f);
  free(cell);
  fprintf(gp, "reset\nset termoption noenhanced\n");
  fprintf(gp, "set terminal pngcairo size %zu,%zu font 'sans,10'\n",
          400 + 40 * n, 300 + 40 * n);
  fprintf(gp, "set output ");
  char out[4200];
  snprintf(out, sizeof(out), "%s-matrix.png", prefix);
  put_quoted(gp, out);
  fprintf(gp,
          "\nset title 'RSRs, sender (row) to destination (column), "
          "coloured by %s'\n",
          by_bytes ? "bytes" : "RSR count");
  fprintf(gp, "set xlabel 'destination'\nset ylabel 'sender'\n");
  fprintf(gp, "set palette defined (0 '#ffffff', 1 '#c6dbef', 2 '#6baed6', "
              "3 '#08306b')\nset cbrange [0:*]\n");
  fprintf(gp, "set cblabel '%s'\n", by_bytes ? "bytes" : "RSRs");
  fprintf(gp, "set xrange [-0.5:%zu.5]\nset yrange [%zu.5:-0.5]\n",
          n ? n - 1 : 0, n ? n - 1 : 0);
  fprintf(gp, "set xtics rotate by 45 right (");
  char lb[40];
  for (size_t c = 0, k = 0; c < t->nctxs; c++)
    if (axis[c] >= 0) {
      ctx_label(t, c, lb, sizeof(lb));
      fprintf(gp, "%s'%s' %zu", k++ ? ", " : "", lb, (size_t)axis[c]);
    }
  fprintf(gp, ")\nset ytics (");
  for (size_t c = 0, k = 0; c < t->nctxs; c++)
    if (axis[c] >= 0) {
      ctx_label(t, c, lb, sizeof(lb));
      fprintf(gp, "%s'%s' %zu", k++ ? ", " : "", lb, (size_t)axis[c]);
    }
  fprintf(gp, ")\n");
  for (size_t i = 0; i < np; i++) {
    char letters[65];
    mods_letters(t, p[i].mods, letters, sizeof(letters));
    fprintf(gp, "set label '%s' at %ld,%ld center front font 'sans,12'\n",
            letters[0] ? letters : "?", axis[p[i].to], axis[p[i].from]);
  }
  /* The letters' key, below the plot. */
  fprintf(gp, "set label 'modules: ");
  for (size_t m = 0; m < t->nmods; m++)
    fprintf(gp, "%s%c %s", m ? ", " : "", t->mods[m][0], t->mods[m]);
  fprintf(gp, "' at screen 0.02,0.02\nset bmargin 8\n");
  fprintf(gp, "plot '%s' matrix with image notitle\n", path);
  free(p);
  free(axis);
  return 0;
}

/* Colours of handlers in the timeline, in turn; waits are grey. */
static const char *const colours[] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#843c39"};

/* A run's data block: its handler's index, or the waits' (the last). */
static size_t run_block(const struct tr_trace *t, const struct tr_run *r) {
  return r->kind == TR_RUN_WAIT ? t->nhandlers
                                : nxi_tr_handler_index(t, r->handler);
}

static int write_timeline(const struct tr_trace *t, const char *tmp,
                          const char *prefix, FILE *gp) {
  /* Rows: the locations with runs, in location order. */
  long *row = nxi_tr_calloc(t->nlocs + 1, sizeof(long));
  size_t nrows = 0;
  for (size_t l = 0; l < t->nlocs; l++)
    row[l] = -1;
  for (size_t i = 0; i < t->nruns; i++)
    row[t->runs[i].loc] = 0;
  for (size_t l = 0; l < t->nlocs; l++)
    if (row[l] == 0)
      row[l] = (long)nrows++ + 1;
  char path[PATH_BYTES];
  FILE *f = create_in(tmp, "timeline.dat", path);
  if (f == NULL) {
    free(row);
    return -1;
  }
  /* One data block per handler (then the waits): gnuplot's index. Those
   * without runs are left out of the plot and its legend. */
  size_t blocks = t->nhandlers + 1;
  size_t *start = nxi_tr_calloc(blocks + 1, sizeof(size_t));
  size_t *by = nxi_tr_calloc(t->nruns + 1, sizeof(size_t));
  for (size_t i = 0; i < t->nruns; i++)
    start[run_block(t, &t->runs[i]) + 1]++;
  for (size_t h = 0; h < blocks; h++)
    start[h + 1] += start[h];
  size_t *fill = nxi_tr_calloc(blocks, sizeof(size_t));
  for (size_t i = 0; i < t->nruns; i++) {
    size_t h = run_block(t, &t->runs[i]);
    by[start[h] + fill[h]++] = i;
  }
  free(fill);
  /* A run shorter than a pixel (the picture is 1,400 wide, the plot about
   * 1,000 of it) is drawn a pixel wide: most handlers run for
   * microseconds, in a run of milliseconds. */
  double span = (double)(t->t_max - t->t_min) / 1e6;
  double least = span / 1000;
  for (size_t h = 0; h < blocks; h++) {
    for (size_t k = start[h]; k < start[h + 1]; k++) {
      const struct tr_run *r = &t->runs[by[k]];
      double x0 = (double)(r->t0 - t->t_min) / 1e6;
      double x1 = (double)(r->t1 - t->t_min) / 1e6;
      fprintf(f, "%.6f %.6f %ld\n", x0, x1 - x0 < least ? x0 + least : x1,
              row[r->loc] - 1);
    }
    if (start[h] == start[h + 1])
      fprintf(f, "nan nan nan\n");
    fprintf(f, "\n\n");
  }
  free(by);
  fclose(f);
  fprintf(gp, "reset\nset termoption noenhanced\n");
  fprintf(gp, "set terminal pngcairo size 1400,%zu font 'sans,10'\n",
          200 + 28 * (nrows ? nrows : 1));
  fprintf(gp, "set output ");
  char out[4200];
  snprintf(out, sizeof(out), "%s-timeline.png", prefix);
  put_quoted(gp, out);
  fprintf(gp, "\nset title 'Handler runs per context and thread'\n");
  fprintf(gp, "set xlabel 'ms since the first event'\n");
  fprintf(gp, "set xrange [0:%.6f]\n", span > 0 ? span * 1.01 : 1.0);
  fprintf(gp,
          "set yrange [%zu.6:-0.6]\nset key outside right top "
          "Left reverse\nset style fill solid 1.0 noborder\n",
          nrows ? nrows - 1 : 0);
  fprintf(gp, "set ytics (");
  char name[160];
  for (size_t l = 0, k = 0; l < t->nlocs; l++) {
    if (row[l] <= 0)
      continue;
    char cn[40];
    const struct tr_loc *lc = &t->locs[l];
    nxi_tr_ctx_name(t, lc->ctx, cn, sizeof(cn));
    int n = snprintf(name, sizeof(name), "%s t%u", cn, lc->thread);
    if (lc->layer == 1)
      snprintf(name + n, sizeof(name) - (size_t)n, " (blocked)");
    else if (lc->layer > 1)
      snprintf(name + n, sizeof(name) - (size_t)n, " (blocked %u)", lc->layer);
    fprintf(gp, "%s", k++ ? ", " : "");
    put_quoted(gp, name);
    fprintf(gp, " %ld", row[l] - 1);
  }
  fprintf(gp, ")\nplot ");
  char hb[32];
  int first = 1;
  size_t ncolours = sizeof(colours) / sizeof(*colours), k = 0;
  for (size_t h = 0; h < blocks; h++) {
    if (start[h] == start[h + 1])
      continue;
    const char *title =
        h < t->nhandlers
            ? nxi_tr_handler_name(t, t->handlers[h].id, hb, sizeof(hb))
            : "wait: full queue";
    const char *colour = h < t->nhandlers ? colours[k++ % ncolours] : "#999999";
    fprintf(gp,
            "%s'%s' index %zu using (($1+$2)/2):3:1:2:($3-0.35):($3+0.35) "
            "with boxxyerror lc rgb '%s' title ",
            first ? "" : ", \\\n  ", path, h, colour);
    put_quoted(gp, title);
    first = 0;
  }
  fprintf(gp, first ? "NaN notitle\n" : "\n");
  free(start);
  free(row);
  return 0;
}

static int run_gnuplot(const char *script) {
  char *argv[] = {"gnuplot", (char *)script, NULL};
  pid_t pid;
  int r = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
  if (r != 0) {
    fprintf(stderr, "nxtrace: cannot run gnuplot: %s\n", strerror(r));
    return -1;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "nxtrace: gnuplot failed (script %s)\n", script);
    return -1;
  }
  return 0;
}

int nxi_tr_png(const struct tr_trace *t, const char *prefix, int by_bytes) {
  const char *base = getenv("TMPDIR");
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s/nxtrace.XXXXXX",
           base && base[0] ? base : "/tmp");
  if (mkdtemp(tmp) == NULL) {
    fprintf(stderr, "nxtrace: mkdtemp %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  char script[PATH_BYTES];
  FILE *gp = create_in(tmp, "plot.gp", script);
  int rc = -1;
  if (gp == NULL)
    goto out;
  int m = write_matrix(t, tmp, prefix, by_bytes, gp);
  int l = m == 0 ? write_timeline(t, tmp, prefix, gp) : -1;
  if (fclose(gp) != 0 || m < 0 || l < 0)
    goto out;
  rc = run_gnuplot(script);
out:;
  static const char *files[] = {"plot.gp", "matrix.dat", "timeline.dat"};
  for (size_t i = 0; i < 3; i++) {
    char f[4200];
    snprintf(f, sizeof(f), "%s/%s", tmp, files[i]);
    unlink(f);
  }
  rmdir(tmp);
  return rc;
}
