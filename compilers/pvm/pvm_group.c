/* PVM groups with no group server: the root task (the one started by
 * hand, or rank 0 of an nxrun/mpirun job) keeps the groups in its RSR
 * handlers and is the sequencer that orders every group's broadcasts;
 * reduce, gather and scatter are point-to-point messages on top. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pvm_internal.h"

/* ---- the root's side ---- */

static void seq_push(struct seqitem *it);

/* With nxpvm.m held. */
static struct group *group_find(const char *name, int create) {
  for (struct group *g = nxpvm.groups; g != NULL; g = g->next)
    if (strcmp(g->name, name) == 0)
      return g;
  if (!create)
    return NULL;
  struct group *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return NULL;
  snprintf(g->name, sizeof(g->name), "%s", name);
  g->next = nxpvm.groups;
  nxpvm.groups = g;
  return g;
}

static struct member *member_of(struct group *g, int tid) {
  for (int i = 0; i < g->n; i++)
    if (g->m[i].tid == tid)
      return &g->m[i];
  return NULL;
}

/* The lowest instance number no member holds, as the PVM group server
 * gives. */
static int free_inst(struct group *g) {
  for (int inst = 0;; inst++) {
    int used = 0;
    for (int i = 0; i < g->n && !used; i++)
      used = g->m[i].inst == inst;
    if (!used)
      return inst;
  }
}

static int do_join(struct group *g, int tid) {
  if (member_of(g, tid) != NULL)
    return PvmDupGroup;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 8;
    struct member *m = realloc(g->m, (size_t)cap * sizeof(*m));
    if (m == NULL)
      return PvmNoMem;
    g->m = m;
    g->cap = cap;
  }
  int inst = free_inst(g);
  g->m[g->n++] = (struct member){tid, inst};
  return inst;
}

/* Takes `tid` out of `g`; a group left with no member and no barrier
 * waiting ends, as with PVM's group server (later calls: PvmNoGroup). */
static int do_leave(struct group *g, int tid) {
  struct member *m = member_of(g, tid);
  if (m == NULL)
    return PvmNotInGroup;
  *m = g->m[--g->n];
  if (g->n > 0 || g->nw > 0)
    return PvmOk;
  for (struct group **pp = &nxpvm.groups; *pp != NULL; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      free(g->m);
      free(g->w);
      free(g);
      break;
    }
  return PvmOk;
}

/* "nxpvm.grp": a group request (origin, rpc id, op, group, argument). A
 * barrier's reply waits until `count` members have arrived. */
