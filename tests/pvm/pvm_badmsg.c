/* Malformed messages: a task sends its parent RSRs to nexus-pvm's message
 * handler ("nxpvm.msg") that no nexus-pvm sends, each malformed another
 * way, then one well-formed message built by hand and one pvm_send. The
 * parent must drop every malformed one (nothing of them reaches pvm_recv,
 * the process keeps running, nothing is read out of bounds: the suite runs
 * this under ASan too), and get the two others in order. The parent's gp
 * reaches the child packed by nexus in a PVM message. nexus-pvm only: the
 * real PVM has no such handler.
 *
 * The hand-built messages follow the wire form pvm_buf.c describes ("A
 * buffer on the wire is one byte array"): u8 flags, varint tag, varint
 * nseg, then per run u8 kind and varint count, then the values in the
 * sender's byte order; kinds as pvm_internal.h's enum kind (K_I32 = 3). A
 * change of that form changes this test with it. */
#include <nexus.h>
#include <pvm3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../common/expect.h"

#define H_MSG "nxpvm.msg"
#define K_I32 3

enum { TAG_GP = 1, TAG_GOOD = 7, TAG_LAST = 9 };

/* Sends one RSR to the message handler at `gp`, ordered as pvm_send's,
 * with what `put` writes; returns nx_rsr_send's result. */
typedef int (*put_fn)(nx_buffer_t *b, const void *arg);

static int send_raw(const nx_gp_t *gp, put_fn put, const void *arg) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, gp, H_MSG, 64);
  if (rc < 0)
    return rc;
  if (put != NULL && (rc = put(b, arg)) < 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send_flags(b, NX_RSR_ORDERED);
}

struct blob {
  const uint8_t *p;
  size_t n;
};

static int put_blob(nx_buffer_t *b, const void *arg) {
  const struct blob *x = arg;
  return nx_put_bytes(b, x->p, x->n);
}

static int put_u32(nx_buffer_t *b, const void *arg) {
  return nx_put_uint32(b, *(const uint32_t *)arg);
}

static int put_intro_double(nx_buffer_t *b, const void *arg) {
  (void)arg;
  int rc = nx_put_uint32(b, 1); /* "my gp follows", then no gp */
  return rc == 0 ? nx_put_double(b, 2.5) : rc;
}

static int put_double(nx_buffer_t *b, const void *arg) {
  (void)arg;
  return nx_put_double(b, 2.5);
}

static int put_len_only(nx_buffer_t *b, const void *arg) {
  (void)arg;
  return nx_put_uint64(b, 1000); /* a length, and no bytes after it */
}

static int put_len_short(nx_buffer_t *b, const void *arg) {
  (void)arg;
  static const uint8_t ten[10];
  int rc = nx_put_uint64(b, 1000); /* says 1000, has 10 */
  return rc == 0 ? nx_put_bytes(b, ten, sizeof(ten)) : rc;
}

