/* Message contexts (inherited by a spawned task), message info, formatted
 * packing, messages packed in messages, message handlers, a receive with
 * the program's own matcher, and pvm_getfds. */
#include <stdlib.h>

#include "common.h"

static int child(void) {
  int parent = pvm_parent(), ctx = pvm_getcontext();
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&ctx, 1, 1);
  /* in the context it was spawned in */
  NXT_EXPECT(pvm_send(parent, 1) == PvmOk, 1);
  NXT_EXPECT(pvm_setcontext(PvmBaseContext) == ctx, 1);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&ctx, 1, 1);
  NXT_EXPECT(pvm_send(parent, 2) == PvmOk, 1);
  pvm_exit();
  return 0;
}

static int handled, handler_ok;

static int on_msg(int mid) {
  int v = 0, bytes, tag, src;
  pvm_bufinfo(mid, &bytes, &tag, &src);
  pvm_upkint(&v, 1, 1);
  int is_rbuf = pvm_getrbuf() == mid;
  printf("handler: tag %d value %d, is the receive buffer %s\n", tag, v,
         is_rbuf ? "yes" : "no");
  handler_ok = tag == 50 && v == 5050 && is_rbuf;
  handled++;
  return 0;
}

/* Ranks the messages with tags 61 to 63 by tag. */
static int by_tag(int mid, int tid, int tag) {
  (void)tid;
  (void)tag;
  struct pvmminfo mi;
  if (pvm_getminfo(mid, &mi) < 0)
    return 0;
  return mi.tag >= 61 && mi.tag <= 63 ? mi.tag - 59 : 0;
}

static void send_self(int tag, int v) {
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&v, 1, 1);
  pvm_send(pvm_mytid(), tag);
}

