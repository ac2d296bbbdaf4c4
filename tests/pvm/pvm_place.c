/* pvm_psend/pvm_precv of large arrays, which nexus-pvm sends as direct
 * messages and may place straight into pvm_precv's buffer (docs/pvm.md,
 * "Receive placement"), between two tasks in separate processes: the
 * process started by hand spawns itself as the other task.
 *
 * Checked: 1 MiB and 4 MiB of doubles and of ints, received with a
 * pvm_precv posted before the message arrives and with one posted after it
 * was queued; a small and a large message of one tag racing (pvm_precv
 * takes them in send order, also with tag -1); a psend'ed message received
 * with pvm_recv and pvm_upkdouble in pieces; a ping-pong of 1 MiB both
 * ways; a sender killed while its direct message is on its way, received
 * with pvm_precv and with pvm_recv (the receive returns PvmSysErr, or the
 * whole message should it have crossed first; pvm_exit then finishes).
 * Each receive's values, source, tag and length are checked. Whether a
 * message was placed or copied depends on whether the receive was posted
 * first, so it is not asserted: the values must be the same either way,
 * and are checked. nexus-pvm only. */
#include <nexus.h>
#include <pvm3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/expect.h"

#define MIB (1 << 20)
enum { TAG_GO = 1, TAG_SENT = 2 };

/* The four arrays of parts A and B: element type and size. */
static const struct {
  int type;
  size_t bytes;
} arrays[] = {{PVM_DOUBLE, MIB},
              {PVM_DOUBLE, 4 * MIB},
              {PVM_INT, MIB},
              {PVM_INT, 4 * MIB}};
#define NARRAYS (int)(sizeof(arrays) / sizeof(arrays[0]))

static double dval(size_t i, int base) { return (double)i * 0.5 + base; }
static int ival(size_t i, int base) { return (int)(i * 7u) ^ base; }

static void fill(void *p, int type, size_t n, int base) {
  for (size_t i = 0; i < n; i++) {
    if (type == PVM_DOUBLE)
      ((double *)p)[i] = dval(i, base);
    else
      ((int *)p)[i] = ival(i, base);
  }
}

/* 1 when the first `n` items of `p` are fill's. */
static int check(const void *p, int type, size_t n, int base) {
  for (size_t i = 0; i < n; i++) {
    if (type == PVM_DOUBLE ? ((const double *)p)[i] != dval(i, base)
                           : ((const int *)p)[i] != ival(i, base)) {
      fprintf(stderr, "item %zu of %zu differs\n", i, n);
      return 0;
    }
  }
  return 1;
}

static size_t esize(int type) {
  return type == PVM_DOUBLE ? sizeof(double) : sizeof(int);
}

static int child(void) {
  int parent = pvm_parent();
  void *buf = malloc(4 * MIB);
  NXT_EXPECT(buf != NULL, 1);
  /* A: each array once the parent said go (its pvm_precv waits). */
  for (int i = 0; i < NARRAYS; i++) {
    size_t n = arrays[i].bytes / esize(arrays[i].type);
    fill(buf, arrays[i].type, n, 100 + i);
    NXT_EXPECT(pvm_recv(parent, TAG_GO) > 0, 1);
    NXT_EXPECT(pvm_psend(parent, 100 + i, buf, (int)n, arrays[i].type) == 0, 1);
  }
  /* B: each array, then a small message after it. */
  for (int i = 0; i < NARRAYS; i++) {
    size_t n = arrays[i].bytes / esize(arrays[i].type);
    fill(buf, arrays[i].type, n, 200 + i);
    NXT_EXPECT(pvm_psend(parent, 200 + i, buf, (int)n, arrays[i].type) == 0, 1);
    pvm_initsend(PvmDataDefault);
    NXT_EXPECT(pvm_send(parent, TAG_SENT) == 0, 1);
  }
  /* C: small and large of one tag, in both orders. */
  size_t ni = MIB / sizeof(int), nd = MIB / sizeof(double);
  fill(buf, PVM_INT, 10, 300);
  NXT_EXPECT(pvm_psend(parent, 300, buf, 10, PVM_INT) == 0, 1);
  fill(buf, PVM_INT, ni, 301);
  NXT_EXPECT(pvm_psend(parent, 300, buf, (int)ni, PVM_INT) == 0, 1);
  fill(buf, PVM_DOUBLE, nd, 302);
  NXT_EXPECT(pvm_psend(parent, 302, buf, (int)nd, PVM_DOUBLE) == 0, 1);
  fill(buf, PVM_DOUBLE, 10, 303);
  NXT_EXPECT(pvm_psend(parent, 302, buf, 10, PVM_DOUBLE) == 0, 1);
  /* D: for pvm_recv and pvm_upkdouble. */
  fill(buf, PVM_DOUBLE, nd, 400);
  NXT_EXPECT(pvm_psend(parent, 400, buf, (int)nd, PVM_DOUBLE) == 0, 1);
  /* E: the ping-pong: each value back plus one. */
  for (int r = 0; r < 3; r++) {
    int src = 0, tag = 0, len = 0;
    NXT_EXPECT(
        pvm_precv(parent, 500, buf, (int)nd, PVM_DOUBLE, &src, &tag, &len) == 0,
        1);
    NXT_EXPECT(src == parent && tag == 500 && len == MIB, 1);
    for (size_t i = 0; i < nd; i++)
      ((double *)buf)[i] += 1.0;
    NXT_EXPECT(pvm_psend(parent, 501, buf, (int)nd, PVM_DOUBLE) == 0, 1);
  }
  free(buf);
  pvm_exit();
  return 0;
}

