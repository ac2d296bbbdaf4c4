/* PVM tasks on nexus process contexts: starting the runtime on the first
 * call, tids, the peer table, spawn, kill, exit notification and the
 * small request/reply protocol every task speaks with the root task. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

struct pvmstate nxpvm = {.autoerr = 1, .route = PvmAllowDirect, .showtids = 1};

/* libpvm3 exports these beside pvm3.h, and programs written for it (PVM's
 * own examples among them) declare and use them: the last error's code
 * (pvm_errno), the error texts (pvm_errlist, pvm_nerr entries), the debug
 * mask (pvmdebmask; nothing here reads it), and lpvmerr, pvmsleep, pvmgetclock
 * and pvmdisplaymhfinfo (pvm_msg.c). The texts are libpvm 3.4.6's, codes
 * without a name included. */
char *pvm_errlist[] = {
    "Error 0",
    "Error 1",
    "Bad parameter",
    "Parameter mismatch",
    "Value too large",
    "End of buffer",
    "No such host",
    "No such file",
    "Permission denied",
    "Error 9",
    "Malloc failed",
    "Error 11",
    "Can't decode message",
    "Error 13",
    "Can't contact local daemon",
    "No current buffer",
    "No such buffer",
    "Null group name",
    "Already in group",
    "No such group",
    "Not in group",
    "No such instance",
    "Host failed",
    "No parent task",
    "Not implemented",
    "Pvmd system error",
    "Version mismatch",
    "Out of resources",
    "Duplicate host",
    "Can't start pvmd",
    "Already in progress",
    "No such task",
    "Not Found",
    "Already Exists",
    "Hoster must run on master host",
    "Spawning parent set PvmNoParent",
    "Master Host IP Address is Loopback! (See pvm3/Readme)",
};
int pvm_nerr = (int)(sizeof(pvm_errlist) / sizeof(pvm_errlist[0]));
int pvm_errno;
int pvmdebmask;

const char *nxpvmi_errstr(int code) {
  return code <= 0 && code > -pvm_nerr ? pvm_errlist[-code] : "Unknown Error";
}

/* libpvm's prefix of its messages on stderr: the task's tid, or before the
 * task is enrolled its process id as libpvm knows it then (-1). */
static void err_prefix(void) {
  if (nxpvm.mytid > 0)
    fprintf(stderr, "libpvm [t%x]: ", (unsigned)nxpvm.mytid);
  else
    fprintf(stderr, "libpvm [pid%d]: ", -1);
}

/* Records `code` in pvm_errno (pvm_perror, pvm_strerror) and, with
 * PvmAutoErr on, says it on stderr as `fn`() as libpvm does. */
static void err_record(const char *fn, int code) {
  pvm_errno = code;
  if (nxpvm.autoerr) {
    err_prefix();
    fprintf(stderr, "%.124s(): %s\n", fn != NULL ? fn : "(null)",
            nxpvmi_errstr(code));
  }
}

/* A failing call's error (PvmAutoErr 2 and 3 print only: see lpvmerr). */
int nxpvmi_err(const char *fn, int code) {
  if (code < 0)
    err_record(fn, code);
  return code;
}

/* The same for the group calls (PVM's libgpvm3), which set pvm_errno but
 * say nothing, whatever PvmAutoErr is. */
int nxpvmi_gerr(int code) {
  if (code < 0)
    pvm_errno = code;
  return code;
}

/* libpvm's own error report, which programs call too: records `code`
 * whatever it is, says it as `fn`() with PvmAutoErr on, and with
 * PvmAutoErr 2 ends the program (exit status `code`), with 3 aborts. */
int lpvmerr(char *fn, int code) {
  err_record(fn, code);
  if (nxpvm.autoerr) {
    fflush(stderr);
    if (nxpvm.autoerr == 3)
      abort();
    if (nxpvm.autoerr == 2) {
      nxpvm.autoerr = 1;
      pvm_exit();
      exit(code);
    }
  }
  return code;
}

/* sleep's answer: the seconds left when a signal ended it early. */
int pvmsleep(int secs) { return secs > 0 ? (int)sleep((unsigned)secs) : 0; }

int pvmgetclock(struct timeval *tm) { return gettimeofday(tm, NULL); }

int nxpvmi_send_root(nx_buffer_t *b) {
  int rc = nxpvmi_send(b);
  return rc == NX_EPEERDEAD || rc == NX_ENOCONTEXT ? PvmSysErr
                                                   : nxpvmi_nx_to_pvm(rc);
}

int nxpvmi_nx_to_pvm(int rc) {
  switch (rc) {
  case 0: return PvmOk;
  case NX_EINVAL: return PvmBadParam;
  case NX_ENOMEM: return PvmNoMem;
  case NX_ENOENT: return PvmNoFile;
  case NX_EAGAIN: return PvmOutOfRes;
  case NX_ENOCONTEXT:
  case NX_EPEERDEAD: return PvmNoTask;
  case NX_ERANGE: return PvmNoData;
  case NX_ETYPE:
  case NX_EPROTO: return PvmBadMsg;
  default: return PvmSysErr;
  }
}

/* A tid is the 30 low bits of the process part (the high 32 bits) of the
 * task's context id: unique per process, computable by anyone holding a
 * gp, and what nexus names a dead process by. */
int nxpvmi_tid_of_context(uint64_t ctx) {
  int tid = (int)((ctx >> 32) & 0x3fffffffu);
  return tid == 0 ? 1 : tid;
}

/* Called with nxpvm.m held. */
struct peer *nxpvmi_peer(int tid, int create) {
  for (int i = 0; i < nxpvm.npeers; i++)
    if (nxpvm.peers[i].tid == tid)
      return &nxpvm.peers[i];
  if (!create)
    return NULL;
  if (nxpvm.npeers == nxpvm.peercap) {
    int cap = nxpvm.peercap ? 2 * nxpvm.peercap : 16;
    struct peer *p = realloc(nxpvm.peers, (size_t)cap * sizeof(*p));
    if (p == NULL)
      return NULL;
    nxpvm.peers = p;
    nxpvm.peercap = cap;
  }
  struct peer *p = &nxpvm.peers[nxpvm.npeers++];
  memset(p, 0, sizeof(*p));
  p->tid = tid;
  p->ptid = PvmNoParent;
  return p;
}

/* Learns (or refreshes) a task's gp. Called with nxpvm.m held; takes
 * `gp`'s reference. */
static struct peer *learn(const nx_gp_t *gp) {
  int tid = nxpvmi_tid_of_context(nx_gp_context(gp));
  struct peer *p = nxpvmi_peer(tid, 1);
  if (p == NULL || p->has_gp) {
    nx_gp_t tmp = *gp;
    nx_gp_release(&tmp);
    return p;
  }
  p->gp = *gp;
  p->has_gp = 1;
  return p;
}

static void fire_notifies(int tid) {
  for (int i = 0; i < nxpvm.nnotes; i++) {
    struct notify *n = &nxpvm.notes[i];
    if (n->tid != tid || n->fired)
      continue;
    n->fired = 1;
    /* The PvmTaskExit message holds the tid of the task that ended. */
    struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
    if (b == NULL)
      continue;
    b->src = tid;
    b->tag = n->tag;
    b->ctx = n->ctx;
    if (nxpvmi_pack_into(b, K_I32, &tid, 1, 1, sizeof(int)) < 0) {
      nxpvmi_buf_free(b);
      continue;
    }
    nxpvmi_deliver(b);
  }
}

/* Marks a task dead, wakes every waiter and sends the notifies asked for.
 * Called with nxpvm.m held. */
static void mark_dead(int tid) {
  struct peer *p = nxpvmi_peer(tid, 1);
  if (p == NULL || p->dead)
    return;
  p->dead = 1;
  nxpvm.deaths++;
  fire_notifies(tid);
  nxpvmi_groups_forget(tid);
  nxpvmi_mbox_forget(tid);
  nxpvmi_hosts_forget(tid);
  nx_cond_broadcast(&nxpvm.c);
}

/* The id of "nxpvm.msg", the handler every pvm_send goes to, and of the
 * task's context, which has it. */
static nx_handler_id_t msg_id;
static uint64_t self_ctx;

/* The handle of on_error (nx_error_cb_add), or 0. */
static int errcb;

/* nexus reports a dead peer process with its process part and low 32 bits
 * 0: that is the task's tid. */