void nxpvmi_on_grp(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t id, op, arg;
  char name[64];
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &id) < 0 ||
      nx_get_int32(buf, &op) < 0 ||
      nxpvmi_get_name(buf, name, sizeof(name)) < 0 ||
      nx_get_int32(buf, &arg) < 0)
    return;
  int result = PvmNoGroup;
  int *release = NULL, *release_rpc = NULL, nrelease = 0;
  nx_mutex_lock(&nxpvm.m);
  struct group *g = op == G_NEWCTX ? NULL : group_find(name, op == G_JOIN);
  if (op == G_NEWCTX)
    /* Contexts are numbered by the root, never reused: unique in the
     * computation, as PVM's are in the virtual machine, and shaped as a
     * fresh pvmd on host 1 numbers them: its host part (1 << 18) and a
     * count from 1 (the first is 262145). */
    result =
        nxpvm.next_ctx < 0x3ffff ? 1 << 18 | ++nxpvm.next_ctx : PvmOutOfRes;
  else if (g == NULL && op == G_JOIN)
    result = PvmNoMem;
  else if (g != NULL) {
    struct member *m;
    switch (op) {
    case G_JOIN: result = do_join(g, from); break;
    case G_LEAVE: result = do_leave(g, from); break;
    case G_SIZE: result = g->n; break;
    case G_INST:
      m = member_of(g, arg);
      result = m != NULL ? m->inst : PvmNotInGroup;
      break;
    case G_TID:
      result = PvmNoInst;
      for (int i = 0; i < g->n; i++)
        if (g->m[i].inst == arg)
          result = g->m[i].tid;
      break;
    case G_FREEZE:
    case G_BARRIER:
      if (member_of(g, from) == NULL) {
        result = PvmNotInGroup;
        break;
      }
      if (op == G_FREEZE && g->frozen) {
        result = PvmDupGroup;
        break;
      }
      if (g->nw == g->wcap) {
        int cap = g->wcap ? 2 * g->wcap : 8;
        void *w = realloc(g->w, (size_t)cap * sizeof(*g->w));
        if (w == NULL) {
          result = PvmNoMem;
          break;
        }
        g->w = w;
        g->wcap = cap;
      }
      g->w[g->nw].tid = from;
      g->w[g->nw].rpc = id;
      g->nw++;
      if (g->nw == 1)
        g->bar_count = arg == -1 ? g->n : arg;
      if (g->nw < g->bar_count) {
        id = 0; /* no reply yet */
        break;
      }
      /* pvm_freezegroup is a barrier that leaves the group frozen. */
      if (op == G_FREEZE)
        g->frozen = 1;
      release = malloc((size_t)g->nw * sizeof(int));
      release_rpc = malloc((size_t)g->nw * sizeof(int));
      if (release != NULL && release_rpc != NULL)
        for (int i = 0; i < g->nw; i++) {
          release[i] = g->w[i].tid;
          release_rpc[i] = g->w[i].rpc;
        }
      nrelease = release != NULL && release_rpc != NULL ? g->nw : 0;
      g->nw = 0;
      id = 0;
      break;
    default: result = PvmBadParam;
    }
  }
  nx_mutex_unlock(&nxpvm.m);
  if (id != 0)
    nxpvmi_reply(from, id, result);
  /* A barrier is released by the sequencer, after the broadcasts that
   * reached the root before its last member did. */
  if (nrelease > 0) {
    struct seqitem *it = calloc(1, sizeof(*it));
    if (it != NULL) {
      it->kind = S_RELEASE;
      it->n = nrelease;
      it->tids = release;
      it->rpcs = release_rpc;
      seq_push(it);
      return;
    }
  }
  free(release);
  free(release_rpc);
}

static void item_free(struct seqitem *it) {
  nxpvmi_buf_free(it->b);
  free(it->tids);
  free(it->rpcs);
  free(it);
}

static void tree_forward(int kind, int src, int tag, const struct pvmbuf *b,
                         const int *tids, const int *rpcs, int n);

/* Sends the tree part tids[0..n-1] (tids[0] its head) of a broadcast or
 * barrier release to its head. The head being this task, it is handled
 * here and now, so its forwarding keeps its place in the order. */
static void tree_send(int kind, int src, int tag, const struct pvmbuf *b,
                      const int *tids, const int *rpcs, int n) {
  if (tids[0] == nxpvm.mytid) {
    if (kind == T_BCAST && src != nxpvm.mytid)
      nxpvmi_send_as(src, nxpvm.mytid, tag, b);
    if (kind == T_RELEASE)
      nxpvmi_reply(nxpvm.mytid, rpcs[0], PvmOk);
    tree_forward(kind, src, tag, b, tids, rpcs, n);
    return;
  }
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *o;
  if (nxpvmi_resolve(tids[0], &gp) < 0)
    return;
  if (nxpvmi_rsr(tids[0], &gp, H_GTREE, 8 * (size_t)n + (b ? b->bytes : 0),
                 &o) == 0) {
    int r = nx_put_int32(o, kind);
    if (r == 0)
      r = nx_put_int32(o, src);
    if (r == 0)
      r = nx_put_int32(o, tag);
    if (r == 0)
      r = nx_put_uint32(o, (uint32_t)n);
    if (r == 0)
      r = nx_put_int32_array(o, tids, (size_t)n);
    if (r == 0)
      r = nx_put_int32_array(o, rpcs, (size_t)n);
    if (r == 0 && kind == T_BCAST)
      r = nxpvmi_encode(o, b);
    if (r == 0)
      nxpvmi_send(o);
    else
      nx_buffer_release(o);
  }
  nx_gp_release(&gp);
}