/* One pvm_precv of array `i` with tag `tag`, checked. */
static int precv_checked(int tid, int tag, int i, void *buf, int base) {
  int type = arrays[i].type;
  size_t n = arrays[i].bytes / esize(type);
  memset(buf, 0, arrays[i].bytes);
  int src = 0, rtag = 0, len = 0;
  NXT_EXPECT(pvm_precv(tid, tag, buf, (int)n, type, &src, &rtag, &len) == 0, 0);
  NXT_EXPECT(src == tid && rtag == tag && (size_t)len == arrays[i].bytes, 0);
  NXT_EXPECT(check(buf, type, n, base), 0);
  return 1;
}

static int parent(int tid) {
  void *buf = malloc(4 * MIB);
  NXT_EXPECT(buf != NULL, 1);
  /* A: the receive posted before the message is sent. */
  for (int i = 0; i < NARRAYS; i++) {
    pvm_initsend(PvmDataDefault);
    NXT_EXPECT(pvm_send(tid, TAG_GO) == 0, 1);
    NXT_EXPECT(precv_checked(tid, 100 + i, i, buf, 100 + i), 1);
  }
  printf("A: precv before arrival, 1 and 4 MiB of doubles and ints: ok\n");
  /* B: the message queued before the receive (the small message sent
   * after it is here, and the order between two tasks is kept). */
  for (int i = 0; i < NARRAYS; i++) {
    NXT_EXPECT(pvm_recv(tid, TAG_SENT) > 0, 1);
    NXT_EXPECT(precv_checked(tid, 200 + i, i, buf, 200 + i), 1);
  }
  printf("B: precv after arrival, 1 and 4 MiB of doubles and ints: ok\n");
  /* C: in send order, whichever arrived or was placed first. */
  size_t ni = MIB / sizeof(int), nd = MIB / sizeof(double);
  int src, tag, len;
  memset(buf, 0, MIB);
  NXT_EXPECT(pvm_precv(tid, 300, buf, (int)ni, PVM_INT, &src, &tag, &len) == 0,
             1);
  NXT_EXPECT(tag == 300 && len == 10 * (int)sizeof(int), 1);
  NXT_EXPECT(check(buf, PVM_INT, 10, 300), 1);
  NXT_EXPECT(precv_checked(tid, 300, 2, buf, 301), 1);
  memset(buf, 0, MIB);
  NXT_EXPECT(
      pvm_precv(tid, -1, buf, (int)nd, PVM_DOUBLE, &src, &tag, &len) == 0, 1);
  NXT_EXPECT(src == tid && tag == 302 && len == MIB, 1);
  NXT_EXPECT(check(buf, PVM_DOUBLE, nd, 302), 1);
  memset(buf, 0, MIB);
  NXT_EXPECT(
      pvm_precv(tid, -1, buf, (int)nd, PVM_DOUBLE, &src, &tag, &len) == 0, 1);
  NXT_EXPECT(src == tid && tag == 302 && len == 10 * (int)sizeof(double), 1);
  NXT_EXPECT(check(buf, PVM_DOUBLE, 10, 303), 1);
  printf("C: small and large of one tag, in send order: ok\n");
  /* D: a psend'ed message through the receive buffer, in two pieces. */
  int id = pvm_recv(tid, 400);
  NXT_EXPECT(id > 0, 1);
  int bytes;
  NXT_EXPECT(pvm_bufinfo(id, &bytes, &tag, &src) == 0, 1);
  NXT_EXPECT(bytes == MIB && tag == 400 && src == tid, 1);
  memset(buf, 0, MIB);
  NXT_EXPECT(pvm_upkdouble(buf, (int)nd / 2, 1) == 0, 1);
  NXT_EXPECT(pvm_upkdouble((double *)buf + nd / 2, (int)(nd - nd / 2), 1) == 0,
             1);
  NXT_EXPECT(check(buf, PVM_DOUBLE, nd, 400), 1);
  printf("D: psend received with pvm_recv and pvm_upkdouble: ok\n");
  /* E: 1 MiB both ways. */
  for (int r = 0; r < 3; r++) {
    fill(buf, PVM_DOUBLE, nd, 500 + r);
    NXT_EXPECT(pvm_psend(tid, 500, buf, (int)nd, PVM_DOUBLE) == 0, 1);
    memset(buf, 0, MIB);
    NXT_EXPECT(
        pvm_precv(tid, 501, buf, (int)nd, PVM_DOUBLE, &src, &tag, &len) == 0,
        1);
    NXT_EXPECT(src == tid && tag == 501 && len == MIB, 1);
    for (size_t i = 0; i < nd; i++)
      NXT_EXPECT(((double *)buf)[i] == dval(i, 500 + r) + 1.0, 1);
  }
  printf("E: ping-pong of 1 MiB both ways: ok\n");
  free(buf);
  return 0;
}