static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (err == NX_EPEERDEAD && handler == msg_id && context == self_ctx) {
    /* A message placed into pvm_precv's buffer was lost midway. */
    nx_mutex_lock(&nxpvm.m);
    nxpvmi_place_lost();
    nx_mutex_unlock(&nxpvm.m);
    return;
  }
  if (err != NX_EPEERDEAD || handler != 0 || (context & 0xffffffffu) != 0)
    return;
  nx_mutex_lock(&nxpvm.m);
  if (!nxpvm.closing) {
    int tid = nxpvmi_tid_of_context(context);
    struct peer *p = nxpvmi_peer(tid, 1);
    if (p != NULL)
      p->gone = 1;
    /* The root may know the task (its spawner registered it) without
     * hearing of its end: the spawner, which always does, tells it (from
     * a PVM call: this callback must not block). */
    if (p != NULL && p->child && !p->dead && !nxpvm.is_root) {
      if (nxpvm.ngone == nxpvm.gonecap) {
        int cap = nxpvm.gonecap ? 2 * nxpvm.gonecap : 8;
        int *q = realloc(nxpvm.gone_q, (size_t)cap * sizeof(int));
        if (q != NULL) {
          nxpvm.gone_q = q;
          nxpvm.gonecap = cap;
        }
      }
      if (nxpvm.ngone < nxpvm.gonecap)
        nxpvm.gone_q[nxpvm.ngone++] = tid;
    }
    mark_dead(tid);
    nx_cond_broadcast(&nxpvm.c);
  }
  nx_mutex_unlock(&nxpvm.m);
}

/* Every RSR between tasks starts with one u32: 1 the first time it
 * reaches a task, when the sender's gp follows, else 0. The sender's tid
 * is that of the context that sent it (nx_buffer_source). A message
 * ("nxpvm.msg") sent on the fast path (nxpvmi_rsr_msg) leaves out the 0:
 * its next value, the message's bytes (or their length, a u64), is of
 * another type, which its handler tells apart. */

/* Writes the header for an RSR to `p`. Called with nxpvm.m held. */
static int put_header(nx_buffer_t *b, struct peer *p) {
  int intro = !p->introduced;
  p->introduced = 1;
  int rc = nx_put_uint32(b, (uint32_t)intro);
  if (rc == 0 && intro)
    rc = nx_put_gp(b, &nxpvm.self_gp);
  return rc;
}

/* The fast path of nxpvmi_resolve and nxpvmi_rsr for a message to a live
 * task whose gp is known: one lock, and the RSR goes to the peer's gp
 * (which the peer table keeps until pvm_exit). Returns 0, a PVM error,
 * or 1 when the caller must take the general path. */
int nxpvmi_rsr_msg(int tid, size_t hint, nx_buffer_t **buf, uint32_t *seq) {
  if (nxpvm.fake_format)
    return 1;
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 0);
  if (p == NULL || p->dead || !p->has_gp) {
    nx_mutex_unlock(&nxpvm.m);
    return 1;
  }
  nx_buffer_t *b;
  int rc = nx_rsr_init(&b, &p->gp, msg_id, hint + 16);
  if (rc == 0 && !p->introduced) {
    rc = put_header(b, p);
    if (rc < 0)
      nx_buffer_release(b);
  }
  if (rc == 0)
    *seq = p->msgs_out++;
  nx_mutex_unlock(&nxpvm.m);
  if (rc < 0)
    return nxpvmi_nx_to_pvm(rc);
  *buf = b;
  return 0;
}

/* The count of messages sent to `tid` before this one, for a message the
 * general path (nxpvmi_rsr) sends: as nxpvmi_rsr_msg's `*seq`. */
uint32_t nxpvmi_msg_seq(int tid) {
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 1);
  uint32_t seq = p != NULL ? p->msgs_out++ : 0;
  nx_mutex_unlock(&nxpvm.m);
  return seq;
}

int nxpvmi_rsr(int tid, const nx_gp_t *gp, const char *handler, size_t hint,
               nx_buffer_t **buf) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, gp, handler, hint + 64);
  if (rc < 0)
    return nxpvmi_nx_to_pvm(rc);
  /* NXPVM_FOREIGN_FORMAT=1 (for tests) writes in the other byte order,
   * so receivers convert as they would from another machine. */
  if (nxpvm.fake_format &&
      nx_buffer_set_format(b, nx_format_native() == NX_FORMAT_LITTLE
                                  ? NX_FORMAT_BIG
                                  : NX_FORMAT_LITTLE) < 0) {
    nx_buffer_release(b);
    return PvmSysErr;
  }
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 1);
  if (p == NULL) {
    nx_mutex_unlock(&nxpvm.m);
    nx_buffer_release(b);
    return PvmNoMem;
  }
  rc = put_header(b, p);
  nx_mutex_unlock(&nxpvm.m);
  if (rc < 0) {
    nx_buffer_release(b);
    return nxpvmi_nx_to_pvm(rc);
  }
  *buf = b;
  return 0;
}

/* The sender of the RSR this thread is handling (set by dispatch). */
static NXPVM_TLS int cur_from;

int nxpvmi_origin(nx_buffer_t *buf, int *from) {
  (void)buf;
  *from = cur_from;
  return 0;
}

/* Runs one RSR's handler with its sender known. */
static void run(int from, nx_handler_fn fn, nx_context_t *ctx, void *addr,
                nx_buffer_t *buf) {
  cur_from = from;
  fn(ctx, addr, buf);
}

/* Reads an RSR's header: the sender's tid, and its gp the first time
 * (learnt under the lock by the caller). */
static int get_header(nx_buffer_t *buf, int *tid, nx_gp_t *gp, int *intro) {
  uint32_t h;
  if (nx_get_uint32(buf, &h) < 0)
    return -1;
  *tid = nxpvmi_tid_of_context(nx_buffer_source(buf));
  *intro = h & 1;
  if (*intro && nx_get_gp(buf, gp) < 0)
    return -1;
  return 0;
}

/* An RSR of `tid`'s arrived (its header read; `gp` its sender's, when
 * `intro`): returns its sender's entry with nxpvm.m held, or NULL with the
 * lock let go (this task is closing, or no memory). */
static struct peer *arrival(int tid, int intro, nx_gp_t *gp) {
  nx_mutex_lock(&nxpvm.m);
  if (nxpvm.closing) {
    nx_mutex_unlock(&nxpvm.m);
    nx_gp_release(gp);
    return NULL;
  }
  if (intro)
    learn(gp);
  struct peer *p = nxpvmi_peer(tid, 1);
  if (p == NULL)
    nx_mutex_unlock(&nxpvm.m);
  return p;
}

/* Every handler but the messages' goes through here: it reads the header
 * and learns the sender. nexus runs the RSRs of each sender one at a
 * time, in the order they were sent (NX_RSR_ORDERED). */
static void dispatch(nx_handler_fn fn, nx_context_t *ctx, void *addr,
                     nx_buffer_t *buf) {
  int tid, intro;
  nx_gp_t gp = NX_GP_NULL;
  if (get_header(buf, &tid, &gp, &intro) < 0)
    return;
  struct peer *p = arrival(tid, intro, &gp);
  if (p == NULL)
    return;
  nx_mutex_unlock(&nxpvm.m);
  run(tid, fn, ctx, addr, buf);
}

/* Decodes a message of either form (after the header, if any): its
 * bytes, or a direct message (pvm_psend's), whose placed values are read
 * where they are (`at`: the placed receive's buffer, else NULL). */
static int decode_any(nx_buffer_t *buf, int tid, struct pvmbuf **m, void *at) {
  int rc = nxpvmi_decode_from(buf, tid, m);
  return rc == NX_ETYPE ? nxpvmi_decode_direct(buf, tid, m, at) : rc;
}

/* "nxpvm.msg", the hot path: the message is decoded before the lock is
 * taken, and queued under the lock that learns its sender. A message
 * placed into a pvm_precv's buffer (nxpvmi_place) is not queued: that
 * receive is told it arrived. */
static void on_msg(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int intro = 0;
  nx_gp_t gp = NX_GP_NULL;
  int tid = nxpvmi_tid_of_context(nx_buffer_source(buf));
  struct pvmbuf *m = NULL;
  /* Only nxpvmi_place places, into the one receive it claimed. */
  void *at = nx_buffer_placement(buf) == 1 ? nxpvmi_place_target() : NULL;
  /* The message, unless the header comes first (then the decode reads
   * nothing: NX_ETYPE): the header is read, and the message after. */
  int rc = decode_any(buf, tid, &m, at);
  if (rc == NX_ETYPE) {
    uint32_t h;
    rc = nx_get_uint32(buf, &h);
    intro = rc == 0 && (h & 1);
    if (intro && (rc = nx_get_gp(buf, &gp)) < 0)
      intro = 0;
    if (rc == 0)
      rc = decode_any(buf, tid, &m, at);
  }
  if (rc < 0)
    m = NULL; /* malformed: dropped, as nexus drops a bad frame */
  struct peer *p = arrival(tid, intro, &gp);
  if (p == NULL) {
    if (at != NULL) { /* closing: the receive still hears of it */
      nx_mutex_lock(&nxpvm.m);
      nxpvmi_place_done(0, 0, 0);
      nx_mutex_unlock(&nxpvm.m);
    }
    nxpvmi_buf_free(m);
    return;
  }
  nxpvmi_place_arrived(tid, ++p->msgs_in);
  if (at != NULL) {
    /* Placed: the values are in the receive's buffer; `m` holds only the
     * message's tag and length. */
    nxpvmi_place_done(m != NULL, m != NULL ? m->tag : 0,
                      m != NULL ? m->bytes : 0);
    nxpvmi_buf_free(m);
  } else if (m != NULL) {
    nxpvmi_deliver(m);
  }
  nx_mutex_unlock(&nxpvm.m);
}