int main(int argc, char **argv) {
  int me = task_start();
  if (me < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();

  /* Contexts. */
  int c0 = pvm_getcontext();
  printf("context at start: %d\n", c0);
  NXT_EXPECT(c0 == PvmBaseContext, 1);
  int c1 = pvm_newcontext(), c2 = pvm_newcontext();
  printf("new contexts: %s, distinct %s\n",
         c1 > 0 && c2 > 0 ? "positive" : "not", c1 != c2 ? "yes" : "no");
  NXT_EXPECT(c1 > 0 && c2 > 0 && c1 != c2, 1);
  int old = pvm_setcontext(c1);
  printf("setcontext returns the old: %s\n",
         old == PvmBaseContext ? "yes" : "no");
  NXT_EXPECT(old == PvmBaseContext, 1);
  int tid;
  if (spawn_self("child", 1, &tid) != 1)
    return 1;
  old = pvm_setcontext(PvmBaseContext);
  printf("back to base returns c1: %s\n", old == c1 ? "yes" : "no");
  NXT_EXPECT(old == c1, 1);
  /* The child's first message is in c1, its second in the base context:
   * a receive in the base context takes the second. */
  int id = recv_for(tid, -1);
  int bytes = 0, tag = 0, src = 0;
  pvm_bufinfo(id, &bytes, &tag, &src);
  printf("base context receives tag %d\n", tag);
  NXT_EXPECT(id > 0 && tag == 2 && src == tid, 1);
  int nrecv = pvm_nrecv(tid, 1);
  printf("nrecv of the c1 message in base: %d\n", nrecv);
  NXT_EXPECT(nrecv == 0, 1);
  pvm_setcontext(c1);
  id = recv_for(tid, 1);
  int ctx = -1;
  pvm_upkint(&ctx, 1, 1);
  printf("in c1: tag-1 message %s, child started in c1: %s\n",
         id > 0 ? "received" : "missing", ctx == c1 ? "yes" : "no");
  NXT_EXPECT(id > 0 && ctx == c1, 1);
  struct pvmminfo mi;
  NXT_EXPECT(said("getminfo", pvm_getminfo(id, &mi), PvmOk), 1);
  printf("minfo: len %d tag %d src is child %s dst is me %s ctx is c1 %s\n",
         mi.len, mi.tag, mi.src == tid ? "yes" : "no",
         mi.dst == me ? "yes" : "no", mi.ctx == c1 ? "yes" : "no");
  NXT_EXPECT(mi.len == 4 && mi.tag == 1 && mi.src == tid, 1);
  NXT_EXPECT(mi.dst == me && mi.ctx == c1, 1);
  mi.tag = 77;
  NXT_EXPECT(said("setminfo", pvm_setminfo(id, &mi), PvmOk), 1);
  pvm_bufinfo(id, &bytes, &tag, &src);
  printf("tag after setminfo: %d\n", tag);
  NXT_EXPECT(tag == 77, 1);
  NXT_EXPECT(said("getminfo bad id", pvm_getminfo(999, &mi), PvmNoSuchBuf), 1);
  NXT_EXPECT(said("getminfo id 0", pvm_getminfo(0, &mi), PvmBadParam), 1);
  pvm_setcontext(PvmBaseContext);
  NXT_EXPECT(said("freecontext c2", pvm_freecontext(c2), PvmOk), 1);

  /* pvm_packf and pvm_unpackf, with pvm_upk* on the same message. */
  int n = 3, arr[3] = {10, 20, 30}, arr2[3] = {0};
  double dd[2] = {1.5, -2.25}, dd2[2] = {0};
  float cx[2] = {3.5f, -1.0f}, cx2[2] = {0};
  short hs = 0;
  char c = 0, str[32] = "";
  NXT_EXPECT(said("packf",
                  pvm_packf("%+ %d %*d %2lf %s %hd %c %x", PvmDataDefault, n, n,
                            arr, dd, "hello", (short)-7, 'Q', cx),
                  PvmOk),
             1);
  pvm_send(me, 40);
  recv_for(me, 40);
  int n2 = 0;
  pvm_upkint(&n2, 1, 1);
  NXT_EXPECT(said("unpackf",
                  pvm_unpackf("%*d %2lf %s %hd %c %x", n2, arr2, dd2, str, &hs,
                              &c, cx2),
                  PvmOk),
             1);
  printf("values: %d %d %d %d %g %g %s %d %c %g %g\n", n2, arr2[0], arr2[1],
         arr2[2], dd2[0], dd2[1], str, hs, c, cx2[0], cx2[1]);
  NXT_EXPECT(n2 == 3 && arr2[0] == 10 && arr2[1] == 20 && arr2[2] == 30, 1);
  NXT_EXPECT(dd2[0] == 1.5 && dd2[1] == -2.25 && strcmp(str, "hello") == 0, 1);
  NXT_EXPECT(hs == -7 && c == 'Q' && cx2[0] == 3.5f && cx2[1] == -1.0f, 1);
  NXT_EXPECT(said("unpackf past the end", pvm_unpackf("%d", &n2), PvmNoData),
             1);
  pvm_freebuf(pvm_getsbuf());
  NXT_EXPECT(said("packf no buffer", pvm_packf("%d", 1), PvmNoBuf), 1);

  /* A message packed in a message keeps its header and body. */
  send_self(41, 4141);
  int inner = recv_for(me, 41);
  pvm_initsend(PvmDataDefault);
  pvm_pkstr("wrapped");
  NXT_EXPECT(said("pkmesg", pvm_pkmesg(inner), PvmOk), 1);
  NXT_EXPECT(
      said("pkmesg of the send buffer", pvm_pkmesg(pvm_getsbuf()), PvmBadParam),
      1);
  NXT_EXPECT(said("pkmesg no such buffer", pvm_pkmesg(999), PvmNoSuchBuf), 1);
  NXT_EXPECT(said("pkmesgbody", pvm_pkmesgbody(inner), PvmOk), 1);
  pvm_send(me, 42);
  recv_for(me, 42);
  pvm_upkstr(str);
  int got = pvm_upkmesg();
  int v = 0, spliced = 0;
  pvm_upkint(&spliced, 1, 1);
  printf("outer: %s, spliced body %d\n", str, spliced);
  NXT_EXPECT(strcmp(str, "wrapped") == 0 && spliced == 4141, 1);
  NXT_EXPECT(got > 0 && pvm_getminfo(got, &mi) == PvmOk, 1);
  printf("upkmesg: %s, tag %d, src is me %s\n",
         got > 0 ? "a buffer" : code(got), mi.tag, mi.src == me ? "yes" : "no");
  NXT_EXPECT(mi.tag == 41 && mi.src == me, 1);
  pvm_setrbuf(got);
  pvm_upkint(&v, 1, 1);
  printf("inner value %d\n", v);
  NXT_EXPECT(v == 4141, 1);

  /* A message handler runs while the task receives. */
  int h = pvm_addmhf(-1, 50, PvmBaseContext, on_msg);
  printf("addmhf: %s\n", h >= 0 ? "an id" : code(h));
  NXT_EXPECT(h >= 0, 1);
  NXT_EXPECT(said("addmhf again", pvm_addmhf(-1, 50, PvmBaseContext, on_msg),
                  PvmExists),
             1);
  send_self(50, 5050);
  send_self(51, 5151);
  int rb = recv_for(me, 51);
  pvm_upkint(&v, 1, 1);
  printf("received tag 51 value %d after %d handled\n", v, handled);
  /* The handler took the tag-50 message, which no receive then sees. */
  NXT_EXPECT(rb > 0 && v == 5151 && handled == 1 && handler_ok, 1);
  int probe = pvm_probe(me, 50);
  printf("probe of tag 50: %d\n", probe);
  NXT_EXPECT(probe == 0, 1);
  NXT_EXPECT(said("delmhf", pvm_delmhf(h), PvmOk), 1);
  NXT_EXPECT(said("delmhf again", pvm_delmhf(h), PvmNotFound), 1);
  NXT_EXPECT(said("delmhf -1", pvm_delmhf(-1), PvmBadParam), 1);

  /* pvm_recvf: the program's matcher picks the highest ranked message. */
  send_self(61, 0);
  send_self(63, 0);
  send_self(62, 0);
  send_self(64, 0);
  recv_for(me, 64); /* all three have arrived: they were sent before */
  /* The previous matcher goes back as it came (cast: PVM's own declaration of
   * pvm_recvf differs from its manual's). */
  void *prev = (void *)pvm_recvf(by_tag);
  for (int i = 0; i < 3; i++) {
    id = pvm_recv(-1, -1);
    pvm_bufinfo(id, &bytes, &tag, &src);
    printf("recvf picks tag %d\n", tag);
    NXT_EXPECT(tag == 63 - i, 1);
  }
  int back = (void *)pvm_recvf((int (*)(int, int, int))prev) == (void *)by_tag;
  printf("recvf gives back by_tag: %s\n", back ? "yes" : "no");
  NXT_EXPECT(back, 1);

  /* pvm_getfds: select() says when a message waits. */
  int *fds = NULL;
  int nfds = pvm_getfds(&fds);
  printf("getfds: %s\n", nfds >= 1 ? "at least one" : code(nfds));
  NXT_EXPECT(nfds >= 1 && fds != NULL, 1);
  /* Whether the descriptor is readable for a message a task sent itself
   * differs (libpvm reads it while sending): tests/pvm/test_pvm.cpp checks
   * it for nexus-pvm. */
  pvm_exit();
  return 0;
}