/* A binomial tree over tids[0..n-1] headed by tids[0]: the head sends to
 * 1, 2, 4, ...; the part headed by 2^k is [2^k, 2^(k+1)). */
static void tree_forward(int kind, int src, int tag, const struct pvmbuf *b,
                         const int *tids, const int *rpcs, int n) {
  for (int c = 1; c < n; c *= 2) {
    int end = 2 * c < n ? 2 * c : n;
    tree_send(kind, src, tag, b, tids + c, rpcs + c, end - c);
  }
}

/* The sequencer: one thread at the root takes broadcasts (and barrier
 * releases) in the order they reached the root and sends each to every
 * member but its sender before it takes the next: directly for a small
 * group, else along a binomial tree over all the members (the sender
 * forwards but does not deliver), the sequencer at its head. One sending
 * thread keeps the order on every pair, and while the membership stays the
 * same every message takes the same path to a member: every member
 * delivers every group's broadcasts in one order. Other tasks run the same
 * thread to forward their parts of trees, in the order they arrive. */
static void *seq_main(void *arg) {
  (void)arg;
  nx_mutex_lock(&nxpvm.m);
  for (;;) {
    while (nxpvm.seq_head == NULL && !nxpvm.seq_stop)
      nx_cond_wait(&nxpvm.seq_c, &nxpvm.m);
    struct seqitem *it = nxpvm.seq_head;
    if (it == NULL)
      break;
    nxpvm.seq_head = it->next;
    if (nxpvm.seq_head == NULL)
      nxpvm.seq_tail = NULL;
    int *to = NULL, *zero = NULL, n = 0;
    struct group *g = it->kind == S_BCAST ? group_find(it->group, 0) : NULL;
    int tree = g != NULL && g->n > nxpvm.tree_min;
    if (g != NULL && (to = malloc((size_t)g->n * sizeof(int) + 1)) != NULL &&
        (zero = calloc((size_t)g->n + 1, sizeof(int))) != NULL)
      for (int i = 0; i < g->n; i++)
        if (tree || g->m[i].tid != it->src)
          to[n++] = g->m[i].tid;
    nx_mutex_unlock(&nxpvm.m);
    if (it->kind == S_BCAST && tree) {
      /* The sequencer is node 0 and member i node i + 1. */
      for (int c = 1; c <= n; c *= 2) {
        int end = 2 * c < n + 1 ? 2 * c : n + 1;
        tree_send(T_BCAST, it->src, it->tag, it->b, to + c - 1, zero + c - 1,
                  end - c);
      }
    } else if (it->kind == S_BCAST) {
      for (int i = 0; i < n; i++)
        nxpvmi_send_as(it->src, to[i], it->tag, it->b);
    } else if (it->kind == S_RELEASE && it->n > nxpvm.tree_min) {
      for (int c = 1; c <= it->n; c *= 2) {
        int end = 2 * c < it->n + 1 ? 2 * c : it->n + 1;
        tree_send(T_RELEASE, 0, 0, NULL, it->tids + c - 1, it->rpcs + c - 1,
                  end - c);
      }
    } else if (it->kind == S_RELEASE) {
      for (int i = 0; i < it->n; i++)
        nxpvmi_reply(it->tids[i], it->rpcs[i], PvmOk);
    } else if (it->kind == S_FORWARD) {
      tree_forward(it->tree_kind, it->src, it->tag, it->b, it->tids, it->rpcs,
                   it->n);
    }
    free(to);
    free(zero);
    item_free(it);
    nx_mutex_lock(&nxpvm.m);
  }
  nx_mutex_unlock(&nxpvm.m);
  return NULL;
}