int nxpvmi_put_name(nx_buffer_t *b, const char *s) {
  size_t n = strlen(s);
  int rc = nx_put_uint32(b, (uint32_t)n);
  return rc == 0 && n > 0 ? nx_put_char_array(b, s, n) : rc;
}

int nxpvmi_get_name(nx_buffer_t *b, char *s, size_t len) {
  uint32_t n;
  if (nx_get_uint32(b, &n) < 0 || n >= len)
    return -1;
  if (n > 0 && nx_get_char_array(b, s, n) < 0)
    return -1;
  s[n] = '\0';
  return 0;
}

/* Waits on the task's condition until woken or `deadline` (NULL: until
 * woken; every event that could end a wait broadcasts). Called with
 * nxpvm.m held. */
int nxpvmi_wait(const struct timespec *deadline) {
  if (deadline == NULL)
    return nx_cond_wait(&nxpvm.c, &nxpvm.m);
  return nx_cond_timedwait(&nxpvm.c, &nxpvm.m, deadline);
}

/* Request/reply with the root task. The reply handler fills the slot. */
struct rpc *nxpvmi_rpc_new(void) {
  struct rpc *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  nx_mutex_lock(&nxpvm.m);
  r->id = ++nxpvm.next_rpc;
  r->next = nxpvm.rpcs;
  nxpvm.rpcs = r;
  nx_mutex_unlock(&nxpvm.m);
  return r;
}

int nxpvmi_rpc_wait(struct rpc *r, int timeout_s, int grace_s) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_s;
  int rc = 0, grace = 0;
  nx_mutex_lock(&nxpvm.m);
  while (!r->done) {
    struct peer *root = nxpvmi_peer(nxpvm.roottid, 0);
    if (root != NULL && root->gone && !grace) {
      /* A barrier's release may still be on its way along the tree from
       * another member: give it `grace_s` more, not for ever. */
      grace = 1;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_sec += grace_s;
    }
    if (nxpvmi_wait(&deadline) == NX_ETIMEDOUT && !r->done) {
      rc = PvmSysErr;
      break;
    }
  }
  if (r->done)
    rc = r->result;
  nx_mutex_unlock(&nxpvm.m);
  return rc;
}

void nxpvmi_rpc_free(struct rpc *r) {
  nx_mutex_lock(&nxpvm.m);
  for (struct rpc **pp = &nxpvm.rpcs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  nx_mutex_unlock(&nxpvm.m);
  if (r->has_gp)
    nx_gp_release(&r->gp);
  nxpvmi_buf_free(r->b);
  free(r);
}

/* "nxpvm.rep": a reply from the root: rpc id, result, maybe a gp. */
static void on_rep(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t id, result, has_gp, has_buf;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &id) < 0 ||
      nx_get_int32(buf, &result) < 0 || nx_get_int32(buf, &has_gp) < 0)
    return;
  nx_gp_t gp = NX_GP_NULL;
  if (has_gp && nx_get_gp(buf, &gp) < 0)
    return;
  struct pvmbuf *mb = NULL;
  if (nx_get_int32(buf, &has_buf) < 0 ||
      (has_buf && nxpvmi_decode(buf, &mb) < 0)) {
    /* A reply that cannot be read still ends the wait, with an error. */
    result = PvmNoMem;
    mb = NULL;
  }
  nx_mutex_lock(&nxpvm.m);
  struct rpc *r = nxpvm.rpcs;
  while (r != NULL && r->id != id)
    r = r->next;
  if (r != NULL && !r->done) {
    r->done = 1;
    r->result = result;
    if (has_gp) {
      r->gp = gp;
      r->has_gp = 1;
      has_gp = 0;
    }
    r->b = mb;
    mb = NULL;
    nx_cond_broadcast(&nxpvm.c);
  }
  nx_mutex_unlock(&nxpvm.m);
  if (has_gp)
    nx_gp_release(&gp);
  nxpvmi_buf_free(mb);
}

/* Sends a reply to `tid` (whose gp this task knows: it asked), with a gp
 * or a message if given. */
static void reply(int tid, int id, int result, const nx_gp_t *gp,
                  const struct pvmbuf *m) {
  nx_gp_t to = NX_GP_NULL;
  if (nxpvmi_resolve(tid, &to) < 0)
    return;
  nx_buffer_t *b;
  if (nxpvmi_rsr(tid, &to, H_REP, 64 + (m != NULL ? m->bytes : 0), &b) == 0) {
    int rc = nx_put_int32(b, id);
    if (rc == 0)
      rc = nx_put_int32(b, result);
    if (rc == 0)
      rc = nx_put_int32(b, gp != NULL);
    if (rc == 0 && gp != NULL)
      rc = nx_put_gp(b, gp);
    if (rc == 0)
      rc = nx_put_int32(b, m != NULL);
    if (rc == 0 && m != NULL)
      rc = nxpvmi_encode(b, m);
    if (rc == 0)
      nxpvmi_send(b);
    else
      nx_buffer_release(b);
  }
  nx_gp_release(&to);
}

/* Sends the reply for request `id` of `tid`; used by pvm_group.c too. */
void nxpvmi_reply(int tid, int id, int result) {
  reply(tid, id, result, NULL, NULL);
}

/* The same with a message (pvm_mbox.c). */
void nxpvmi_reply_buf(int tid, int id, int result, const struct pvmbuf *b) {
  reply(tid, id, result, NULL, b);
}

/* Tids as PVM numbers the tasks of its first host: 0x40000 is the host
 * (pvm_tidtohost), its tasks 0x40001, 0x40002, ... A tid is the process
 * id part of the task's context ids (nxpvmi_tid_of_context), which
 * NX_PROC_ID sets (docs/design.md): the task started by hand takes the
 * first, the ranks of a job the first + rank, and the root hands out the
 * rest, one for each task spawned (H_WHO with tid 0). */
#define TID_FIRST 0x40001

/* The root: the next tid, one no task it knows has. */
static int new_tid(void) {
  nx_mutex_lock(&nxpvm.m);
  int tid = nxpvm.next_tid;
  while (tid == nxpvm.mytid || nxpvmi_peer(tid, 0) != NULL)
    tid++;
  nxpvm.next_tid = tid + 1;
  nx_mutex_unlock(&nxpvm.m);
  return tid;
}

/* Asks the root "nxpvm.who" about `tid` (0: for a new tid) and waits for
 * its answer in `r`. Returns a PVM code, or the root's result. */
static int ask_who(nx_gp_t *root, int tid, struct rpc *r) {
  nx_buffer_t *b;
  int rc = nxpvmi_rsr(nxpvm.roottid, root, H_WHO, 16, &b);
  if (rc == 0) {
    nx_put_int32(b, r->id);
    nx_put_int32(b, tid);
    rc = nxpvmi_send_root(b);
  }
  return rc == 0 ? nxpvmi_rpc_wait(r, 30, 0) : rc;
}

/* A tid for a task about to be spawned, or 0 when the root cannot be
 * asked (the task then draws its process id at random, as every nexus
 * process does). */
static int spawn_tid(void) {
  if (nxpvm.is_root)
    return new_tid();
  nx_gp_t root = NX_GP_NULL;
  if (nxpvmi_resolve_root(&root) < 0)
    return 0;
  struct rpc *r = nxpvmi_rpc_new();
  int rc = r == NULL ? PvmNoMem : ask_who(&root, 0, r);
  if (r != NULL)
    nxpvmi_rpc_free(r);
  nx_gp_release(&root);
  return rc > 0 ? rc : 0;
}

/* Before the first nx_init of the process: the tid of a task that is not
 * spawned (a spawned one has NX_PROC_ID from its spawner, a process
 * context some other program made gets none). Returns 1 if it set
 * NX_PROC_ID (to be removed after nx_init, so that programs this one
 * starts do not inherit it). */
static int own_tid(void) {
  static int done;
  if (done || getenv("NX_PROC_ID") != NULL)
    return 0;
  done = 1;
  static const char *const ranks[] = {"NX_RANK", "OMPI_COMM_WORLD_RANK",
                                      "PMIX_RANK"};
  long rank = -1;
  for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]) && rank < 0; i++) {
    const char *v = getenv(ranks[i]);
    char *end;
    if (v != NULL && v[0] != '\0') {
      long r = strtol(v, &end, 10);
      if (*end == '\0' && r >= 0 && r < (1l << 20))
        rank = r;
    }
  }
  if (rank < 0 && (getenv("NX_CTL_FD") != NULL || getenv("NX_CTL_TCP") != NULL))
    return 0;
  char v[16];
  snprintf(v, sizeof(v), "%ld", TID_FIRST + (rank < 0 ? 0 : rank));
  return setenv("NX_PROC_ID", v, 0) == 0;
}

