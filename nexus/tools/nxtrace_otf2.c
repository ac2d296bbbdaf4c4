/* nxtrace's writer: the model of a computation as one OTF2 archive,
 * DIR/nexus.otf2, written serially (docs/tracing.md maps nexus's events to
 * OTF2's definitions and events). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <otf2/otf2.h>

#include "nexus/errors.h"
#include "nxtrace.h"

/* Attributes, parameters and the communicator: fixed references. */
enum { ATTR_MODULE, ATTR_ORDERED, ATTR_BYREF, ATTR_THREADED, ATTR_PEER };
#define PARAM_EVENT 0
#define COMM_ALL 0
#define GROUP_LOCATIONS 0
#define GROUP_RANKS 1

/* The archive's strings, deduplicated through an open-addressing table. */
struct strtab {
  char **s;
  size_t n, cap;
  uint32_t *slot; /* index + 1, 0: empty */
  size_t nslots;
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void strtab_insert(struct strtab *st, uint32_t ix) {
  size_t i = hash_str(st->s[ix]) & (st->nslots - 1);
  while (st->slot[i] != 0)
    i = (i + 1) & (st->nslots - 1);
  st->slot[i] = ix + 1;
}

static OTF2_StringRef str_ref(struct strtab *st, const char *s) {
  if (st->nslots != 0) {
    size_t i = hash_str(s) & (st->nslots - 1);
    for (; st->slot[i] != 0; i = (i + 1) & (st->nslots - 1))
      if (strcmp(st->s[st->slot[i] - 1], s) == 0)
        return st->slot[i] - 1;
  }
  if (st->n == st->cap) {
    st->cap = st->cap ? st->cap * 2 : 256;
    st->s = realloc(st->s, st->cap * sizeof(char *));
    if (st->s == NULL) {
      fprintf(stderr, "nxtrace: out of memory\n");
      exit(1);
    }
  }
  st->s[st->n] = strdup(s);
  if (st->s[st->n] == NULL) {
    fprintf(stderr, "nxtrace: out of memory\n");
    exit(1);
  }
  st->n++;
  if (st->n * 2 > st->nslots) {
    free(st->slot);
    st->nslots = st->nslots ? st->nslots * 2 : 1024;
    while (st->n * 2 > st->nslots)
      st->nslots *= 2;
    st->slot = nxi_tr_calloc(st->nslots, sizeof(uint32_t));
    for (size_t i = 0; i < st->n; i++)
      strtab_insert(st, (uint32_t)i);
  } else {
    strtab_insert(st, (uint32_t)(st->n - 1));
  }
  return (OTF2_StringRef)(st->n - 1);
}

static void strtab_free(struct strtab *st) {
  for (size_t i = 0; i < st->n; i++)
    free(st->s[i]);
  free(st->s);
  free(st->slot);
}

struct writer {
  const struct tr_trace *t;
  struct strtab st;
  OTF2_AttributeList *attrs;
  OTF2_ErrorCode err; /* the first failed write */
  const char *err_what;
  uint64_t *nevents; /* per location */
};

static void note(struct writer *w, OTF2_ErrorCode c, const char *what) {
  if (c != OTF2_SUCCESS && w->err == OTF2_SUCCESS) {
    w->err = c;
    w->err_what = what;
  }
}

static int failed(OTF2_ErrorCode c, const char *what) {
  if (c == OTF2_SUCCESS)
    return 0;
  fprintf(stderr, "nxtrace: OTF2 %s: %s (%s)\n", what, OTF2_Error_GetName(c),
          OTF2_Error_GetDescription(c));
  return -1;
}

static OTF2_FlushType pre_flush(void *user, OTF2_FileType type,
                                OTF2_LocationRef loc, void *caller,
                                bool final) {
  return OTF2_FLUSH;
}

/* No post-flush callback: the archive then holds no BufferFlush events,
 * which would carry this tool's time, not the computation's. */
static const OTF2_FlushCallbacks flush_cbs = {.otf2_pre_flush = pre_flush,
                                              .otf2_post_flush = NULL};

static void attr_module(struct writer *w, int mod) {
  if (mod == TR_NOMOD)
    return;
  OTF2_AttributeValue v;
  v.stringRef = str_ref(&w->st, w->t->mods[mod]);
  OTF2_AttributeList_AddAttribute(w->attrs, ATTR_MODULE, OTF2_TYPE_STRING, v);
}

static void attr_u8(struct writer *w, OTF2_AttributeRef a, int on) {
  OTF2_AttributeList_AddUint8(w->attrs, a, on ? 1 : 0);
}

static void attr_peer(struct writer *w, uint64_t peer) {
  OTF2_AttributeList_AddUint64(w->attrs, ATTR_PEER, peer);
}

static const char *mod_name(const struct tr_trace *t, int mod) {
  return mod == TR_NOMOD ? "none" : t->mods[mod];
}

/* A nexus error code's name (the X-macro list of nexus/errors.h: nxtrace
 * does not link libnexus). */
static const char *err_name(int code, char *buf, size_t len) {
#define NX_ERR_NAME(name, value, msg)                                          \
  if (code == (value))                                                         \
    return "NX_" #name;
  NX_ERRNO_MAP(NX_ERR_NAME)
#undef NX_ERR_NAME
  snprintf(buf, len, "error %d", code);
  return buf;
}

/* What a point event says, as the "nexus event" parameter's string. */
static void event_text(const struct tr_trace *t, const struct tr_ev *e,
                       char *buf, size_t len) {
  char hb[32];
  unsigned long long peer = (unsigned long long)e->r.peer;
  switch (e->r.type) {
  case NXT_FALLBACK:
    snprintf(buf, len, "fallback: route to %016llx now over %s (was %s)", peer,
             mod_name(t, e->mod), mod_name(t, e->aux_mod));
    break;
  case NXT_HOP:
    snprintf(buf, len, "hop: %s from %016llx to %016llx over %s, %u bytes",
             nxi_tr_handler_name(t, e->r.handler, hb, sizeof(hb)),
             (unsigned long long)e->r.x, peer, mod_name(t, e->mod), e->r.bytes);
    break;
  case NXT_PROC_CREATE:
    snprintf(buf, len, "process created: pid %u", e->r.aux);
    break;
  case NXT_PROC_READY:
    snprintf(buf, len, "process ready: context %016llx, pid %u", peer,
             e->r.aux);
    break;
  case NXT_PROC_LOSS:
    snprintf(buf, len, "process lost: process %08x, %s",
             (uint32_t)(e->r.peer >> 32),
             err_name(-(int)e->r.aux, hb, sizeof(hb)));
    break;
  case NXT_FINALIZE: snprintf(buf, len, "finalize"); break;
  case NXT_CONTEXT_CREATE:
    snprintf(buf, len, "context created: %016llx",
             (unsigned long long)e->r.ctx);
    break;
  case NXT_CONTEXT_DESTROY:
    snprintf(buf, len, "context destroyed: %016llx",
             (unsigned long long)e->r.ctx);
    break;
  default: snprintf(buf, len, "event %u", e->r.type); break;
  }
}

static uint32_t rank_of(const struct tr_trace *t, uint64_t ctx) {
  long c = ctx ? nxi_tr_ctx_find(t, ctx, 0) : -1;
  return c < 0 ? OTF2_UNDEFINED_UINT32 : t->ctxs[c].rank;
}

/* A point event on a location: a send, a receive or a marker. */
struct point {
  size_t loc;
  uint64_t t;
  size_t order;
  size_t index; /* evs (send, marker), or runs (receive) */
  int recv;
};

static int cmp_point(const void *a, const void *b) {
  const struct point *x = a, *y = b;
  if (x->loc != y->loc)
    return x->loc < y->loc ? -1 : 1;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static const struct tr_trace *sort_t;

static int cmp_run_loc(const void *a, const void *b) {
  const struct tr_run *x = &sort_t->runs[*(const size_t *)a];
  const struct tr_run *y = &sort_t->runs[*(const size_t *)b];
  if (x->loc != y->loc)
    return x->loc < y->loc ? -1 : 1;
  return nxi_tr_cmp_span(x, y);
}

static struct point *collect_points(const struct tr_trace *t, size_t *np) {
  struct point *p = nxi_tr_calloc(t->nevs + t->nruns + 1, sizeof(*p));
  size_t n = 0;
  for (size_t i = 0; i < t->nevs; i++) {
    const struct tr_ev *e = &t->evs[i];
    if (e->r.type == NXT_BEGIN || e->r.type == NXT_END ||
        e->r.type == NXT_WAIT_BEGIN || e->r.type == NXT_WAIT_END)
      continue;
    struct tr_loc key = {(size_t)nxi_tr_ctx_find(t, e->r.ctx, e->proc),
                         e->thread, 0};
    const struct tr_loc *l =
        bsearch(&key, t->locs, t->nlocs, sizeof(key), nxi_tr_cmp_loc);
    p[n++] = (struct point){(size_t)(l - t->locs), e->gt, 2 * e->seq + 1, i, 0};
  }
  for (size_t i = 0; i < t->nruns; i++) {
    const struct tr_run *r = &t->runs[i];
    if (r->send >= 0)
      p[n++] = (struct point){r->loc, r->t0, 2 * t->evs[r->begin_ev].seq, i, 1};
  }
  nxi_tr_sort(p, n, sizeof(*p), cmp_point);
  *np = n;
  return p;
}

static void write_point(struct writer *w, OTF2_EvtWriter *ew,
                        const struct point *p) {
  const struct tr_trace *t = w->t;
  OTF2_AttributeList_RemoveAllAttributes(w->attrs);
  if (p->recv) {
    const struct tr_run *r = &t->runs[p->index];
    const struct tr_ev *s = &t->evs[r->send];
    attr_module(w, s->mod);
    note(w,
         OTF2_EvtWriter_MpiRecv(ew, w->attrs, p->t, rank_of(t, s->r.ctx),
                                COMM_ALL, s->r.handler, s->r.bytes),
         "MpiRecv");
    return;
  }
  const struct tr_ev *e = &t->evs[p->index];
  if (e->r.type == NXT_SEND) {
    attr_module(w, e->mod);
    attr_u8(w, ATTR_ORDERED, e->r.flags & NXT_F_ORDERED);
    attr_u8(w, ATTR_BYREF, e->r.flags & NXT_F_BYREF);
    note(w,
         OTF2_EvtWriter_MpiSend(ew, w->attrs, p->t, rank_of(t, e->r.peer),
                                COMM_ALL, e->r.handler, e->r.bytes),
         "MpiSend");
    return;
  }
  char text[256];
  event_text(t, e, text, sizeof(text));
  if (e->r.peer != 0)
    attr_peer(w, e->r.peer);
  attr_module(w, e->mod);
  note(w,
       OTF2_EvtWriter_ParameterString(ew, w->attrs, p->t, PARAM_EVENT,
                                      str_ref(&w->st, text)),
       "ParameterString");
}

static void write_enter(struct writer *w, OTF2_EvtWriter *ew,
                        const struct tr_run *r, OTF2_RegionRef region) {
  const struct tr_ev *b = &w->t->evs[r->begin_ev];
  OTF2_AttributeList_RemoveAllAttributes(w->attrs);
  if (r->kind == TR_RUN_HANDLER) {
    attr_u8(w, ATTR_THREADED, b->r.flags & NXT_F_THREADED);
  } else {
    attr_module(w, b->mod);
    attr_peer(w, b->r.peer);
  }
  note(w, OTF2_EvtWriter_Enter(ew, w->attrs, r->t0, region), "Enter");
}

static OTF2_RegionRef run_region(const struct tr_trace *t,
                                 const struct tr_run *r) {
  if (r->kind == TR_RUN_WAIT)
    return (OTF2_RegionRef)t->nhandlers;
  return (OTF2_RegionRef)nxi_tr_handler_index(t, r->handler);
}

/* One location's events: its runs' Enter and Leave, nested as the layers
 * were built (nxtrace_read.c), merged by time with its point events. */
static void write_location(struct writer *w, OTF2_EvtWriter *ew,
                           const size_t *runs, size_t nruns,
                           const struct point *pts, size_t npts) {
  const struct tr_trace *t = w->t;
  size_t *stack = nxi_tr_calloc(nruns + 1, sizeof(size_t));
  size_t depth = 0, ri = 0, pi = 0;
  while (ri < nruns || depth > 0 || pi < npts) {
    int have = 0, leave = 0;
    uint64_t at = 0;
    if (depth > 0 &&
        (ri == nruns || t->runs[stack[depth - 1]].t1 <= t->runs[runs[ri]].t0)) {
      have = leave = 1;
      at = t->runs[stack[depth - 1]].t1;
    } else if (ri < nruns) {
      have = 1;
      at = t->runs[runs[ri]].t0;
    }
    if (pi < npts && (!have || pts[pi].t < at)) {
      write_point(w, ew, &pts[pi++]);
    } else if (leave) {
      const struct tr_run *r = &t->runs[stack[--depth]];
      note(w, OTF2_EvtWriter_Leave(ew, NULL, r->t1, run_region(t, r)), "Leave");
    } else {
      const struct tr_run *r = &t->runs[runs[ri]];
      write_enter(w, ew, r, run_region(t, r));
      stack[depth++] = runs[ri++];
    }
  }
  free(stack);
}

static int write_events(struct writer *w, OTF2_Archive *ar) {
  const struct tr_trace *t = w->t;
  size_t *order = nxi_tr_calloc(t->nruns + 1, sizeof(size_t));
  for (size_t i = 0; i < t->nruns; i++)
    order[i] = i;
  sort_t = t;
  nxi_tr_sort(order, t->nruns, sizeof(size_t), cmp_run_loc);
  size_t npts;
  struct point *pts = collect_points(t, &npts);
  size_t ri = 0, pi = 0;
  int rc = 0;
  for (size_t l = 0; l < t->nlocs && rc == 0; l++) {
    size_t r0 = ri, p0 = pi;
    while (ri < t->nruns && t->runs[order[ri]].loc == l)
      ri++;
    while (pi < npts && pts[pi].loc == l)
      pi++;
    OTF2_EvtWriter *ew = OTF2_Archive_GetEvtWriter(ar, l);
    if (ew == NULL) {
      fprintf(stderr, "nxtrace: OTF2: no event writer for location %zu\n", l);
      rc = -1;
      break;
    }
    write_location(w, ew, order + r0, ri - r0, pts + p0, pi - p0);
    uint64_t n = 0;
    OTF2_EvtWriter_GetNumberOfEvents(ew, &n);
    w->nevents[l] = n;
    if (w->err != OTF2_SUCCESS)
      rc = failed(w->err, w->err_what);
    if (failed(OTF2_Archive_CloseEvtWriter(ar, ew), "CloseEvtWriter") < 0)
      rc = -1;
  }
  free(order);
  free(pts);
  return rc;
}

static void loc_name(const struct tr_trace *t, const struct tr_loc *l,
                     char *buf, size_t len) {
  char cn[40];
  const struct tr_ctx *c = &t->ctxs[l->ctx];
  nxi_tr_ctx_name(t, l->ctx, cn, sizeof(cn));
  int n;
  if (c->proc < 0)
    n = snprintf(buf, len, "%s%s", c->id ? "context " : "", cn);
  else
    n = snprintf(buf, len, "%s%s thread %u", c->id ? "context " : "", cn,
                 l->thread);
  if (l->layer == 1)
    snprintf(buf + n, len - (size_t)n, " (blocked)");
  else if (l->layer > 1)
    snprintf(buf + n, len - (size_t)n, " (blocked %u)", l->layer);
}

/* The attributes' definitions. */
static const struct {
  const char *name, *desc;
  OTF2_Type type;
} attrs[] = {
    [ATTR_MODULE] = {"module", "the protocol module", OTF2_TYPE_STRING},
    [ATTR_ORDERED] = {"ordered", "NX_RSR_ORDERED", OTF2_TYPE_UINT8},
    [ATTR_BYREF] = {"by reference", "values put by reference", OTF2_TYPE_UINT8},
    [ATTR_THREADED] = {"threaded", "a threaded handler", OTF2_TYPE_UINT8},
    [ATTR_PEER] = {"peer context", "the other context", OTF2_TYPE_UINT64},
};

static void group_name(const struct tr_trace *t, const struct tr_ctx *x,
                       char *buf, size_t len) {
  if (x->proc < 0)
    snprintf(buf, len, "context %016llx (no log)", (unsigned long long)x->id);
  else if (x->id == 0)
    snprintf(buf, len, "process %08x (pid %llu)", t->procs[x->proc].proc_id,
             (unsigned long long)t->procs[x->proc].pid);
  else
    snprintf(buf, len, "context %016llx (process %08x, pid %llu)",
             (unsigned long long)x->id, t->procs[x->proc].proc_id,
             (unsigned long long)t->procs[x->proc].pid);
}

/* The global definitions but the strings and the clock, in two passes:
 * readers resolve a string when they meet a reference to it, so every
 * string must come first. The first pass (g NULL) only gathers the
 * strings into w's table; the second writes the definitions. */
static void write_def_pass(struct writer *w, OTF2_GlobalDefWriter *g) {
  const struct tr_trace *t = w->t;
  struct strtab *st = &w->st;
  char buf[256];
  /* The system tree: the computation, then its hosts. */
  OTF2_StringRef empty = str_ref(st, "");
  OTF2_StringRef name = str_ref(st, "nexus computation");
  OTF2_StringRef cls = str_ref(st, "machine");
  if (g)
    note(w,
         OTF2_GlobalDefWriter_WriteSystemTreeNode(
             g, 0, name, cls, OTF2_UNDEFINED_SYSTEM_TREE_NODE),
         "SystemTreeNode");
  int unknown = 0;
  for (size_t c = 0; c < t->nctxs; c++)
    unknown |= t->ctxs[c].proc < 0;
  cls = str_ref(st, "node");
  for (size_t h = 0; h < t->nhosts + (size_t)unknown; h++) {
    name = str_ref(st, h < t->nhosts ? t->hosts[h].name : "unknown host");
    if (g)
      note(w, OTF2_GlobalDefWriter_WriteSystemTreeNode(g, h + 1, name, cls, 0),
           "SystemTreeNode");
  }
  for (size_t c = 0; c < t->nctxs; c++) {
    const struct tr_ctx *x = &t->ctxs[c];
    size_t node = x->proc < 0 ? t->nhosts + 1 : t->procs[x->proc].host_ix + 1;
    group_name(t, x, buf, sizeof(buf));
    name = str_ref(st, buf);
    if (g)
      note(w,
           OTF2_GlobalDefWriter_WriteLocationGroup(
               g, c, name, OTF2_LOCATION_GROUP_TYPE_PROCESS, node,
               OTF2_UNDEFINED_LOCATION_GROUP),
           "LocationGroup");
  }
  for (size_t l = 0; l < t->nlocs; l++) {
    loc_name(t, &t->locs[l], buf, sizeof(buf));
    name = str_ref(st, buf);
    if (g)
      note(w,
           OTF2_GlobalDefWriter_WriteLocation(g, l, name,
                                              OTF2_LOCATION_TYPE_CPU_THREAD,
                                              w->nevents[l], t->locs[l].ctx),
           "Location");
  }
  /* Regions: one per handler, by id, then the waits. */
  for (size_t i = 0; i <= t->nhandlers; i++) {
    name =
        str_ref(st, i < t->nhandlers ? nxi_tr_handler_name(t, t->handlers[i].id,
                                                           buf, sizeof(buf))
                                     : "wait: full queue");
    if (g)
      note(w,
           OTF2_GlobalDefWriter_WriteRegion(
               g, i, name, name, empty, OTF2_REGION_ROLE_FUNCTION,
               OTF2_PARADIGM_USER, OTF2_REGION_FLAG_NONE, empty, 0, 0),
           "Region");
  }
  for (size_t a = 0; a < sizeof(attrs) / sizeof(attrs[0]); a++) {
    name = str_ref(st, attrs[a].name);
    OTF2_StringRef desc = str_ref(st, attrs[a].desc);
    if (g)
      note(w,
           OTF2_GlobalDefWriter_WriteAttribute(g, a, name, desc, attrs[a].type),
           "Attribute");
  }
  name = str_ref(st, "nexus event");
  if (g)
    note(w,
         OTF2_GlobalDefWriter_WriteParameter(g, PARAM_EVENT, name,
                                             OTF2_PARAMETER_TYPE_STRING),
         "Parameter");
  /* The communicator of all contexts: rank r is the r-th context with an
   * id, its member location its first one. */
  OTF2_StringRef locs_name = str_ref(st, "contexts");
  OTF2_StringRef ranks_name = str_ref(st, "all contexts");
  OTF2_StringRef comm_name = str_ref(st, "nexus contexts");
  if (g == NULL)
    return;
  uint64_t *members = nxi_tr_calloc(t->nreal + 1, sizeof(uint64_t));
  uint64_t *ranks = nxi_tr_calloc(t->nreal + 1, sizeof(uint64_t));
  for (size_t c = 0; c < t->nctxs; c++)
    if (t->ctxs[c].id != 0)
      members[t->ctxs[c].rank] = t->ctxs[c].loc0;
  for (size_t r = 0; r < t->nreal; r++)
    ranks[r] = r;
  note(w,
       OTF2_GlobalDefWriter_WriteGroup(g, GROUP_LOCATIONS, locs_name,
                                       OTF2_GROUP_TYPE_COMM_LOCATIONS,
                                       OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE,
                                       (uint32_t)t->nreal, members),
       "Group");
  note(w,
       OTF2_GlobalDefWriter_WriteGroup(
           g, GROUP_RANKS, ranks_name, OTF2_GROUP_TYPE_COMM_GROUP,
           OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, (uint32_t)t->nreal, ranks),
       "Group");
  free(members);
  free(ranks);
  note(w,
       OTF2_GlobalDefWriter_WriteComm(g, COMM_ALL, comm_name, GROUP_RANKS,
                                      OTF2_UNDEFINED_COMM, OTF2_COMM_FLAG_NONE),
       "Comm");
}

static int write_defs(struct writer *w, OTF2_Archive *ar) {
  const struct tr_trace *t = w->t;
  /* The local definitions are empty: every definition is global. */
  for (size_t l = 0; l < t->nlocs; l++) {
    OTF2_DefWriter *dw = OTF2_Archive_GetDefWriter(ar, l);
    if (dw == NULL ||
        failed(OTF2_Archive_CloseDefWriter(ar, dw), "CloseDefWriter") < 0)
      return -1;
  }
  OTF2_GlobalDefWriter *g = OTF2_Archive_GetGlobalDefWriter(ar);
  if (g == NULL) {
    fprintf(stderr, "nxtrace: OTF2: no global definition writer\n");
    return -1;
  }
  note(w,
       OTF2_GlobalDefWriter_WriteClockProperties(g, 1000000000ull, t->t_min,
                                                 t->t_max - t->t_min, t->t_min),
       "ClockProperties");
  write_def_pass(w, NULL);
  for (size_t i = 0; i < w->st.n; i++)
    note(w, OTF2_GlobalDefWriter_WriteString(g, i, w->st.s[i]), "String");
  write_def_pass(w, g);
  if (w->err != OTF2_SUCCESS)
    return failed(w->err, w->err_what);
  return 0;
}

/* Removes a previous run's archive: DIR/nexus.otf2, nexus.def and the
 * files of DIR/nexus/ (OTF2 will not write over them). */
static int remove_old(const char *dir) {
  char path[4096];
  static const char *files[] = {"nexus.otf2", "nexus.def"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    if (unlink(path) < 0 && errno != ENOENT) {
      fprintf(stderr, "nxtrace: cannot remove %s: %s\n", path, strerror(errno));
      return -1;
    }
  }
  snprintf(path, sizeof(path), "%s/nexus", dir);
  DIR *d = opendir(path);
  if (d == NULL)
    return errno == ENOENT ? 0 : -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    int ours = (n > 4 && (strcmp(de->d_name + n - 4, ".evt") == 0 ||
                          strcmp(de->d_name + n - 4, ".def") == 0));
    if (!ours)
      continue;
    char f[4096 + 256];
    snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
    unlink(f);
  }
  closedir(d);
  if (rmdir(path) < 0) {
    fprintf(stderr, "nxtrace: cannot remove %s (not an old archive's?): %s\n",
            path, strerror(errno));
    return -1;
  }
  return 0;
}

int nxi_tr_write_otf2(const struct tr_trace *t, const char *dir) {
  if (remove_old(dir) < 0)
    return -1;
  OTF2_Archive *ar = OTF2_Archive_Open(
      dir, "nexus", OTF2_FILEMODE_WRITE, 1024 * 1024, 4 * 1024 * 1024,
      OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
  if (ar == NULL) {
    fprintf(stderr, "nxtrace: OTF2: cannot create %s/nexus.otf2\n", dir);
    return -1;
  }
  struct writer w = {.t = t, .err = OTF2_SUCCESS};
  w.nevents = nxi_tr_calloc(t->nlocs + 1, sizeof(uint64_t));
  w.attrs = OTF2_AttributeList_New();
  int rc = -1;
  if (failed(OTF2_Archive_SetFlushCallbacks(ar, &flush_cbs, NULL),
             "SetFlushCallbacks") < 0 ||
      failed(OTF2_Archive_SetSerialCollectiveCallbacks(ar),
             "SetSerialCollectiveCallbacks") < 0 ||
      failed(OTF2_Archive_SetCreator(ar, "nxtrace"), "SetCreator") < 0 ||
      failed(OTF2_Archive_SetDescription(
                 ar, "a nexus computation, merged from its NX_TRACE logs"),
             "SetDescription") < 0)
    goto out;
  if (failed(OTF2_Archive_OpenEvtFiles(ar), "OpenEvtFiles") < 0)
    goto out;
  int ev = write_events(&w, ar);
  if (failed(OTF2_Archive_CloseEvtFiles(ar), "CloseEvtFiles") < 0 || ev < 0)
    goto out;
  if (failed(OTF2_Archive_OpenDefFiles(ar), "OpenDefFiles") < 0)
    goto out;
  int df = write_defs(&w, ar);
  if (failed(OTF2_Archive_CloseDefFiles(ar), "CloseDefFiles") < 0 || df < 0)
    goto out;
  rc = 0;
out:
  if (failed(OTF2_Archive_Close(ar), "Close") < 0)
    rc = -1;
  OTF2_AttributeList_Delete(w.attrs);
  free(w.nevents);
  strtab_free(&w.st);
  return rc;
}