/* Queues work for the sequencer, starting it the first time. */
static void seq_push(struct seqitem *it) {
  nx_mutex_lock(&nxpvm.m);
  if (!nxpvm.seq_running) {
    nx_cond_init(&nxpvm.seq_c);
    if (nx_thread_create(&nxpvm.seq_thread, seq_main, NULL) != 0) {
      nx_mutex_unlock(&nxpvm.m);
      item_free(it);
      return;
    }
    nxpvm.seq_running = 1;
  }
  it->next = NULL;
  if (nxpvm.seq_tail != NULL)
    nxpvm.seq_tail->next = it;
  else
    nxpvm.seq_head = it;
  nxpvm.seq_tail = it;
  nx_cond_signal(&nxpvm.seq_c);
  nx_mutex_unlock(&nxpvm.m);
}

void nxpvmi_seq_stop(void) {
  nx_mutex_lock(&nxpvm.m);
  int running = nxpvm.seq_running;
  nxpvm.seq_stop = 1;
  if (running)
    nx_cond_signal(&nxpvm.seq_c);
  nx_mutex_unlock(&nxpvm.m);
  if (running) {
    nx_thread_join(nxpvm.seq_thread, NULL);
    nx_cond_destroy(&nxpvm.seq_c);
  }
  while (nxpvm.seq_head != NULL) {
    struct seqitem *it = nxpvm.seq_head;
    nxpvm.seq_head = it->next;
    item_free(it);
  }
  nxpvm.seq_tail = NULL;
  nxpvm.seq_running = 0;
}

/* "nxpvm.gbc": a broadcast for the sequencer. */
void nxpvmi_on_gbc(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t tag;
  struct seqitem *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &tag) < 0 ||
      nxpvmi_get_name(buf, it->group, sizeof(it->group)) < 0 ||
      nxpvmi_decode(buf, &it->b) < 0) {
    free(it);
    return;
  }
  it->kind = S_BCAST;
  it->src = from;
  it->tag = tag;
  seq_push(it);
}

/* "nxpvm.gtree": this task's part of a broadcast's or a barrier release's
 * tree (kind, source, tag, the part's tids and barrier requests, the
 * message): deliver here, and have the group thread forward the rest. */
void nxpvmi_on_gtree(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t kind, src, tag;
  uint32_t n;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &kind) < 0 ||
      nx_get_int32(buf, &src) < 0 || nx_get_int32(buf, &tag) < 0 ||
      nx_get_uint32(buf, &n) < 0 || n == 0 ||
      n > nx_buffer_remaining(buf) / 4 ||
      (kind != T_BCAST && kind != T_RELEASE))
    return;
  struct seqitem *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return;
  it->tids = malloc(n * sizeof(int));
  it->rpcs = malloc(n * sizeof(int));
  if (it->tids == NULL || it->rpcs == NULL ||
      nx_get_int32_array(buf, it->tids, n) < 0 ||
      nx_get_int32_array(buf, it->rpcs, n) < 0 || it->tids[0] != nxpvm.mytid ||
      (kind == T_BCAST && nxpvmi_decode(buf, &it->b) < 0)) {
    item_free(it);
    return;
  }
  if (kind == T_BCAST && src != nxpvm.mytid) {
    struct pvmbuf *c = nxpvmi_buf_clone(it->b);
    if (c != NULL) {
      c->src = src;
      c->tag = tag;
      nx_mutex_lock(&nxpvm.m);
      nxpvmi_deliver(c);
      nx_mutex_unlock(&nxpvm.m);
    }
  }
  if (kind == T_RELEASE) {
    /* Our own barrier request is answered. */
    nx_mutex_lock(&nxpvm.m);
    for (struct rpc *r = nxpvm.rpcs; r != NULL; r = r->next)
      if (r->id == it->rpcs[0] && !r->done) {
        r->done = 1;
        r->result = PvmOk;
        nx_cond_broadcast(&nxpvm.c);
      }
    nx_mutex_unlock(&nxpvm.m);
  }
  if (n == 1) {
    item_free(it);
    return;
  }
  it->kind = S_FORWARD;
  it->tree_kind = kind;
  it->src = src;
  it->tag = tag;
  it->n = (int)n;
  seq_push(it);
}

