/* PVM's message mailboxes with no pvmd: the root task keeps the database
 * (classes of entries, each a message under a name and an index) in its
 * RSR handlers, as it keeps the groups; the other tasks ask it by RSR
 * ("nxpvm.mbox") and wait for the reply, which carries the message. The
 * rules for inserting, overwriting and deleting are the PVM 3.4 pvmd's. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

/* The longest class name a request may carry. */
#define MBOX_NAME_MAX 4096

/* ---- the root's side ---- */

/* With nxpvm.m held. */
static struct mclass *class_find(const char *name, int create) {
  struct mclass **pp = &nxpvm.mboxes;
  for (; *pp != NULL; pp = &(*pp)->next)
    if (strcmp((*pp)->name, name) == 0)
      return *pp;
  if (!create)
    return NULL;
  struct mclass *c = calloc(1, sizeof(*c));
  if (c == NULL || (c->name = strdup(name)) == NULL) {
    free(c);
    return NULL;
  }
  /* Last: pvm_getmboxinfo lists the classes in the order they were made,
   * as PVM's pvmd does. */
  *pp = c;
  return c;
}

static void entry_free(struct mentry *e) {
  nxpvmi_buf_free(e->b);
  free(e);
}

/* Drops a class left without entries. With nxpvm.m held. */
static void class_tidy(struct mclass *c) {
  if (c->ents != NULL)
    return;
  for (struct mclass **pp = &nxpvm.mboxes; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      free(c->name);
      free(c);
      return;
    }
}

/* Inserts message `b` (taken) under `name`. `req` -1 is pvm_putinfo: the
 * index is the direct index in `flags` (0 by default); an entry there is
 * replaced if it is overwritable or the caller's, else PvmDenied; with
 * PvmMboxMultiInstance the entry goes at the first free index from there.
 * `req` >= 0 is pvm_insert: exactly that index, PvmDenied if taken. */
static int mb_insert(int from, const char *name, int req, int flags,
                     struct pvmbuf *b) {
  struct mclass *c = class_find(name, 1);
  if (c == NULL)
    return PvmNoMem;
  int ind = req >= 0 ? req : (int)PvmMboxDirectIndexOf(flags);
  struct mentry **pp = &c->ents;
  while (*pp != NULL && (*pp)->index < ind)
    pp = &(*pp)->next;
  if (*pp != NULL && (*pp)->index == ind) {
    if (req >= 0) {
      class_tidy(c);
      return PvmDenied;
    }
    if (flags & PvmMboxMultiInstance) {
      while (*pp != NULL && (*pp)->index == ind) {
        ind++;
        pp = &(*pp)->next;
      }
    } else {
      struct mentry *old = *pp;
      if (!(old->flags & PvmMboxOverWritable) && old->owner != from)
        return PvmDenied;
      *pp = old->next;
      entry_free(old);
    }
  }
  struct mentry *e = calloc(1, sizeof(*e));
  if (e == NULL) {
    class_tidy(c);
    return PvmNoMem;
  }
  *e = (struct mentry){ind, from, flags, b, *pp};
  *pp = e;
  return ind;
}

/* The entry at `req` (with PvmMboxFirstAvail: the first at or after it);
 * with PvmMboxReadAndDelete it is also deleted if the caller may. Sets
 * *out to a copy of its message. */
static int mb_lookup(int from, const char *name, int req, int flags,
                     struct pvmbuf **out) {
  struct mclass *c = class_find(name, 0);
  if (c == NULL)
    return PvmNotFound;
  struct mentry **pp = &c->ents;
  while (*pp != NULL && (*pp)->index < req)
    pp = &(*pp)->next;
  struct mentry *e = *pp;
  if (e == NULL || (!(flags & PvmMboxFirstAvail) && e->index != req))
    return PvmNotFound;
  if ((flags & PvmMboxReadAndDelete) && !(e->flags & PvmMboxOverWritable) &&
      e->owner != from)
    return PvmDenied;
  int ind = e->index;
  if (flags & PvmMboxReadAndDelete) {
    *pp = e->next;
    *out = e->b;
    e->b = NULL;
    entry_free(e);
    class_tidy(c);
    return ind;
  }
  *out = nxpvmi_buf_clone(e->b);
  return *out != NULL ? ind : PvmNoMem;
}