/* F: a task that dies while its direct message is on its way. It gets
 * the parent's gp (packed by nexus, in a PVM message), sends the parent a
 * direct message of LOST_BYTES built by hand (the form pvm_buf.c
 * describes: u16 1, u32 seq, i32 tag, i32 ctx, u8 kind, u64 count, the
 * array by reference; seq 0: its first message to the parent) and is
 * killed as soon as nexus accepted it, while most of the array has not
 * crossed. A change of that form changes this test with it. */
#define LOST_BYTES (64 * MIB)
#define K_F64 6

static void no_release(void *arg, const void *v, int status) {
  (void)arg;
  (void)v;
  (void)status;
}

static int lost_child(void) {
  int parent = pvm_parent();
  NXT_EXPECT(pvm_recv(parent, TAG_GO) > 0, 1);
  int len;
  char packed[4096];
  NXT_EXPECT(pvm_upkint(&len, 1, 1) == 0 && len > 0 && len < 4096, 1);
  NXT_EXPECT(pvm_upkbyte(packed, len, 1) == 0, 1);
  nx_buffer_t *in;
  nx_gp_t gp;
  NXT_EXPECT(
      nx_buffer_from_bytes(packed, (size_t)len, nx_format_native(), &in) == 0,
      1);
  NXT_EXPECT(nx_get_gp(in, &gp) == 0, 1);
  nx_buffer_release(in);
  size_t n = LOST_BYTES / sizeof(double);
  double *v = malloc(LOST_BYTES);
  NXT_EXPECT(v != NULL, 1);
  fill(v, PVM_DOUBLE, n, 600);
  nx_buffer_t *b;
  NXT_EXPECT(nx_rsr_init_name(&b, &gp, "nxpvm.msg", 64) == 0, 1);
  NXT_EXPECT(nx_put_uint16(b, 1) == 0 && nx_put_uint32(b, 0) == 0 &&
                 nx_put_int32(b, 600) == 0 && nx_put_int32(b, 0) == 0 &&
                 nx_put_uint8(b, K_F64) == 0 && nx_put_uint64(b, n) == 0 &&
                 nx_put_double_array_ref(b, v, n, no_release, NULL) == 0,
             1);
  NXT_EXPECT(nx_rsr_send_flags(b, NX_RSR_ORDERED) == 0, 1);
  raise(SIGKILL);
  return 1;
}