/* A task that ended leaves every group, as with PVM's group server. Called
 * with nxpvm.m held. */
void nxpvmi_groups_forget(int tid) {
  for (struct group *g = nxpvm.groups, *next; g != NULL; g = next) {
    next = g->next;
    do_leave(g, tid);
  }
}

void nxpvmi_groups_free(void) {
  while (nxpvm.groups != NULL) {
    struct group *g = nxpvm.groups;
    nxpvm.groups = g->next;
    free(g->m);
    free(g->w);
    free(g);
  }
  while (nxpvm.mygroups != NULL) {
    struct mygroup *g = nxpvm.mygroups;
    nxpvm.mygroups = g->next;
    free(g);
  }
}

/* ---- the members' side ---- */

static int check_name(const char *group) {
  if (group == NULL || group[0] == '\0')
    return PvmNullGroup;
  if (strlen(group) >= 64)
    return PvmBadParam;
  return nxpvmi_started() ? PvmOk : PvmSysErr;
}

/* One request to the root (itself included: the same handler orders it
 * with the rest). */
static int grp_call(int op, const char *group, int arg) {
  nx_gp_t root = NX_GP_NULL;
  int rc = nxpvmi_resolve_root(&root);
  if (rc < 0)
    return PvmSysErr;
  struct rpc *r = nxpvmi_rpc_new();
  nx_buffer_t *b;
  if (r == NULL) {
    nx_gp_release(&root);
    return PvmNoMem;
  }
  rc = nxpvmi_rsr(nxpvm.roottid, &root, H_GRP, 96, &b);
  if (rc == 0) {
    nx_put_int32(b, r->id);
    nx_put_int32(b, op);
    nxpvmi_put_name(b, group);
    nx_put_int32(b, arg);
    rc = nxpvmi_send_root(b);
  }
  /* A barrier waits as long as the slowest member takes. */
  int bar = op == G_BARRIER || op == G_FREEZE;
  if (rc == 0)
    rc = nxpvmi_rpc_wait(r, bar ? 24 * 3600 : 60, bar ? 2 : 0);
  nxpvmi_rpc_free(r);
  nx_gp_release(&root);
  return rc;
}

int pvm_joingroup(char *group) {
  int rc = check_name(group);
  if (rc < 0)
    return nxpvmi_gerr(rc);
  rc = grp_call(G_JOIN, group, 0);
  if (rc < 0)
    return nxpvmi_gerr(rc);
  struct mygroup *g = calloc(1, sizeof(*g));
  if (g != NULL) {
    snprintf(g->name, sizeof(g->name), "%s", group);
    g->inst = rc;
    g->next = nxpvm.mygroups;
    nxpvm.mygroups = g;
  }
  return rc;
}

int pvm_lvgroup(char *group) {
  int rc = check_name(group);
  if (rc < 0)
    return nxpvmi_gerr(rc);
  rc = grp_call(G_LEAVE, group, 0);
  if (rc < 0)
    return nxpvmi_gerr(rc);
  for (struct mygroup **pp = &nxpvm.mygroups; *pp != NULL; pp = &(*pp)->next)
    if (strcmp((*pp)->name, group) == 0) {
      struct mygroup *g = *pp;
      *pp = g->next;
      free(g);
      break;
    }
  return PvmOk;
}

int pvm_gsize(char *group) {
  int rc = check_name(group);
  if (rc == 0)
    rc = grp_call(G_SIZE, group, 0);
  return rc < 0 ? nxpvmi_gerr(rc) : rc;
}

int pvm_getinst(char *group, int tid) {
  int rc = check_name(group);
  if (rc == 0 && tid <= 0)
    rc = PvmBadParam;
  if (rc == 0)
    rc = grp_call(G_INST, group, tid);
  return rc < 0 ? nxpvmi_gerr(rc) : rc;
}