static int child(void) {
  int parent = pvm_parent();
  NXT_EXPECT(parent > 0, 1);
  NXT_EXPECT(pvm_recv(parent, TAG_GP) > 0, 1);
  int len;
  NXT_EXPECT(pvm_upkint(&len, 1, 1) == 0 && len > 0 && len < 4096, 1);
  char packed[4096];
  NXT_EXPECT(pvm_upkbyte(packed, len, 1) == 0, 1);
  nx_buffer_t *in;
  NXT_EXPECT(
      nx_buffer_from_bytes(packed, (size_t)len, nx_format_native(), &in) == 0,
      1);
  nx_gp_t gp;
  NXT_EXPECT(nx_get_gp(in, &gp) == 0, 1);
  nx_buffer_release(in);

  static const uint8_t empty[1];
  static const uint8_t flags_only[] = {0};
  static const uint8_t too_many_runs[] = {0, 5, 200, K_I32, 1, 1, 2, 3, 4};
  static const uint8_t bad_kind[] = {0, 5, 1, 99, 1, 1, 2, 3, 4};
  static const uint8_t zero_count[] = {0, 5, 1, K_I32, 0};
  static const uint8_t short_values[] = {0, 5, 1, K_I32, 2, 1, 2, 3, 4};
  static const uint8_t long_values[] = {0, 5, 1, K_I32, 1, 1, 2, 3, 4, 5};
  static const uint8_t long_varint[] = {0,    0xff, 0xff, 0xff,
                                        0xff, 0xff, 0x7f, 0};
  static const uint8_t cut_varint[] = {0, 0x80};
  static const uint8_t no_table[] = {0, 5, 2, K_I32};
  const struct blob blobs[] = {
      {empty, 0},
      {flags_only, sizeof(flags_only)},
      {too_many_runs, sizeof(too_many_runs)},
      {bad_kind, sizeof(bad_kind)},
      {zero_count, sizeof(zero_count)},
      {short_values, sizeof(short_values)},
      {long_values, sizeof(long_values)},
      {long_varint, sizeof(long_varint)},
      {cut_varint, sizeof(cut_varint)},
      {no_table, sizeof(no_table)},
  };
  int sent = 0;
  uint32_t header = 0;
  NXT_EXPECT(send_raw(&gp, NULL, NULL) == 0, 1);       /* no value at all */
  NXT_EXPECT(send_raw(&gp, put_u32, &header) == 0, 1); /* header only */
  NXT_EXPECT(send_raw(&gp, put_intro_double, NULL) == 0, 1);
  NXT_EXPECT(send_raw(&gp, put_double, NULL) == 0, 1);
  NXT_EXPECT(send_raw(&gp, put_len_only, NULL) == 0, 1);
  NXT_EXPECT(send_raw(&gp, put_len_short, NULL) == 0, 1);
  sent += 6;
  for (size_t i = 0; i < sizeof(blobs) / sizeof(blobs[0]); i++, sent++)
    NXT_EXPECT(send_raw(&gp, put_blob, &blobs[i]) == 0, 1);

  /* Well formed: tag 7, one run of one int, 42, in this machine's order. */
  uint8_t good[9] = {0, TAG_GOOD, 1, K_I32, 1};
  int32_t v = 42;
  memcpy(good + 5, &v, 4);
  const struct blob g = {good, sizeof(good)};
  NXT_EXPECT(send_raw(&gp, put_blob, &g) == 0, 1);
  nx_gp_release(&gp);

  int n = 3;
  NXT_EXPECT(pvm_initsend(PvmDataDefault) > 0, 1);
  NXT_EXPECT(pvm_pkint(&n, 1, 1) == 0, 1);
  NXT_EXPECT(pvm_pkint(&sent, 1, 1) == 0, 1);
  NXT_EXPECT(pvm_send(parent, TAG_LAST) == 0, 1);
  pvm_exit();
  return 0;
}

static int parent(const char *self) {
  int tid;
  NXT_EXPECT(
      pvm_spawn((char *)self, (char *[]){"child", NULL}, 0, "", 1, &tid) == 1,
      1);
  /* This task's gp, packed by nexus, as bytes of a PVM message. */
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
  NXT_EXPECT(pvm_pkint(&n, 1, 1) == 0, 1);
  NXT_EXPECT(pvm_pkbyte((char *)bytes, n, 1) == 0, 1);
  NXT_EXPECT(pvm_send(tid, TAG_GP) == 0, 1);
  nx_buffer_release(out);
  nx_gp_release(&me);

  /* The first message to arrive is the hand-built one, the second the
   * pvm_send: each malformed one before them was dropped. */
  int bufid, bytes_in, tag, src, value;
  NXT_EXPECT((bufid = pvm_recv(tid, -1)) > 0, 1);
  NXT_EXPECT(pvm_bufinfo(bufid, &bytes_in, &tag, &src) == 0, 1);
  NXT_EXPECT(pvm_upkint(&value, 1, 1) == 0, 1);
  printf("first: tag %d, %d bytes, from the child %s, value %d\n", tag,
         bytes_in, src == tid ? "yes" : "no", value);
  NXT_EXPECT((bufid = pvm_recv(tid, -1)) > 0, 1);
  NXT_EXPECT(pvm_bufinfo(bufid, &bytes_in, &tag, &src) == 0, 1);
  int three, sent;
  NXT_EXPECT(pvm_upkint(&three, 1, 1) == 0, 1);
  NXT_EXPECT(pvm_upkint(&sent, 1, 1) == 0, 1);
  printf("second: tag %d, values %d and %d malformed sent\n", tag, three, sent);
  NXT_EXPECT(pvm_upkint(&three, 1, 1) == PvmNoData, 1);
  printf("more messages: %s\n", pvm_nrecv(-1, -1) == 0 ? "none" : "some");
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  pvm_setopt(PvmAutoErr, 0);
  if (pvm_mytid() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
  return parent(argv[0]);
}