static int mb_delete(int from, const char *name, int req) {
  struct mclass *c = class_find(name, 0);
  if (c == NULL)
    return PvmNotFound;
  struct mentry **pp = &c->ents;
  while (*pp != NULL && (*pp)->index != req)
    pp = &(*pp)->next;
  struct mentry *e = *pp;
  if (e == NULL)
    return PvmNotFound;
  if (!(e->flags & PvmMboxOverWritable) && e->owner != from)
    return PvmDenied;
  *pp = e->next;
  entry_free(e);
  class_tidy(c);
  return PvmOk;
}

/* The classes whose names match `pattern` ("*": all; else a POSIX regular
 * expression), packed in a message: the count, then per class its name,
 * its number of entries and their indices, owners and flags. */
static int mb_info(const char *pattern, struct pvmbuf **out) {
  regex_t re;
  int all = strcmp(pattern, "*") == 0;
  if (!all && regcomp(&re, pattern, REG_NOSUB) != 0)
    return PvmBadParam;
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  int n = 0, rc = b != NULL ? PvmOk : PvmNoMem;
  for (struct mclass *c = nxpvm.mboxes; c != NULL; c = c->next)
    if (all || regexec(&re, c->name, 0, NULL, 0) == 0)
      n++;
  if (rc == 0)
    rc = nxpvmi_pack_into(b, K_I32, &n, 1, 1, sizeof(int));
  for (struct mclass *c = nxpvm.mboxes; rc == 0 && c != NULL; c = c->next) {
    if (!all && regexec(&re, c->name, 0, NULL, 0) != 0)
      continue;
    int k = 0;
    for (struct mentry *e = c->ents; e != NULL; e = e->next)
      k++;
    int *v = malloc(3 * (size_t)k * sizeof(int) + 1);
    if (v == NULL) {
      rc = PvmNoMem;
      break;
    }
    int i = 0;
    for (struct mentry *e = c->ents; e != NULL; e = e->next, i++) {
      v[i] = e->index;
      v[k + i] = e->owner;
      v[2 * k + i] = e->flags;
    }
    rc = nxpvmi_pack_into(b, K_STR, c->name, (int)strlen(c->name) + 1, 1, 1);
    if (rc == 0)
      rc = nxpvmi_pack_into(b, K_I32, &k, 1, 1, sizeof(int));
    if (rc == 0 && k > 0)
      rc = nxpvmi_pack_into(b, K_I32, v, 3 * k, 1, sizeof(int));
    free(v);
  }
  if (!all)
    regfree(&re);
  if (rc < 0) {
    nxpvmi_buf_free(b);
    return rc;
  }
  *out = b;
  return PvmOk;
}

static int get_text(nx_buffer_t *b, char **s) {
  uint32_t n;
  if (nx_get_uint32(b, &n) < 0 || n > MBOX_NAME_MAX)
    return -1;
  char *t = malloc((size_t)n + 1);
  if (t == NULL || (n > 0 && nx_get_char_array(b, t, n) < 0)) {
    free(t);
    return -1;
  }
  t[n] = '\0';
  *s = t;
  return 0;
}

/* "nxpvm.mbox" (root): rpc id, op, name, index, flags, and for M_PUT the
 * message. The reply carries the result and, for M_RECV and M_INFO, a
 * message. */