int pvm_gettid(char *group, int inst) {
  int rc = check_name(group);
  if (rc == 0 && inst < 0)
    rc = PvmBadParam;
  if (rc == 0)
    rc = grp_call(G_TID, group, inst);
  return rc < 0 ? nxpvmi_gerr(rc) : rc;
}

int pvm_barrier(char *group, int count) {
  int rc = check_name(group);
  if (rc == 0 && (count < -1 || count == 0))
    rc = PvmBadParam;
  if (rc == 0)
    rc = grp_call(G_BARRIER, group, count);
  return rc < 0 ? nxpvmi_gerr(rc) : PvmOk;
}

int pvm_freezegroup(char *group, int size) {
  int rc = check_name(group);
  if (rc == PvmNullGroup)
    rc = PvmBadParam;
  if (rc == 0 && (size < -1 || size == 0))
    rc = PvmBadParam;
  if (rc == 0)
    rc = grp_call(G_FREEZE, group, size);
  /* As PVM's: the size the group was frozen at. */
  if (rc == 0)
    rc = size > 0 ? size : pvm_gsize(group);
  return rc < 0 ? nxpvmi_gerr(rc) : rc;
}

int pvm_newcontext(void) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_newcontext", PvmSysErr);
  int rc = grp_call(G_NEWCTX, "", 0);
  return rc < 0 ? nxpvmi_err("pvm_newcontext", rc) : rc;
}

/* Contexts are never reused (there are 2^31 of them), so freeing one only
 * checks it. */
int pvm_freecontext(int ctx) {
  if (ctx < 0)
    return nxpvmi_err("pvm_freecontext", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_freecontext", PvmSysErr);
  return PvmOk;
}

/* Whether `group` exists: known if this task is a member, else asked. */
static int group_exists(const char *group) {
  for (struct mygroup *g = nxpvm.mygroups; g != NULL; g = g->next)
    if (strcmp(g->name, group) == 0)
      return PvmOk;
  int rc = grp_call(G_SIZE, group, 0);
  return rc < 0 ? rc : PvmOk;
}

int pvm_bcast(char *group, int msgtag) {
  int rc = check_name(group);
  if (rc == 0 && msgtag < 0)
    rc = PvmBadParam;
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.sbuf);
  if (rc == 0 && b == NULL)
    rc = PvmNoBuf;
  if (rc == 0)
    rc = group_exists(group);
  if (rc < 0)
    return nxpvmi_gerr(rc);
  b->ctx = nxpvm.ctx;
  if (nxpvm.is_root) {
    /* The root hands its own broadcast to its sequencer directly. */
    struct seqitem *it = calloc(1, sizeof(*it));
    if (it == NULL || (it->b = nxpvmi_buf_clone(b)) == NULL) {
      free(it);
      return nxpvmi_gerr(PvmNoMem);
    }
    it->kind = S_BCAST;
    it->src = nxpvm.mytid;
    it->tag = msgtag;
    snprintf(it->group, sizeof(it->group), "%s", group);
    seq_push(it);
    return PvmOk;
  }
  nx_gp_t root = NX_GP_NULL;
  rc = nxpvmi_resolve_root(&root);
  if (rc < 0)
    return nxpvmi_gerr(PvmSysErr);
  nx_buffer_t *o;
  rc = nxpvmi_rsr(nxpvm.roottid, &root, H_GBC, b->bytes + 128, &o);
  if (rc == 0) {
    int r = nx_put_int32(o, msgtag);
    if (r == 0)
      r = nxpvmi_put_name(o, group);
    if (r == 0)
      r = nxpvmi_encode(o, b);
    if (r < 0) {
      nx_buffer_release(o);
      rc = nxpvmi_nx_to_pvm(r);
    } else {
      rc = nxpvmi_send_root(o);
    }
  }
  nx_gp_release(&root);
  return rc < 0 ? nxpvmi_gerr(rc) : PvmOk;
}