/* F (`by_recv` 0): pvm_precv waits for the lost message; G (1): pvm_recv,
 * the message received into nexus's memory. Either way the task's
 * pvm_exit then finishes (over ucx, a rendezvous of a dead sender is
 * taken off its endpoint before the worker goes). */
static int lost_parent(const char *self, int by_recv) {
  char *av[] = {"lost", NULL};
  int tid;
  NXT_EXPECT(pvm_spawn((char *)self, av, PvmTaskDefault, "", 1, &tid) == 1, 1);
  nx_gp_t me;
  nx_buffer_t *out;
  const void *bytes;
  size_t len;
  NXT_EXPECT(nx_gp_make(NULL, &me) == 0, 1);
  NXT_EXPECT(nx_buffer_create(nx_sizeof_gp(&me), &out) == 0, 1);
  NXT_EXPECT(nx_put_gp(out, &me) == 0, 1);
  NXT_EXPECT(nx_buffer_bytes(out, &bytes, &len) == 0, 1);
  int n = (int)len;
  NXT_EXPECT(pvm_initsend(PvmDataDefault) > 0, 1);
  NXT_EXPECT(pvm_pkint(&n, 1, 1) == 0 && pvm_pkbyte((char *)bytes, n, 1) == 0,
             1);
  NXT_EXPECT(pvm_send(tid, TAG_GO) == 0, 1);
  nx_buffer_release(out);
  nx_gp_release(&me);
  size_t items = LOST_BYTES / sizeof(double);
  double *v = calloc(items, sizeof(double));
  NXT_EXPECT(v != NULL, 1);
  /* Lost midway (placed or not): PvmSysErr, as from a task that ended;
   * should the whole array have crossed before the kill: the values. */
  int src, tag, rlen, rc;
  if (by_recv) {
    rc = pvm_recv(tid, 600);
    if (rc > 0) {
      NXT_EXPECT(pvm_bufinfo(rc, &rlen, &tag, &src) == 0 &&
                     rlen == LOST_BYTES &&
                     pvm_upkdouble(v, (int)items, 1) == 0 &&
                     check(v, PVM_DOUBLE, items, 600),
                 1);
      rc = 0;
    }
  } else {
    rc = pvm_precv(tid, 600, v, (int)items, PVM_DOUBLE, &src, &tag, &rlen);
    NXT_EXPECT(rc == PvmSysErr || (rc == 0 && rlen == LOST_BYTES &&
                                   check(v, PVM_DOUBLE, items, 600)),
               1);
  }
  NXT_EXPECT(rc == PvmSysErr || rc == 0, 1);
  free(v);
  printf("%s: a sender killed midway: %s returned %s\n", by_recv ? "G" : "F",
         by_recv ? "pvm_recv" : "pvm_precv",
         rc == PvmSysErr ? "PvmSysErr" : "the whole message");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return pvm_mytid() < 0 ? 77 : child();
  if (argc > 1 && strcmp(argv[1], "lost") == 0)
    return pvm_mytid() < 0 ? 77 : lost_child();
  if (pvm_mytid() < 0) {
    printf("skip: pvm_mytid failed (no module reaches a spawned task)\n");
    return 77;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    pvm_exit();
    return 1;
  }
  self[n] = '\0';
  char *av[] = {"child", NULL};
  int tid;
  if (pvm_spawn(self, av, PvmTaskDefault, "", 1, &tid) != 1) {
    fprintf(stderr, "pvm_spawn failed\n");
    pvm_exit();
    return 1;
  }
  int rc = parent(tid);
  /* (Over ucx, G aborted in pvm_exit every time until the module took the
   * fetches of a dead sender off their endpoints at finalize.) */
  if (rc == 0) {
    pvm_setopt(PvmAutoErr, 0); /* PvmSysErr is expected */
    rc = lost_parent(self, 0);
  }
  if (rc == 0)
    rc = lost_parent(self, 1);
  pvm_exit();
  return rc;
}