void nxpvmi_on_mbox(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t id, op, index, flags, has_b;
  char *name = NULL;
  struct pvmbuf *in = NULL, *out = NULL;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &id) < 0 ||
      nx_get_int32(buf, &op) < 0 || get_text(buf, &name) < 0)
    return;
  int rc = PvmBadParam;
  if (nx_get_int32(buf, &index) < 0 || nx_get_int32(buf, &flags) < 0 ||
      nx_get_int32(buf, &has_b) < 0 || (has_b && nxpvmi_decode(buf, &in) < 0)) {
    nxpvmi_reply(from, id, PvmBadMsg);
    free(name);
    return;
  }
  if (op >= M_HADD) {
    nxpvmi_on_host(from, id, op, name, index, flags, in);
    nxpvmi_buf_free(in);
    free(name);
    return;
  }
  nx_mutex_lock(&nxpvm.m);
  switch (op) {
  case M_PUT:
    if (in != NULL) {
      rc = mb_insert(from, name, index, flags, in);
      if (rc >= 0)
        in = NULL;
    }
    break;
  case M_RECV: rc = mb_lookup(from, name, index, flags, &out); break;
  case M_DEL: rc = mb_delete(from, name, index); break;
  case M_INFO: rc = mb_info(name, &out); break;
  }
  nx_mutex_unlock(&nxpvm.m);
  nxpvmi_reply_buf(from, id, rc, out);
  nxpvmi_buf_free(in);
  nxpvmi_buf_free(out);
  free(name);
}

/* The entries of a task that ended leave with it, but for persistent
 * ones, which stay with no owner (0). Called with nxpvm.m held. */
void nxpvmi_mbox_forget(int tid) {
  for (struct mclass *c = nxpvm.mboxes, *next; c != NULL; c = next) {
    next = c->next;
    for (struct mentry **pp = &c->ents; *pp != NULL;) {
      struct mentry *e = *pp;
      if (e->owner != tid) {
        pp = &e->next;
      } else if (e->flags & PvmMboxPersistent) {
        e->owner = 0;
        pp = &e->next;
      } else {
        *pp = e->next;
        entry_free(e);
      }
    }
    class_tidy(c);
  }
}

void nxpvmi_mbox_free(void) {
  while (nxpvm.mboxes != NULL) {
    struct mclass *c = nxpvm.mboxes;
    nxpvm.mboxes = c->next;
    while (c->ents != NULL) {
      struct mentry *e = c->ents;
      c->ents = e->next;
      entry_free(e);
    }
    free(c->name);
    free(c);
  }
}

/* ---- the tasks' side ---- */

/* One mailbox (or host) request to the root; `*reply` gets the message
 * the reply carries, if any. */
int nxpvmi_mbox_call(int op, const char *name, int index, int flags,
                     const struct pvmbuf *b, struct pvmbuf **reply) {
  if (!nxpvmi_started())
    return PvmSysErr;
  nx_gp_t root = NX_GP_NULL;
  if (nxpvmi_resolve_root(&root) < 0)
    return PvmSysErr;
  struct rpc *r = nxpvmi_rpc_new();
  if (r == NULL) {
    nx_gp_release(&root);
    return PvmNoMem;
  }
  size_t n = strlen(name);
  nx_buffer_t *o;
  int rc = nxpvmi_rsr(nxpvm.roottid, &root, H_MBOX,
                      n + 64 + (b != NULL ? b->bytes : 0), &o);
  if (rc == 0) {
    int w = nx_put_int32(o, r->id);
    if (w == 0)
      w = nx_put_int32(o, op);
    if (w == 0)
      w = nx_put_uint32(o, (uint32_t)n);
    if (w == 0 && n > 0)
      w = nx_put_char_array(o, name, n);
    if (w == 0)
      w = nx_put_int32(o, index);
    if (w == 0)
      w = nx_put_int32(o, flags);
    if (w == 0)
      w = nx_put_int32(o, b != NULL);
    if (w == 0 && b != NULL)
      w = nxpvmi_encode(o, b);
    if (w < 0) {
      nx_buffer_release(o);
      rc = nxpvmi_nx_to_pvm(w);
    } else {
      rc = nxpvmi_send_root(o);
    }
  }
  if (rc == 0)
    rc = nxpvmi_rpc_wait(r, 60, 0);
  if (reply != NULL) {
    nx_mutex_lock(&nxpvm.m);
    *reply = r->b;
    r->b = NULL;
    nx_mutex_unlock(&nxpvm.m);
  }
  nxpvmi_rpc_free(r);
  nx_gp_release(&root);
  return rc;
}

static int check_name(const char *name) {
  if (name == NULL || strlen(name) > MBOX_NAME_MAX)
    return PvmBadParam;
  return PvmOk;
}