/* "nxpvm.who" (root): which gp has this tid? */
static void on_who(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t id, tid;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &id) < 0 ||
      nx_get_int32(buf, &tid) < 0)
    return;
  if (tid == 0) { /* no task has tid 0: a spawner asks for a new tid */
    reply(from, id, new_tid(), NULL, NULL);
    return;
  }
  nx_gp_t gp = NX_GP_NULL;
  int found = 0;
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 0);
  if (p != NULL && p->has_gp && !p->dead)
    found = nx_gp_copy(&p->gp, &gp) == 0;
  nx_mutex_unlock(&nxpvm.m);
  reply(from, id, found ? PvmOk : PvmNoTask, found ? &gp : NULL, NULL);
  if (found)
    nx_gp_release(&gp);
}

/* "nxpvm.reg" (root): a task spawned by another than the root. */
static void on_reg(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t ptid;
  nx_gp_t gp = NX_GP_NULL;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &ptid) < 0 ||
      nx_get_gp(buf, &gp) < 0)
    return;
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = learn(&gp);
  if (p != NULL)
    p->ptid = ptid;
  nx_mutex_unlock(&nxpvm.m);
}

/* "nxpvm.hello" (a spawned task): who the root is. */
static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t roottid, mctx, otid;
  uint64_t okey;
  nx_gp_t gp = NX_GP_NULL;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &roottid) < 0 ||
      nx_get_gp(buf, &gp) < 0)
    return;
  if (nx_get_int32(buf, &mctx) < 0 || nx_get_int32(buf, &otid) < 0 ||
      nx_get_uint64(buf, &okey) < 0) {
    nx_gp_release(&gp);
    return;
  }
  nx_mutex_lock(&nxpvm.m);
  learn(&gp);
  nxpvm.roottid = roottid;
  nxpvm.ctx = mctx;     /* a spawned task starts in its spawner's context */
  nxpvm.out_tid = otid; /* and sends its output where it says */
  nxpvm.out_key = okey; /* handing it to that task's keeper, if here */
  nxpvm.ptid = from;
  nx_cond_broadcast(&nxpvm.c);
  nx_mutex_unlock(&nxpvm.m);
}

/* "nxpvm.kill": pvm_kill (SIGTERM, as PVM ends a killed task) and
 * pvm_sendsig. */
static void on_kill(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t sig;
  if (nx_get_int32(buf, &sig) < 0 || sig <= 0 || sig >= NSIG)
    return;
  kill(getpid(), sig);
}

/* "nxpvm.bye": a task called pvm_exit. The reply tells it that every
 * earlier RSR it sent here has arrived (they travel in order). */
static void on_bye(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t id;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &id) < 0)
    return;
  reply(from, id, PvmOk, NULL, NULL);
  nx_mutex_lock(&nxpvm.m);
  mark_dead(from);
  nx_mutex_unlock(&nxpvm.m);
}

/* The root's gp, for the groups, mailboxes and task directory it keeps:
 * valid while its process runs, also after its task has left PVM (its
 * pvm_exit keeps serving until every task has left). */
int nxpvmi_resolve_root(nx_gp_t *gp) {
  return nxpvmi_resolve_process(nxpvm.roottid, gp);
}

/* The gp of `tid` while its process runs, also after its task has left
 * PVM: a task that left waits in pvm_exit for its children, serving them
 * (the root its groups, a catching task their output). */
int nxpvmi_resolve_process(int tid, nx_gp_t *gp) {
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 0);
  int rc = PvmSysErr;
  if (p != NULL && p->has_gp && !p->gone)
    rc = nx_gp_copy(&p->gp, gp) == 0 ? PvmOk : PvmSysErr;
  nx_mutex_unlock(&nxpvm.m);
  return rc;
}

/* Tells the root of the children that ended (see on_error). */
void nxpvmi_flush_gone(void) {
  nx_mutex_lock(&nxpvm.m);
  int n = nxpvm.ngone;
  int *q = nxpvm.gone_q;
  nxpvm.gone_q = NULL;
  nxpvm.ngone = nxpvm.gonecap = 0;
  nx_mutex_unlock(&nxpvm.m);
  if (n == 0) {
    free(q);
    return;
  }
  nx_gp_t root = NX_GP_NULL;
  if (nxpvmi_resolve_root(&root) == 0) {
    for (int i = 0; i < n; i++) {
      nx_buffer_t *b;
      if (nxpvmi_rsr(nxpvm.roottid, &root, H_GONE, 8, &b) != 0)
        continue;
      if (nx_put_int32(b, q[i]) == 0)
        nxpvmi_send(b);
      else
        nx_buffer_release(b);
    }
    nx_gp_release(&root);
  }
  free(q);
}

/* "nxpvm.gone" (root): a task's spawner says it has ended. */
static void on_gone(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t tid;
  if (nx_get_int32(buf, &tid) < 0 || tid <= 0 || tid == nxpvm.mytid)
    return;
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 1);
  if (p != NULL)
    p->gone = 1;
  mark_dead(tid);
  nx_mutex_unlock(&nxpvm.m);
}

/* The gp of `tid`: from the peer table, else asked of the root. */
int nxpvmi_resolve(int tid, nx_gp_t *gp) {
  if (tid <= 0)
    return PvmBadParam;
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = nxpvmi_peer(tid, 0);
  int rc = PvmNoTask;
  if (p != NULL && p->dead)
    rc = PvmNoTask;
  else if (p != NULL && p->has_gp)
    rc = nx_gp_copy(&p->gp, gp) == 0 ? PvmOk : PvmSysErr;
  int ask = p == NULL || (!p->dead && !p->has_gp);
  nx_mutex_unlock(&nxpvm.m);
  if (!ask || nxpvm.is_root)
    return rc;
  nx_gp_t root = NX_GP_NULL;
  if (nxpvmi_resolve_root(&root) < 0)
    return PvmSysErr;
  /* A tid may reach us (in a message) before its spawner has told the
   * root about it: ask again for a while. */
  for (int tries = 0; tries < 50; tries++) {
    struct rpc *r = nxpvmi_rpc_new();
    if (r == NULL) {
      rc = PvmNoMem;
      break;
    }
    rc = ask_who(&root, tid, r);
    if (rc == 0 && r->has_gp) {
      nx_mutex_lock(&nxpvm.m);
      nx_gp_t copy;
      nx_gp_copy(&r->gp, &copy);
      learn(&copy);
      nx_mutex_unlock(&nxpvm.m);
      rc = nx_gp_copy(&r->gp, gp) == 0 ? PvmOk : PvmSysErr;
    }
    nxpvmi_rpc_free(r);
    if (rc != PvmNoTask)
      break;
    usleep(20000);
  }
  nx_gp_release(&root);
  return rc;
}

static void on_sibs(nx_context_t *ctx, void *addr, nx_buffer_t *buf);

#define TRAMPOLINE(fn)                                                         \
  static void tr_##fn(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {       \
    dispatch(fn, ctx, addr, buf);                                              \
  }
TRAMPOLINE(on_hello)
TRAMPOLINE(on_kill)
TRAMPOLINE(on_bye)
TRAMPOLINE(on_who)
TRAMPOLINE(on_reg)
TRAMPOLINE(on_rep)
TRAMPOLINE(nxpvmi_on_grp)
TRAMPOLINE(nxpvmi_on_gbc)
TRAMPOLINE(nxpvmi_on_gtree)
TRAMPOLINE(nxpvmi_on_mbox)
TRAMPOLINE(on_gone)
TRAMPOLINE(nxpvmi_on_out)
TRAMPOLINE(on_sibs)

static int register_handlers(nx_context_t *ctx) {
  static const struct {
    const char *name;
    nx_handler_fn fn;
  } hs[] = {{H_MSG, on_msg},
            {H_HELLO, tr_on_hello},
            {H_KILL, tr_on_kill},
            {H_BYE, tr_on_bye},
            {H_WHO, tr_on_who},
            {H_REG, tr_on_reg},
            {H_REP, tr_on_rep},
            {H_GRP, tr_nxpvmi_on_grp},
            {H_GBC, tr_nxpvmi_on_gbc},
            {H_GTREE, tr_nxpvmi_on_gtree},
            {H_MBOX, tr_nxpvmi_on_mbox},
            {H_GONE, tr_on_gone},
            {H_OUT, tr_nxpvmi_on_out},
            {H_SIBS, tr_on_sibs}};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
    int rc = nx_handler_register(ctx, hs[i].name, hs[i].fn,
                                 NX_HANDLER_NONTHREADED, NULL);
    if (rc < 0)
      return rc;
  }
  msg_id = nx_handler_id(H_MSG);
  self_ctx = nx_context_id(ctx);
  /* pvm_precv's buffer may take a direct message's values (pvm_msg.c). */
  return nx_handler_set_place(ctx, H_MSG, nxpvmi_place);
}

/* NXPVM_TASK_OUTPUT=inherit: a spawned task's output goes where its
 * spawner's goes, not to the task log. */
static int output_inherited(void) {
  const char *v = getenv("NXPVM_TASK_OUTPUT");
  return v != NULL && strcmp(v, "inherit") == 0;
}

/* Starts nexus and finds out what kind of task this is: started by hand
 * (the root of its own computation), spawned by pvm_spawn (the creator is
 * the parent and says who the root is), or one of an nxrun/mpirun job
 * (rank 0 is the root, the others are siblings). */