/* The group's tids in instance order, and this task's instance. */
static int roster(char *group, int **tids, int *me) {
  int n = pvm_gsize(group);
  if (n < 0)
    return n;
  int *t = malloc((size_t)n * sizeof(int) + 1);
  if (t == NULL)
    return PvmNoMem;
  for (int i = 0; i < n; i++) {
    t[i] = pvm_gettid(group, i);
    if (t[i] < 0) {
      int rc = t[i];
      free(t);
      return rc;
    }
  }
  *me = -1;
  for (int i = 0; i < n; i++)
    if (t[i] == nxpvm.mytid)
      *me = i;
  *tids = t;
  return n;
}

int pvm_reduce(void (*func)(int *, void *, void *, int *, int *), void *data,
               int count, int datatype, int msgtag, char *group,
               int rootginst) {
  int size = nxpvmi_type_size(datatype);
  if (func == NULL || count < 0 || size == 0 || (data == NULL && count > 0) ||
      rootginst < 0)
    return nxpvmi_gerr(PvmBadParam);
  int *tids, me;
  int n = roster(group, &tids, &me);
  if (n < 0)
    return nxpvmi_gerr(n);
  int rc = PvmOk;
  if (me < 0)
    rc = PvmNotInGroup;
  else if (rootginst >= n)
    rc = PvmNoInst;
  else if (me != rootginst)
    rc = pvm_psend(tids[rootginst], msgtag, data, count, datatype);
  else {
    void *tmp = malloc((size_t)count * (size_t)size + 1);
    if (tmp == NULL)
      rc = PvmNoMem;
    for (int i = 0; rc == 0 && i < n; i++) {
      if (i == me)
        continue;
      int rtid, rtag, rlen, info = PvmOk;
      rc =
          pvm_precv(tids[i], msgtag, tmp, count, datatype, &rtid, &rtag, &rlen);
      if (rc == 0 && rlen != count * size) /* bytes */
        rc = PvmMismatch;
      if (rc == 0)
        func(&datatype, data, tmp, &count, &info);
      if (rc == 0 && info < 0)
        rc = info;
    }
    free(tmp);
  }
  free(tids);
  return rc < 0 ? nxpvmi_gerr(rc) : PvmOk;
}

int pvm_gather(void *result, void *data, int count, int datatype, int msgtag,
               char *group, int rootginst) {
  int size = nxpvmi_type_size(datatype);
  if (count < 0 || size == 0 || (data == NULL && count > 0) || rootginst < 0)
    return nxpvmi_gerr(PvmBadParam);
  int *tids, me;
  int n = roster(group, &tids, &me);
  if (n < 0)
    return nxpvmi_gerr(n);
  int rc = PvmOk;
  size_t chunk = (size_t)count * (size_t)size;
  if (me < 0)
    rc = PvmNotInGroup;
  else if (rootginst >= n)
    rc = PvmNoInst;
  else if (me != rootginst)
    rc = pvm_psend(tids[rootginst], msgtag, data, count, datatype);
  else if (result == NULL && count > 0)
    rc = PvmBadParam;
  else
    for (int i = 0; rc == 0 && i < n; i++) {
      char *slot = (char *)result + (size_t)i * chunk;
      if (i == me) {
        memcpy(slot, data, chunk);
        continue;
      }
      int rtid, rtag, rlen;
      rc = pvm_precv(tids[i], msgtag, slot, count, datatype, &rtid, &rtag,
                     &rlen);
      if (rc == 0 && rlen != count * size) /* bytes */
        rc = PvmMismatch;
    }
  free(tids);
  return rc < 0 ? nxpvmi_gerr(rc) : PvmOk;
}

