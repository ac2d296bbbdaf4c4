/* Message contexts (inherited by a spawned task), message info, formatted
 * packing, messages packed in messages, message handlers, a receive with
 * the program's own matcher, and pvm_getfds. */
#include <stdlib.h>

#include "common.h"

static int child(void) {
  int parent = pvm_parent(), ctx = pvm_getcontext();
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&ctx, 1, 1);
  pvm_send(parent, 1); /* in the context it was spawned in */
  pvm_setcontext(PvmBaseContext);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&ctx, 1, 1);
  pvm_send(parent, 2);
  pvm_exit();
  return 0;
}

static int handled;

static int on_msg(int mid) {
  int v = 0, bytes, tag, src;
  pvm_bufinfo(mid, &bytes, &tag, &src);
  pvm_upkint(&v, 1, 1);
  printf("handler: tag %d value %d, is the receive buffer %s\n", tag, v,
         pvm_getrbuf() == mid ? "yes" : "no");
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
  setvbuf(stdout, NULL, _IOLBF, 0);
  int me = pvm_mytid();
  if (me < 0)
    return 77;
  pvm_setopt(PvmAutoErr, 0);
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();

  /* Contexts. */
  printf("context at start: %d\n", pvm_getcontext());
  int c1 = pvm_newcontext(), c2 = pvm_newcontext();
  printf("new contexts: %s, distinct %s\n",
         c1 > 0 && c2 > 0 ? "positive" : "not", c1 != c2 ? "yes" : "no");
  printf("setcontext returns the old: %s\n",
         pvm_setcontext(c1) == PvmBaseContext ? "yes" : "no");
  int tid;
  if (spawn_self("child", 1, &tid) != 1)
    return 1;
  printf("back to base returns c1: %s\n",
         pvm_setcontext(PvmBaseContext) == c1 ? "yes" : "no");
  /* The child's first message is in c1, its second in the base context:
   * a receive in the base context takes the second. */
  int id = recv_for(tid, -1);
  int bytes = 0, tag = 0, src = 0;
  pvm_bufinfo(id, &bytes, &tag, &src);
  printf("base context receives tag %d\n", tag);
  printf("nrecv of the c1 message in base: %d\n", pvm_nrecv(tid, 1));
  pvm_setcontext(c1);
  id = recv_for(tid, 1);
  int ctx = -1;
  pvm_upkint(&ctx, 1, 1);
  printf("in c1: tag-1 message %s, child started in c1: %s\n",
         id > 0 ? "received" : "missing", ctx == c1 ? "yes" : "no");
  struct pvmminfo mi;
  printf("getminfo: %s\n", code(pvm_getminfo(id, &mi)));
  printf("minfo: len %d tag %d src is child %s dst is me %s ctx is c1 %s\n",
         mi.len, mi.tag, mi.src == tid ? "yes" : "no",
         mi.dst == me ? "yes" : "no", mi.ctx == c1 ? "yes" : "no");
  mi.tag = 77;
  printf("setminfo: %s\n", code(pvm_setminfo(id, &mi)));
  pvm_bufinfo(id, &bytes, &tag, &src);
  printf("tag after setminfo: %d\n", tag);
  printf("getminfo bad id: %s\n", code(pvm_getminfo(999, &mi)));
  printf("getminfo id 0: %s\n", code(pvm_getminfo(0, &mi)));
  pvm_setcontext(PvmBaseContext);
  printf("freecontext c2: %s\n", code(pvm_freecontext(c2)));

  /* pvm_packf and pvm_unpackf, with pvm_upk* on the same message. */
  int n = 3, arr[3] = {10, 20, 30}, arr2[3] = {0};
  double dd[2] = {1.5, -2.25}, dd2[2] = {0};
  float cx[2] = {3.5f, -1.0f}, cx2[2] = {0};
  short hs = 0;
  char c = 0, str[32] = "";
  printf("packf: %s\n",
         code(pvm_packf("%+ %d %*d %2lf %s %hd %c %x", PvmDataDefault, n, n,
                        arr, dd, "hello", (short)-7, 'Q', cx)));
  pvm_send(me, 40);
  recv_for(me, 40);
  int n2 = 0;
  pvm_upkint(&n2, 1, 1);
  printf("unpackf: %s\n", code(pvm_unpackf("%*d %2lf %s %hd %c %x", n2, arr2,
                                           dd2, str, &hs, &c, cx2)));
  printf("values: %d %d %d %d %g %g %s %d %c %g %g\n", n2, arr2[0], arr2[1],
         arr2[2], dd2[0], dd2[1], str, hs, c, cx2[0], cx2[1]);
  printf("unpackf past the end: %s\n", code(pvm_unpackf("%d", &n2)));
  printf("packf no buffer: %s\n",
         code((pvm_freebuf(pvm_getsbuf()), pvm_packf("%d", 1))));

  /* A message packed in a message keeps its header and body. */
  send_self(41, 4141);
  int inner = recv_for(me, 41);
  pvm_initsend(PvmDataDefault);
  pvm_pkstr("wrapped");
  printf("pkmesg: %s\n", code(pvm_pkmesg(inner)));
  printf("pkmesg of the send buffer: %s\n", code(pvm_pkmesg(pvm_getsbuf())));
  printf("pkmesg no such buffer: %s\n", code(pvm_pkmesg(999)));
  printf("pkmesgbody: %s\n", code(pvm_pkmesgbody(inner)));
  pvm_send(me, 42);
  recv_for(me, 42);
  pvm_upkstr(str);
  int got = pvm_upkmesg();
  int v = 0, spliced = 0;
  pvm_upkint(&spliced, 1, 1);
  printf("outer: %s, spliced body %d\n", str, spliced);
  pvm_getminfo(got, &mi);
  printf("upkmesg: %s, tag %d, src is me %s\n",
         got > 0 ? "a buffer" : code(got), mi.tag, mi.src == me ? "yes" : "no");
  pvm_setrbuf(got);
  pvm_upkint(&v, 1, 1);
  printf("inner value %d\n", v);

  /* A message handler runs while the task receives. */
  int h = pvm_addmhf(-1, 50, PvmBaseContext, on_msg);
  printf("addmhf: %s\n", h >= 0 ? "an id" : code(h));
  printf("addmhf again: %s\n",
         code(pvm_addmhf(-1, 50, PvmBaseContext, on_msg)));
  send_self(50, 5050);
  send_self(51, 5151);
  int rb = recv_for(me, 51);
  pvm_upkint(&v, 1, 1);
  printf("received tag 51 value %d after %d handled\n", v, handled);
  printf("probe of tag 50: %d\n", pvm_probe(me, 50));
  printf("delmhf: %s\n", code(pvm_delmhf(h)));
  printf("delmhf again: %s\n", code(pvm_delmhf(h)));
  printf("delmhf -1: %s\n", code(pvm_delmhf(-1)));
  (void)rb;

  /* pvm_recvf: the program's matcher picks the highest ranked message. */
  send_self(61, 0);
  send_self(63, 0);
  send_self(62, 0);
  send_self(64, 0);
  recv_for(me, 64); /* all three have arrived: they were sent before */
  /* The old matcher goes back as it came (cast: PVM's own declaration of
   * pvm_recvf differs from its manual's). */
  void *old = (void *)pvm_recvf(by_tag);
  for (int i = 0; i < 3; i++) {
    id = pvm_recv(-1, -1);
    pvm_bufinfo(id, &bytes, &tag, &src);
    printf("recvf picks tag %d\n", tag);
  }
  printf("recvf gives back by_tag: %s\n",
         (void *)pvm_recvf((int (*)(int, int, int))old) == (void *)by_tag
             ? "yes"
             : "no");

  /* pvm_getfds: select() says when a message waits. */
  int *fds = NULL;
  int nfds = pvm_getfds(&fds);
  printf("getfds: %s\n", nfds >= 1 ? "at least one" : code(nfds));
  /* Whether the descriptor is readable for a message a task sent itself
   * differs (libpvm reads it while sending): tests/pvm/test_pvm.cpp checks
   * it for nexus-pvm. */
  (void)fds;
  pvm_exit();
  return 0;
}