static int start(void) {
  const char *ff = getenv("NXPVM_FOREIGN_FORMAT");
  nxpvm.fake_format = ff != NULL && strcmp(ff, "1") == 0;
  /* Groups of more than NXPVM_TREE_MIN members (4 by default) broadcast
   * and release barriers along a binomial tree. */
  const char *tm = getenv("NXPVM_TREE_MIN");
  nxpvm.tree_min = tm != NULL && atoi(tm) > 0 ? atoi(tm) : 4;
  int set = own_tid();
  int rc = nx_init(NULL, NULL);
  if (set)
    unsetenv("NX_PROC_ID");
  if (rc < 0)
    return PvmSysErr;
  /* A spawned task works where pvmd would have started it (its spawner's
   * PVM_WD or $HOME); from its first PVM call, since nexus starts it in
   * its spawner's directory. */
  const char *wd = getenv("NXPVM_WD");
  if (wd != NULL) {
    if (chdir(wd) != 0) {
      /* Gone or not ours: the task stays where it started. */
    }
    unsetenv("NXPVM_WD");
  }
  nx_mutex_init(&nxpvm.m);
  nx_cond_init(&nxpvm.c);
  nxpvm.ptid = PvmNoParent;
  if (register_handlers(nx_context_self()) < 0 ||
      nx_gp_make(NULL, &nxpvm.self_gp) < 0)
    goto err_fini;
  /* Beside the program's own callback, if it installed one. */
  errcb = nx_error_cb_add(on_error, NULL);
  nxpvm.mytid = nxpvmi_tid_of_context(nx_gp_context(&nxpvm.self_gp));
  nx_gp_t selfcopy;
  nx_gp_copy(&nxpvm.self_gp, &selfcopy);
  nx_mutex_lock(&nxpvm.m);
  struct peer *me = learn(&selfcopy);
  if (me != NULL)
    me->introduced = 1;
  nx_mutex_unlock(&nxpvm.m);

  nx_gp_t *gps = NULL;
  int n = 0, rank = -1;
  rc = nx_context_peers(&gps, &n, &rank);
  if (rc == NX_ENOENT) {
    nxpvm.roottid = nxpvm.mytid;
    nxpvm.is_root = 1;
  } else if (rc < 0) {
    goto err_fini;
  } else if (rank < 0) {
    nx_mutex_lock(&nxpvm.m);
    for (int i = 0; i < n; i++)
      learn(&gps[i]);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
    while (nxpvm.roottid == 0)
      if (nxpvmi_wait(&deadline) == NX_ETIMEDOUT)
        break;
    int ok = nxpvm.roottid != 0;
    nx_mutex_unlock(&nxpvm.m);
    free(gps);
    if (!ok)
      goto err_fini;
  } else {
    nxpvm.siblings = malloc((size_t)n * sizeof(int));
    if (nxpvm.siblings == NULL)
      goto err_fini;
    nx_mutex_lock(&nxpvm.m);
    for (int i = 0; i < n; i++) {
      nxpvm.siblings[i] = nxpvmi_tid_of_context(nx_gp_context(&gps[i]));
      learn(&gps[i]);
    }
    nx_mutex_unlock(&nxpvm.m);
    nxpvm.nsiblings = n;
    nxpvm.roottid = nxpvm.siblings[0];
    nxpvm.is_root = rank == 0;
    free(gps);
  }
  if (nxpvm.is_root)
    nxpvm.next_tid = TID_FIRST + (nxpvm.nsiblings > 1 ? nxpvm.nsiblings : 1);
  nxpvm.started = 1;
  /* A task spawned while its spawner caught output sends its own there;
   * another spawned task writes it to the task log, as PVM's pvmd does
   * (NXPVM_TASK_OUTPUT=inherit: it keeps the spawner's). */
  if (nxpvm.out_tid > 0 && nxpvmi_out_start(nxpvm.out_tid) < 0)
    nxpvm.out_tid = 0;
  else if (nxpvm.out_tid <= 0 && nxpvm.ptid > 0 && !output_inherited())
    nxpvmi_out_start_log();
  return nxpvm.mytid;

err_fini:
  errcb = 0; /* nx_init removes it with the rest */
  nx_finalize();
  return PvmSysErr;
}

/* A task that ends (returns from main, calls exit or STOP) without
 * pvm_exit: what it sent is first confirmed handled, for at most 2 s, so
 * that its last messages do not go down with the process (under PVM they
 * do when its pvmd has not taken them yet). Before that, output caught by
 * pvm_catchout is sent to its end (its last lines, then EOF), as PVM's
 * pvmd writes a task's output until the task is gone. Nothing else of
 * pvm_exit runs. */
static pid_t at_exit_pid; /* 0: not installed; a forked child does not */

static void flush_at_exit(void) {
  if (getpid() != at_exit_pid)
    return;
  if (nxpvm.started && !nxpvm.closing) {
    nxpvmi_out_stop_at_exit(); /* caught output: the last lines, EOF */
    nx_flush(2000);
  }
  nxpvmi_out_end(); /* also after pvm_exit */
}

int pvm_mytid(void) {
  if (nxpvm.started)
    return nxpvm.mytid;
  int rc = start();
  if (rc > 0)
    nxpvmi_buf_own_thread();
  if (rc > 0 && at_exit_pid == 0 && atexit(flush_at_exit) == 0)
    at_exit_pid = getpid();
  return rc < 0 ? nxpvmi_err("pvm_mytid", rc) : rc;
}

int pvm_parent(void) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_parent", PvmSysErr);
  return nxpvm.ptid > 0 ? nxpvm.ptid : PvmNoParent;
}

/* A task runs until it ends, whatever its spawner does: nexus ends the
 * process contexts a process made when it stops, so a task that leaves
 * PVM keeps its runtime until the tasks it spawned have ended (nexus
 * reports each process's end). The root also keeps serving the groups,
 * mailboxes and task directory until every task it knows has left. Its
 * handlers run meanwhile; the calling thread waits. */
static void wait_for_tasks(void) {
  nx_mutex_lock(&nxpvm.m);
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < nxpvm.npeers && !waiting; i++) {
      struct peer *p = &nxpvm.peers[i];
      if (p->tid == nxpvm.mytid)
        continue;
      /* A child on a module's node ("mpi") ends only once this process
       * lets it go: its nx_finalize waits for ours to disconnect. It has
       * done with PVM once it has left. */
      waiting = (p->child && !p->gone && !(p->remote && p->dead)) ||
                (nxpvm.is_root && p->has_gp && !p->dead);
    }
    if (!waiting)
      break;
    if (nxpvm.ngone > 0) { /* children ended: tell the root */
      nx_mutex_unlock(&nxpvm.m);
      nxpvmi_flush_gone();
      nx_mutex_lock(&nxpvm.m);
      continue;
    }
    nxpvmi_wait(NULL);
  }
  nx_mutex_unlock(&nxpvm.m);
  nxpvmi_flush_gone();
}

/* Whether task `tid` serves this one after its own pvm_exit. */
static int serving(int tid) {
  return tid == nxpvm.roottid || tid == nxpvm.out_tid;
}

/* Tells every live task this one knows that it is leaving, so their
 * receives from it fail and their notifies fire, and waits (at most 5 s)
 * for their answers: nx_finalize drops RSRs not yet delivered, and an
 * answer means everything sent before it has arrived. Then waits for the
 * tasks it spawned to end (and, at the root, for every task to leave) and
 * stops nexus. */