int pvm_putinfo(char *name, int bufid, int flags) {
  int rc = check_name(name);
  if (rc == 0 && bufid <= 0)
    rc = PvmBadParam;
  struct pvmbuf *b = rc == 0 ? nxpvmi_buf_get(bufid) : NULL;
  if (rc == 0 && b == NULL)
    rc = PvmNoSuchBuf;
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_PUT, name, -1, flags, b, NULL);
  return rc < 0 ? nxpvmi_err("pvm_putinfo", rc) : rc;
}

/* The entry's message becomes a new buffer (not the active one, as PVM),
 * whose id is returned. PvmMboxWaitForInfo waits until the entry exists. */
int pvm_recvinfo(char *name, int index, int flags) {
  int rc = check_name(name);
  if (rc == 0 && index < 0)
    rc = PvmBadParam;
  struct pvmbuf *b = NULL;
  for (int pause_us = 1000; rc == 0;) {
    rc = nxpvmi_mbox_call(M_RECV, name, index, flags, NULL, &b);
    if (rc != PvmNotFound || !(flags & PvmMboxWaitForInfo))
      break;
    usleep((useconds_t)pause_us);
    if (pause_us < 100000)
      pause_us *= 2;
    rc = 0;
  }
  if (rc >= 0 && b == NULL)
    rc = PvmBadMsg;
  if (rc >= 0) {
    b->src = b->src != 0 ? b->src : nxpvm.mytid;
    rc = nxpvmi_buf_register(b);
  }
  if (rc < 0) {
    nxpvmi_buf_free(b);
    return nxpvmi_err("pvm_recvinfo", rc);
  }
  return rc;
}

int pvm_delinfo(char *name, int index, int flags) {
  (void)flags; /* PVM 3.4 defines none */
  int rc = check_name(name);
  if (rc == 0 && index < 0)
    rc = PvmBadParam;
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_DEL, name, index, 0, NULL, NULL);
  return rc < 0 ? nxpvmi_err("pvm_delinfo", rc) : PvmOk;
}

/* What the last pvm_getmboxinfo gave; freed by the next call. */
static struct pvmmboxinfo *mbinfo;
static int nmbinfo;

static void mbinfo_free(void) {
  for (int i = 0; i < nmbinfo; i++) {
    free(mbinfo[i].mi_name);
    free(mbinfo[i].mi_indices);
  }
  free(mbinfo);
  mbinfo = NULL;
  nmbinfo = 0;
}

int pvm_getmboxinfo(char *pattern, int *nclasses,
                    struct pvmmboxinfo **classes) {
  int rc = check_name(pattern);
  if (rc < 0)
    return nxpvmi_err("pvm_getmboxinfo", rc);
  struct pvmbuf *b = NULL;
  rc = nxpvmi_mbox_call(M_INFO, pattern, 0, 0, NULL, &b);
  if (rc == 0 && b == NULL)
    rc = PvmBadMsg;
  mbinfo_free();
  int n = 0;
  if (rc == 0)
    rc = nxpvmi_unpack_from(b, K_I32, &n, 1, 1, sizeof(int));
  if (rc == 0 && (n < 0 || (size_t)n > b->bytes))
    rc = PvmBadMsg;
  if (rc == 0 && (mbinfo = calloc((size_t)n + 1, sizeof(*mbinfo))) == NULL)
    rc = PvmNoMem;
  for (int i = 0; rc == 0 && i < n; i++) {
    struct pvmmboxinfo *m = &mbinfo[i];
    struct seg *s = b->rseg < b->nseg ? &b->segs[b->rseg] : NULL;
    int k = 0;
    if (s == NULL || s->kind != K_STR || b->relem != 0) {
      rc = PvmBadMsg;
      break;
    }
    if ((m->mi_name = malloc(s->count)) == NULL) {
      rc = PvmNoMem;
      break;
    }
    nmbinfo = i + 1;
    rc = nxpvmi_unpack_from(b, K_STR, m->mi_name, (int)s->count, 1, 1);
    m->mi_name[s->count - 1] = '\0';
    if (rc == 0)
      rc = nxpvmi_unpack_from(b, K_I32, &k, 1, 1, sizeof(int));
    if (rc == 0 && (k < 0 || (size_t)k > b->bytes))
      rc = PvmBadMsg;
    if (rc == 0 &&
        (m->mi_indices = malloc(3 * (size_t)k * sizeof(int) + 1)) == NULL)
      rc = PvmNoMem;
    if (rc == 0 && k > 0)
      rc = nxpvmi_unpack_from(b, K_I32, m->mi_indices, 3 * k, 1, sizeof(int));
    if (rc == 0) {
      m->mi_nentries = k;
      m->mi_owners = m->mi_indices + k;
      m->mi_flags = m->mi_indices + 2 * k;
    }
  }
  nxpvmi_buf_free(b);
  if (rc < 0) {
    mbinfo_free();
    return nxpvmi_err("pvm_getmboxinfo", rc);
  }
  nmbinfo = n;
  if (nclasses != NULL)
    *nclasses = n;
  if (classes != NULL)
    *classes = mbinfo;
  return PvmOk;
}