int pvm_scatter(void *result, void *data, int count, int datatype, int msgtag,
                char *group, int rootginst) {
  int size = nxpvmi_type_size(datatype);
  if (count < 0 || size == 0 || (result == NULL && count > 0) || rootginst < 0)
    return nxpvmi_gerr(PvmBadParam);
  int *tids, me;
  int n = roster(group, &tids, &me);
  if (n < 0)
    return nxpvmi_gerr(n);
  int rc = PvmOk;
  size_t chunk = (size_t)count * (size_t)size;
  if (me < 0)
    rc = PvmNotInGroup;
  else if (rootginst >= n)
    rc = PvmNoInst;
  else if (me != rootginst) {
    int rtid, rtag, rlen;
    rc = pvm_precv(tids[rootginst], msgtag, result, count, datatype, &rtid,
                   &rtag, &rlen);
    if (rc == 0 && rlen != count * size) /* bytes */
      rc = PvmMismatch;
  } else if (data == NULL && count > 0)
    rc = PvmBadParam;
  else
    for (int i = 0; rc == 0 && i < n; i++) {
      char *slot = (char *)data + (size_t)i * chunk;
      if (i == me)
        memcpy(result, slot, chunk);
      else
        rc = pvm_psend(tids[i], msgtag, slot, count, datatype);
    }
  free(tids);
  return rc < 0 ? nxpvmi_gerr(rc) : PvmOk;
}

/* ---- the predefined reduce functions: x = x op y, element-wise ---- */

#define REDUCE_CASES(OP)                                                       \
  switch (*dt) {                                                               \
  case PVM_BYTE: LOOP(signed char, OP); break;                                 \
  case PVM_SHORT: LOOP(short, OP); break;                                      \
  case PVM_USHORT: LOOP(unsigned short, OP); break;                            \
  case PVM_INT: LOOP(int, OP); break;                                          \
  case PVM_UINT: LOOP(unsigned, OP); break;                                    \
  case PVM_LONG: LOOP(long, OP); break;                                        \
  case PVM_ULONG: LOOP(unsigned long, OP); break;                              \
  case PVM_FLOAT: LOOP(float, OP); break;                                      \
  case PVM_DOUBLE: LOOP(double, OP); break;                                    \
  default: *info = PvmBadParam; return;                                        \
  }                                                                            \
  *info = PvmOk;

#define LOOP(T, OP)                                                            \
  for (int i = 0; i < *num; i++) {                                             \
    T *a = (T *)x + i, b = ((T *)y)[i];                                        \
    OP;                                                                        \
  }

void PvmMax(int *dt, void *x, void *y, int *num, int *info) {
  REDUCE_CASES(if (b > *a) *a = b)
}

void PvmMin(int *dt, void *x, void *y, int *num, int *info) {
  REDUCE_CASES(if (b < *a) *a = b)
}

/* Sum and product also take complex values (PVM_CPLX, PVM_DCPLX). */
void PvmSum(int *dt, void *x, void *y, int *num, int *info) {
  if (*dt == PVM_CPLX || *dt == PVM_DCPLX) {
    int n = 2 * *num;
    for (int i = 0; i < n; i++)
      if (*dt == PVM_CPLX)
        ((float *)x)[i] += ((float *)y)[i];
      else
        ((double *)x)[i] += ((double *)y)[i];
    *info = PvmOk;
    return;
  }
  REDUCE_CASES(*a = (__typeof__(*a))(*a + b))
}

void PvmProduct(int *dt, void *x, void *y, int *num, int *info) {
  if (*dt == PVM_CPLX || *dt == PVM_DCPLX) {
    for (int i = 0; i < *num; i++) {
      if (*dt == PVM_CPLX) {
        float *a = (float *)x + 2 * i, *b = (float *)y + 2 * i;
        float re = a[0] * b[0] - a[1] * b[1], im = a[0] * b[1] + a[1] * b[0];
        a[0] = re, a[1] = im;
      } else {
        double *a = (double *)x + 2 * i, *b = (double *)y + 2 * i;
        double re = a[0] * b[0] - a[1] * b[1], im = a[0] * b[1] + a[1] * b[0];
        a[0] = re, a[1] = im;
      }
    }
    *info = PvmOk;
    return;
  }
  REDUCE_CASES(*a = (__typeof__(*a))(*a * b))
}