int pvm_exit(void) {
  if (!nxpvm.started)
    return PvmOk;
  /* The last lines of caught output go before the goodbyes. */
  nxpvmi_out_stop();
  if (!nxpvm.is_root) {
    /* Finish forwarding our parts of broadcast and barrier trees first,
     * while the root still answers our tid lookups: once it has our BYE
     * it counts us gone, and a member below us in a tree would wait for
     * ever. (A forward that arrives after this runs on a new sequencer
     * thread, which the second nxpvmi_seq_stop below joins.) */
    nxpvmi_seq_stop();
  } else {
    /* The root's task leaves its groups and mailbox entries as any task
     * does; the root goes on sequencing and serving the others. */
    nx_mutex_lock(&nxpvm.m);
    nxpvmi_groups_forget(nxpvm.mytid);
    nxpvmi_mbox_forget(nxpvm.mytid);
    nx_mutex_unlock(&nxpvm.m);
  }
  nx_mutex_lock(&nxpvm.m);
  int n = nxpvm.npeers;
  int *tids = malloc((size_t)n * sizeof(int) + 1);
  struct rpc **rs = calloc((size_t)n + 1, sizeof(*rs));
  int k = 0;
  for (int i = 0; tids != NULL && rs != NULL && i < n; i++)
    /* The root and the task catching our output too once their tasks
     * have left: they serve until we have (and our goodbye's answer says
     * our last lines have arrived). */
    if ((!nxpvm.peers[i].dead ||
         (serving(nxpvm.peers[i].tid) && !nxpvm.peers[i].gone)) &&
        nxpvm.peers[i].has_gp && nxpvm.peers[i].tid != nxpvm.mytid)
      tids[k++] = nxpvm.peers[i].tid;
  nx_mutex_unlock(&nxpvm.m);
  for (int i = 0; i < k; i++) {
    nx_gp_t gp = NX_GP_NULL;
    nx_buffer_t *b;
    int rc = serving(tids[i]) ? nxpvmi_resolve_process(tids[i], &gp)
                              : nxpvmi_resolve(tids[i], &gp);
    if (rc < 0 || (rs[i] = nxpvmi_rpc_new()) == NULL)
      continue;
    if (nxpvmi_rsr(tids[i], &gp, H_BYE, 8, &b) == 0) {
      nx_put_int32(b, rs[i]->id);
      if (nxpvmi_send(b) < 0)
        rs[i]->done = 1;
    } else {
      rs[i]->done = 1;
    }
    nx_gp_release(&gp);
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 5;
  nx_mutex_lock(&nxpvm.m);
  for (int i = 0; i < k; i++) {
    while (rs[i] != NULL && !rs[i]->done) {
      struct peer *p = nxpvmi_peer(tids[i], 0);
      int ended = p != NULL && (serving(tids[i]) ? p->gone : p->dead);
      if (ended || nxpvmi_wait(&deadline) == NX_ETIMEDOUT)
        break;
    }
  }
  nx_mutex_unlock(&nxpvm.m);
  for (int i = 0; i < k; i++)
    if (rs[i] != NULL)
      nxpvmi_rpc_free(rs[i]);
  free(rs);
  free(tids);
  wait_for_tasks();
  /* A catching task: its caught tasks' last lines and EOFs, read from
   * their pipes to the end (pvm_out.c), before it returns. */
  nxpvmi_out_keep_stop();
  nxpvmi_seq_stop();
  /* From here a handler thread drops what arrives (a late RSR has no one
   * to read it), so the peers can be freed. */
  nx_mutex_lock(&nxpvm.m);
  nxpvm.closing = 1;
  for (int i = 0; i < nxpvm.npeers; i++) {
    struct peer *p = &nxpvm.peers[i];
    if (p->has_gp)
      nx_gp_release(&p->gp);
  }
  nx_mutex_unlock(&nxpvm.m);
  nx_gp_release(&nxpvm.self_gp);
  /* on_error stays through nx_finalize, which ends it: what nexus reports
   * lost there (RSRs to tasks that ended without pvm_exit) is no news to
   * a PVM program, whose pvmd would drop such messages without a word;
   * with no callback, nexus would print the first ten. */
  errcb = 0;
  nx_finalize();
  nxpvmi_buf_drop_all();
  nxpvmi_groups_free();
  nxpvmi_mbox_free();
  nxpvmi_hosts_free();
  nxpvmi_buf_cache_drain();
  if (nxpvm.has_fds) {
    close(nxpvm.fds[0]);
    close(nxpvm.fds[1]);
  }
  free(nxpvm.mhfs);
  free(nxpvm.mhf_ids);
  free(nxpvm.gone_q);
  nxpvm.started = 0;
  free(nxpvm.peers);
  free(nxpvm.siblings);
  free(nxpvm.notes);
  int autoerr = nxpvm.autoerr, showtids = nxpvm.showtids;
  FILE *catch_ff = nxpvm.catch_ff;
  memset(&nxpvm, 0, sizeof(nxpvm));
  nxpvm.autoerr = autoerr;
  nxpvm.showtids = showtids;
  nxpvm.catch_ff = catch_ff;
  nxpvm.route = PvmAllowDirect;
  return PvmOk;
}

/* `where` is a host name (this host: "", ".", "localhost" or its name;
 * another: "mpi:host=<name>"), or any nexus node spec ("mpi",
 * "mpi:host=a,b", ...). */
static int node_for(int flag, const char *where, nx_node_t *node) {
  char spec[64] = "localhost";
  if ((flag & PvmTaskHost) && where != NULL && !nxpvmi_is_this_host(where) &&
      nxpvmi_host_spec(where, spec, sizeof(spec)) < 0)
    return PvmNoHost;
  /* PvmTaskArch: the one architecture there is. */
  if (!(flag & PvmTaskHost) && (flag & PvmTaskArch) && where != NULL &&
      where[0] != '\0' && strcmp(where, nxpvmi_arch()) != 0)
    return PvmNoHost;
  int rc = nx_nodes_acquire(spec, 1, node);
  if (rc == NX_EINVAL || rc == NX_ENOTSUP)
    return PvmNoHost;
  return rc < 0 ? PvmSysErr : 0;
}

/* The architecture name PVM 3.4 gives this machine (pvmgetarch), for
 * the search path when PVM_ARCH is not set: PVM's pvmd knows it whether
 * or not the program's shell set it. NULL where we do not know it. */
static const char *pvm_arch(void) {
  const char *a = getenv("PVM_ARCH");
  if (a != NULL && a[0] != '\0')
    return a;
#if defined(__linux__) && defined(__x86_64__)
  return "LINUX64";
#elif defined(__linux__) && defined(__i386__)
  return "LINUX";
#else
  return NULL;
#endif
}

/* `dir`/`task` if that is an executable file: a path to free, else NULL.
 * A relative `dir` is taken from $HOME, as pvmd, which runs there, does. */
static char *in_dir(const char *dir, size_t len, const char *task) {
  const char *home = dir[0] == '/' ? NULL : getenv("HOME");
  if (len == 0 || (dir[0] != '/' && (home == NULL || home[0] == '\0')))
    return NULL;
  size_t n = (home ? strlen(home) + 1 : 0) + len + strlen(task) + 2;
  char *p = malloc(n);
  if (p == NULL)
    return NULL;
  snprintf(p, n, "%s%s%.*s/%s", home ? home : "", home ? "/" : "", (int)len,
           dir, task);
  if (access(p, X_OK) == 0)
    return p;
  free(p);
  return NULL;
}

/* A task named without a '/' is looked for where PVM looks: in the
 * directories of PVM_PATH (':'-separated) when it is set, else in
 * $HOME/pvm3/bin/$PVM_ARCH and then $PVM_ROOT/bin/$PVM_ARCH (pvmd's
 * default); then in `PATH` (which nexus searches). Returns a path to
 * free, or NULL to use the name. */
static char *find_task(const char *task) {
  if (strchr(task, '/') != NULL)
    return NULL;
  const char *path = getenv("PVM_PATH");
  if (path != NULL && path[0] != '\0') {
    for (const char *d = path;; d++) {
      size_t len = strcspn(d, ":");
      char *p = in_dir(d, len, task);
      if (p != NULL || d[len] == '\0')
        return p;
      d += len;
    }
  }
  const char *arch = pvm_arch(), *root = getenv("PVM_ROOT");
  if (arch == NULL)
    return NULL;
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "pvm3/bin/%s", arch);
  char *p = in_dir(dir, strlen(dir), task);
  if (p == NULL && root != NULL && root[0] == '/') {
    snprintf(dir, sizeof(dir), "%s/bin/%s", root, arch);
    p = in_dir(dir, strlen(dir), task);
  }
  return p;
}

/* What every task of one pvm_spawn call starts from: the node, the
 * program as found, its argv. */
struct spawn_req {
  nx_node_t node;
  char *found;  /* find_task's path, or NULL */
  char *wd_var; /* "NXPVM_WD=<dir>", or NULL */
  char **av;
  int flag;
  char *where;
  int remote;
  int out_tid;      /* where the tasks' output goes (0: the task log) */
  uint64_t out_key; /* the keeper that reads it, if on this host */
};

static int spawn_prepare(char *task, char **argv, int flag, char *where,
                         struct spawn_req *r) {
  int rc = node_for(flag, where, &r->node);
  if (rc < 0)
    return rc;
  r->found = find_task(task);
  r->out_tid = nxpvmi_out_dest(&r->out_key);
  int argc = 0;
  while (argv != NULL && argv[argc] != NULL)
    argc++;
  r->av = calloc((size_t)argc + 2, sizeof(char *));
  if (r->av == NULL) {
    nx_node_release(&r->node);
    free(r->found);
    return PvmNoMem;
  }
  r->av[0] = r->found != NULL ? r->found : task;
  for (int i = 0; i < argc; i++)
    r->av[i + 1] = argv[i];
  r->flag = flag;
  r->where = where;
  r->remote = strcmp(r->node.host, "localhost") != 0;
  /* As pvmd starts tasks in its $HOME, or in PVM_WD when set (on this
   * host: another's directories are its own). */
  const char *wd = getenv("PVM_WD");
  if (wd == NULL || wd[0] == '\0')
    wd = getenv("HOME");
  r->wd_var = NULL;
  if (!r->remote && wd != NULL && wd[0] == '/' &&
      (r->wd_var = malloc(strlen(wd) + 10)) != NULL)
    sprintf(r->wd_var, "NXPVM_WD=%s", wd);
  return 0;
}