/* PVM 3.3's database calls, on the mailboxes as PVM 3.4 has them: an int
 * under <name, req>; `req` -1 means the first free index (insert) or the
 * first entry (lookup). */
int pvm_insert(char *name, int req, int data) {
  int rc = check_name(name);
  if (rc == 0 && req < -1)
    rc = PvmBadParam;
  struct pvmbuf *b = rc == 0 ? nxpvmi_buf_new(PvmDataDefault) : NULL;
  if (rc == 0 && b == NULL)
    rc = PvmNoMem;
  if (rc == 0)
    rc = nxpvmi_pack_into(b, K_I32, &data, 1, 1, sizeof(int));
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_PUT, name, req,
                          req == -1 ? PvmMboxMultiInstance | PvmMboxPersistent
                                    : PvmMboxPersistent,
                          b, NULL);
  nxpvmi_buf_free(b);
  return rc < 0 ? nxpvmi_err("pvm_insert", rc) : rc;
}

int pvm_lookup(char *name, int req, int *datap) {
  int rc = check_name(name);
  if (rc == 0 && req < -1)
    rc = PvmBadParam;
  struct pvmbuf *b = NULL;
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_RECV, name, req == -1 ? 0 : req,
                          req == -1 ? PvmMboxFirstAvail : 0, NULL, &b);
  int data = 0;
  if (rc >= 0 && b == NULL)
    rc = PvmBadMsg;
  if (rc >= 0) {
    int u = nxpvmi_unpack_from(b, K_I32, &data, 1, 1, sizeof(int));
    if (u < 0)
      rc = u;
  }
  nxpvmi_buf_free(b);
  if (rc < 0)
    return rc == PvmNotFound ? rc : nxpvmi_err("pvm_lookup", rc);
  if (datap != NULL)
    *datap = data;
  return rc;
}

int pvm_delete(char *name, int req) {
  int rc = check_name(name);
  if (rc == 0 && req < 0)
    rc = PvmBadParam;
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_DEL, name, req, 0, NULL, NULL);
  /* As PVM 3.4's: the index of the entry deleted. */
  return rc < 0 ? nxpvmi_err("pvm_delete", rc) : req;
}

/* The tasks that set PvmNoReset, as PVM lists them: the owners of the
 * entries of the class PVMNORESETCLASS. */
int pvm_getnoresets(int **tids, int *ntids) {
  static int *list;
  struct pvmmboxinfo *c;
  int n;
  int rc = pvm_getmboxinfo(PVMNORESETCLASS, &n, &c);
  if (rc < 0)
    return rc;
  free(list);
  list = NULL;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (strcmp(c[i].mi_name, PVMNORESETCLASS) == 0)
      k += c[i].mi_nentries;
  list = malloc((size_t)k * sizeof(int) + 1);
  if (list == NULL)
    return nxpvmi_err("pvm_getnoresets", PvmNoMem);
  k = 0;
  for (int i = 0; i < n; i++)
    if (strcmp(c[i].mi_name, PVMNORESETCLASS) == 0)
      for (int j = 0; j < c[i].mi_nentries; j++)
        list[k++] = c[i].mi_owners[j];
  if (tids != NULL)
    *tids = list;
  if (ntids != NULL)
    *ntids = k;
  return PvmOk;
}