static void spawn_release(struct spawn_req *r) {
  free(r->wd_var);
  free(r->av);
  free(r->found);
  nx_node_release(&r->node);
}

/* Starts one task, numbered `want` (0: the runtime draws one), and tells
 * it who the root is. Returns its tid or a PVM error. Safe on several
 * threads at once (pvm_spawn). */
static int spawn_start(const struct spawn_req *r, int want) {
  nx_gp_t gp = NX_GP_NULL;
  char tid_var[32];
  char *env[3] = {NULL, NULL, NULL};
  int k = 0;
  snprintf(tid_var, sizeof(tid_var), "NX_PROC_ID=%d", want);
  if (want > 0)
    env[k++] = tid_var;
  if (r->wd_var != NULL)
    env[k++] = r->wd_var;
  /* A task's end is PVM's news (pvm_notify), never a line from nexus on
   * the spawner's stderr: a killed task is what pvm_kill asked for. */
  nx_context_attr_t attr = {k > 0 ? env : NULL, NX_CREATE_QUIET_END, 0};
  int rc = nx_context_create_attr(&r->node, r->av[0], r->av, &attr, &gp);
  if (rc == NX_ENOENT)
    return PvmNoFile;
  if (rc < 0)
    return rc == NX_EAGAIN ? PvmOutOfRes : PvmSysErr;
  int tid = nxpvmi_tid_of_context(nx_gp_context(&gp));
  nx_gp_t copy;
  nx_gp_copy(&gp, &copy);
  nx_mutex_lock(&nxpvm.m);
  struct peer *p = learn(&copy);
  if (p != NULL) {
    p->ptid = nxpvm.mytid;
    p->child = 1;
    p->remote = r->remote;
  }
  nx_mutex_unlock(&nxpvm.m);
  /* The child waits in its pvm_mytid for the root's name. */
  nx_gp_t root = NX_GP_NULL;
  nx_buffer_t *b;
  rc = nxpvmi_resolve_root(&root);
  if (rc == 0)
    rc = nxpvmi_rsr(tid, &gp, H_HELLO, 80, &b);
  if (rc == 0) {
    nx_put_int32(b, nxpvm.roottid);
    nx_put_gp(b, &root);
    nx_put_int32(b, nxpvm.ctx);
    nx_put_int32(b, r->out_tid);
    nx_put_uint64(b, r->out_key);
    rc = nxpvmi_nx_to_pvm(nxpvmi_send(b));
  }
  if (rc == 0 && !nxpvm.is_root &&
      nxpvmi_rsr(nxpvm.roottid, &root, H_REG, 64, &b) == 0) {
    nx_put_int32(b, nxpvm.mytid);
    nx_put_gp(b, &gp);
    nxpvmi_send(b);
  }
  nx_gp_release(&root);
  nx_gp_release(&gp);
  if (rc == 0 && (r->flag & PvmTaskHost))
    nxpvmi_host_placed(tid, r->where);
  return rc < 0 ? rc : tid;
}

/* The tasks of one call after the first, started SPAWN_THREADS at a time:
 * a task's start is mostly waiting (for its exec, its nx_init, which over
 * ofi sleeps 0.3 s in libfabric's libraries, and its ready), so N tasks
 * take about as long as the slowest few, not N times one. */
#define SPAWN_THREADS 8

struct spawn_batch {
  const struct spawn_req *req;
  const int *want; /* the tids asked for, in order */
  int *res;        /* each start's tid or error */
  int n;
  atomic_int next;
};

static void *spawn_worker(void *arg) {
  struct spawn_batch *sb = arg;
  int i;
  while ((i = atomic_fetch_add(&sb->next, 1)) < sb->n)
    sb->res[i] = spawn_start(sb->req, sb->want[i]);
  return NULL;
}

/* Starts n tasks, their tids (or errors) into res[0..n-1] in order: on
 * threads for this host's nodes, one after the other for a module's (the
 * mpi module's spawns take MPI's lock anyway). */
static void spawn_rest(const struct spawn_req *req, int n, int *res) {
  int *want = malloc((size_t)n * sizeof(int));
  if (want == NULL) {
    for (int i = 0; i < n; i++)
      res[i] = PvmNoMem;
    return;
  }
  /* Numbered in order first, so that tids[i] < tids[i + 1] as in PVM. */
  for (int i = 0; i < n; i++)
    want[i] = spawn_tid();
  struct spawn_batch sb = {req, want, res, n, 0};
  nx_thread_t th[SPAWN_THREADS - 1];
  int nth = 0;
  while (!req->remote && nth < SPAWN_THREADS - 1 && nth < n - 1 &&
         nx_thread_create(&th[nth], spawn_worker, &sb) == 0)
    nth++;
  spawn_worker(&sb);
  for (int i = 0; i < nth; i++)
    nx_thread_join(th[i], NULL);
  free(want);
}

int pvm_spawn(char *task, char **argv, int flag, char *where, int ntask,
              int *tids) {
  if (task == NULL || ntask < 1)
    return nxpvmi_err("pvm_spawn", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_spawn", PvmSysErr);
  int *res = malloc((size_t)ntask * sizeof(int));
  int *got = malloc((size_t)ntask * sizeof(int));
  if (res == NULL || got == NULL) {
    free(res);
    free(got);
    return nxpvmi_err("pvm_spawn", PvmNoMem);
  }
  /* The first task alone: a program that is not there, or a host that
   * cannot be had, fails it, and no other is tried (nor numbered). */
  struct spawn_req req;
  int rc = spawn_prepare(task, argv, flag, where, &req);
  res[0] = rc < 0 ? rc : spawn_start(&req, spawn_tid());
  if (res[0] > 0 && ntask > 1)
    spawn_rest(&req, ntask - 1, res + 1);
  else
    for (int i = 1; i < ntask; i++)
      res[i] = res[0];
  if (rc == 0)
    spawn_release(&req);
  /* As PVM: the tids of the tasks started first, in order, then the
   * errors of those that were not. */
  int started = 0;
  for (int i = 0; i < ntask; i++)
    if (res[i] > 0)
      got[started++] = res[i];
  if (tids != NULL) {
    memcpy(tids, got, (size_t)started * sizeof(int));
    for (int i = 0, k = started; i < ntask; i++)
      if (res[i] <= 0)
        tids[k++] = res[i];
  }
  free(res);
  /* pvm_siblings: the tasks this call started, told to each of them. */
  for (int i = 0; i < started; i++) {
    nx_gp_t gp = NX_GP_NULL;
    nx_buffer_t *b;
    if (nxpvmi_resolve(got[i], &gp) < 0)
      continue;
    if (nxpvmi_rsr(got[i], &gp, H_SIBS, 4 * (size_t)started + 8, &b) == 0) {
      int rc2 = nx_put_uint32(b, (uint32_t)started);
      if (rc2 == 0)
        rc2 = nx_put_int32_array(b, got, (size_t)started);
      if (rc2 == 0)
        nxpvmi_send(b);
      else
        nx_buffer_release(b);
    }
    nx_gp_release(&gp);
  }
  free(got);
  return started;
}

/* "nxpvm.sibs" (a spawned task): the tasks its spawner's call started. */
static void on_sibs(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  uint32_t n;
  if (nx_get_uint32(buf, &n) < 0 || n == 0 || n > nx_buffer_remaining(buf) / 4)
    return;
  int *t = malloc(n * sizeof(int));
  if (t == NULL || nx_get_int32_array(buf, t, n) < 0) {
    free(t);
    return;
  }
  nx_mutex_lock(&nxpvm.m);
  if (nxpvm.nsiblings == 0) {
    nxpvm.siblings = t;
    nxpvm.nsiblings = (int)n;
    t = NULL;
  }
  nx_cond_broadcast(&nxpvm.c);
  nx_mutex_unlock(&nxpvm.m);
  free(t);
}

static int signal_task(const char *fn, int tid, int sig) {
  if (!nxpvmi_started())
    return nxpvmi_err(fn, PvmSysErr);
  nx_gp_t gp = NX_GP_NULL;
  int rc = nxpvmi_resolve(tid, &gp);
  nx_buffer_t *b = NULL;
  if (rc == 0)
    rc = nxpvmi_rsr(tid, &gp, H_KILL, 8, &b);
  if (rc == 0 && nx_put_int32(b, sig) < 0) {
    nx_buffer_release(b);
    rc = PvmNoMem;
  } else if (rc == 0) {
    rc = nxpvmi_nx_to_pvm(nxpvmi_send(b));
  }
  nx_gp_release(&gp);
  /* As PVM: a task that does not exist (or ended meanwhile) is left alone,
   * with no error. */
  if (rc == PvmNoTask)
    return PvmOk;
  return rc < 0 ? nxpvmi_err(fn, rc) : PvmOk;
}

int pvm_kill(int tid) {
  if (nxpvmi_started() && tid == nxpvm.mytid)
    return nxpvmi_err("pvm_kill", PvmBadParam);
  return signal_task("pvm_kill", tid, SIGTERM);
}

int pvm_sendsig(int tid, int signum) {
  if (signum <= 0 || signum >= NSIG)
    return nxpvmi_err("pvm_sendsig", PvmBadParam);
  if (nxpvmi_started() && tid == nxpvm.mytid)
    return raise(signum) == 0 ? PvmOk : nxpvmi_err("pvm_sendsig", PvmSysErr);
  return signal_task("pvm_sendsig", tid, signum);
}

int pvm_pstat(int tid) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_pstat", PvmSysErr);
  if (tid == nxpvm.mytid)
    return PvmOk;
  nx_gp_t gp = NX_GP_NULL;
  int rc = nxpvmi_resolve(tid, &gp);
  if (rc < 0)
    return rc == PvmNoTask ? PvmNoTask : nxpvmi_err("pvm_pstat", rc);
  nx_gp_release(&gp);
  return PvmOk;
}

int pvm_notify(int what, int msgtag, int cnt, int *tids) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_notify", PvmSysErr);
  int kind = what & ~PvmNotifyCancel;
  if (kind == PvmRouteAdd || kind == PvmRouteDelete)
    return PvmOk; /* no routes: nothing will ever happen */
  if (kind == PvmHostDelete || kind == PvmHostAdd) {
    int rc = nxpvmi_host_notify(what, msgtag, cnt, tids);
    return rc < 0 ? nxpvmi_err("pvm_notify", rc) : PvmOk;
  }
  if (kind != PvmTaskExit || cnt < 0 || (cnt > 0 && tids == NULL))
    return nxpvmi_err("pvm_notify", PvmBadParam);
  for (int i = 0; i < cnt; i++) {
    if (what & PvmNotifyCancel) {
      nx_mutex_lock(&nxpvm.m);
      for (int j = 0; j < nxpvm.nnotes; j++)
        if (nxpvm.notes[j].tid == tids[i] && nxpvm.notes[j].tag == msgtag)
          nxpvm.notes[j].fired = 1;
      nx_mutex_unlock(&nxpvm.m);
      continue;
    }
    /* Make sure the task knows our gp, so its pvm_exit reaches us. */
    nx_gp_t gp = NX_GP_NULL;
    int known = nxpvmi_resolve(tids[i], &gp) == 0;
    nx_mutex_lock(&nxpvm.m);
    struct peer *p = nxpvmi_peer(tids[i], 1);
    int intro = known && p != NULL && !p->introduced;
    if (nxpvm.nnotes == nxpvm.notecap) {
      int cap = nxpvm.notecap ? 2 * nxpvm.notecap : 8;
      struct notify *nn = realloc(nxpvm.notes, (size_t)cap * sizeof(*nn));
      if (nn == NULL) {
        nx_mutex_unlock(&nxpvm.m);
        if (known)
          nx_gp_release(&gp);
        return nxpvmi_err("pvm_notify", PvmNoMem);
      }
      nxpvm.notes = nn;
      nxpvm.notecap = cap;
    }
    nxpvm.notes[nxpvm.nnotes++] =
        (struct notify){tids[i], msgtag, nxpvm.ctx, 0};
    /* A task that is gone already (or never was) is reported at once. */
    if (!known && p != NULL)
      p->dead = 0, mark_dead(tids[i]);
    else if (p != NULL && p->dead)
      fire_notifies(tids[i]);
    nx_mutex_unlock(&nxpvm.m);
    if (intro) {
      nx_buffer_t *b;
      if (nxpvmi_rsr(tids[i], &gp, H_REG, 64, &b) == 0) {
        /* Any handler would do; "reg" with our own gp is harmless. */
        nx_put_int32(b, nxpvm.ptid);
        nx_put_gp(b, &nxpvm.self_gp);
        nxpvmi_send(b);
      }
    }
    if (known)
      nx_gp_release(&gp);
  }
  return PvmOk;
}

int pvm_siblings(int **tids) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_siblings", PvmSysErr);
  static int self;
  /* A spawned task waits (at most 30 s) for its spawner's list, sent when
   * the pvm_spawn call that started it has started them all. */
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  nx_mutex_lock(&nxpvm.m);
  while (nxpvm.nsiblings == 0 && nxpvm.ptid > 0)
    if (nxpvmi_wait(&deadline) == NX_ETIMEDOUT)
      break;
  int n = nxpvm.nsiblings;
  nx_mutex_unlock(&nxpvm.m);
  if (n > 0) {
    if (tids != NULL)
      *tids = nxpvm.siblings;
    return n;
  }
  self = nxpvm.mytid;
  if (tids != NULL)
    *tids = &self;
  return 1;
}

/* The tasks this one knows of (itself, its children, its job, and every
 * task it has exchanged messages with), all on this host: no pvmd to ask. */
int pvm_tasks(int which, int *ntask, struct pvmtaskinfo **taskp) {
  static struct pvmtaskinfo *info;
  static char aout[] = "";
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_tasks", PvmSysErr);
  if (ntask == NULL || taskp == NULL)
    return nxpvmi_err("pvm_tasks", PvmBadParam);
  nx_mutex_lock(&nxpvm.m);
  free(info);
  info = calloc((size_t)nxpvm.npeers + 1, sizeof(*info));
  int k = 0;
  for (int i = 0; info != NULL && i < nxpvm.npeers; i++) {
    struct peer *p = &nxpvm.peers[i];
    if (p->dead ||
        (which != 0 && which != nxpvmi_host_tid() && p->tid != which))
      continue;
    info[k].ti_host = nxpvmi_host_tid();
    info[k].ti_tid = p->tid;
    info[k].ti_ptid = p->tid == nxpvm.mytid ? pvm_parent() : p->ptid;
    if (info[k].ti_ptid < 0)
      info[k].ti_ptid = 0;
    info[k].ti_a_out = aout;
    info[k].ti_pid = p->tid == nxpvm.mytid ? (int)getpid() : 0;
    k++;
  }
  nx_mutex_unlock(&nxpvm.m);
  if (info == NULL)
    return nxpvmi_err("pvm_tasks", PvmNoMem);
  if (which != 0 && k == 0)
    return nxpvmi_err("pvm_tasks", PvmNoTask);
  *ntask = k;
  *taskp = info;
  return PvmOk;
}

int pvm_perror(char *msg) {
  err_prefix();
  fprintf(stderr, "%s: %s\n", msg != NULL ? msg : "(null)",
          nxpvmi_errstr(pvm_errno));
  return PvmOk;
}

static int noreset_index = -1;

static int noreset_set(int on) {
  if (!on) {
    int rc = pvm_delinfo(PVMNORESETCLASS, noreset_index, 0);
    nxpvm.noreset = 0;
    noreset_index = -1;
    return rc;
  }
  int me = pvm_mytid();
  int id = pvm_mkbuf(PvmDataDefault);
  if (me < 0 || id < 0)
    return PvmSysErr;
  int old = pvm_setsbuf(id);
  pvm_pkint(&me, 1, 1);
  int rc = pvm_putinfo(PVMNORESETCLASS, id, PvmMboxMultiInstance);
  pvm_setsbuf(old);
  pvm_freebuf(id);
  if (rc < 0)
    return rc;
  noreset_index = rc;
  nxpvm.noreset = 1;
  return PvmOk;
}

/* Options are per task and need no runtime (but PvmNoReset). Routing is always
 * direct: PvmRoute is kept and reported back, it changes nothing. */
int pvm_setopt(int what, int val) {
  int old;
  switch (what) {
  case PvmRoute:
    if (val < PvmDontRoute || val > PvmRouteDirect)
      return nxpvmi_err("pvm_setopt", PvmBadParam);
    old = nxpvm.route;
    nxpvm.route = val;
    return old;
  case PvmAutoErr:
    old = nxpvm.autoerr;
    nxpvm.autoerr = val;
    return old;
  case PvmShowTids:
    if (!nxpvm.started) {
      old = nxpvm.showtids;
      nxpvm.showtids = val;
      return old;
    }
    nx_mutex_lock(&nxpvm.m); /* handlers read it */
    old = nxpvm.showtids;
    nxpvm.showtids = val;
    nx_mutex_unlock(&nxpvm.m);
    return old;
  case PvmDebugMask:
  case PvmFragSize:
  case PvmPollType:
  case PvmPollTime: return 0;
  case PvmNoReset:
    /* As libpvm: the task is listed in the mailbox class PVMNORESETCLASS
     * (pvm_getnoresets reads it) while the option is set. */
    old = nxpvm.noreset;
    if ((val != 0) != (old != 0) && noreset_set(val != 0) < 0)
      return nxpvmi_err("pvm_setopt", PvmSysErr);
    return old;
  default: return nxpvmi_err("pvm_setopt", PvmBadParam);
  }
}

int pvm_getopt(int what) {
  switch (what) {
  case PvmRoute: return nxpvm.route;
  case PvmAutoErr: return nxpvm.autoerr;
  case PvmDebugMask: return 0;
  case PvmShowTids: return nxpvm.showtids;
  case PvmNoReset: return nxpvm.noreset;
  case PvmFragSize: return 4096;
  default: return nxpvmi_err("pvm_getopt", PvmBadParam);
  }
}
