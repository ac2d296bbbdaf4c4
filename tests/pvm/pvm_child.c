/* The task tests/pvm/test_pvm.cpp spawns with pvm_spawn: argv[1] says what
 * it does (echo, foreign, die, wait, order N, start-odd FILE). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <pvm3.h>

#include "../common/expect.h"

/* Sends every message back to the parent (the received buffer itself, as
 * a PVM program forwards one) until a message with tag 0. */
static int echo(int parent) {
  for (;;) {
    int bufid = pvm_recv(parent, -1);
    int bytes, tag, src;
    NXT_EXPECT(bufid >= 0, 1);
    NXT_EXPECT(pvm_bufinfo(bufid, &bytes, &tag, &src) >= 0, 1);
    NXT_EXPECT(src == parent, 1);
    if (tag == 0)
      return 0;
    pvm_setsbuf(bufid);
    NXT_EXPECT(pvm_send(parent, tag) >= 0, 1);
  }
}

/* Packs one value of every type, in the other byte order. */
static int foreign(int parent) {
  char c = -5;
  short s = -1234;
  unsigned short us = 65000;
  int i = -123456789;
  unsigned int ui = 4000000000u;
  long l = -1234567890123L;
  unsigned long ul = 12345678901234UL;
  float f = 3.25f;
  double d = -2.0e300;
  float cx[2] = {1.5f, -2.5f};
  double dcx[2] = {-1.0e-300, 7.0};
  pvm_initsend(PvmDataDefault);
  pvm_pkbyte(&c, 1, 1);
  pvm_pkshort(&s, 1, 1);
  pvm_pkushort(&us, 1, 1);
  pvm_pkint(&i, 1, 1);
  pvm_pkuint(&ui, 1, 1);
  pvm_pklong(&l, 1, 1);
  pvm_pkulong(&ul, 1, 1);
  pvm_pkfloat(&f, 1, 1);
  pvm_pkdouble(&d, 1, 1);
  pvm_pkcplx(cx, 1, 1);
  pvm_pkdcplx(dcx, 1, 1);
  pvm_pkstr("foreign");
  NXT_EXPECT(pvm_send(parent, 1) >= 0, 1);
  return 0;
}

/* One of the total-order test's members: n broadcasts of (instance, k),
 * then the order it received the others' in, sent to the parent. */
static int order(int parent, int n) {
  char group[] = "order";
  int inst = pvm_joingroup(group);
  NXT_EXPECT(inst >= 0, 1);
  NXT_EXPECT(pvm_barrier(group, 4) >= 0, 1);
  int *log = malloc(sizeof(int) * 3 * (size_t)n);
  NXT_EXPECT(log != NULL, 1);
  for (int k = 0; k < n; k++) {
    int v[2] = {inst, k};
    pvm_initsend(PvmDataDefault);
    pvm_pkint(v, 2, 1);
    NXT_EXPECT(pvm_bcast(group, 91) >= 0, 1);
  }
  for (int k = 0; k < 3 * n; k++) {
    int v[2];
    NXT_EXPECT(pvm_recv(-1, 91) >= 0, 1);
    NXT_EXPECT(pvm_upkint(v, 2, 1) >= 0, 1);
    log[k] = v[0] * 1000000 + v[1];
  }
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&inst, 1, 1);
  pvm_pkint(log, 3 * n, 1);
  int sent = pvm_send(parent, 92);
  free(log);
  NXT_EXPECT(sent >= 0, 1);
  pvm_barrier(group, 4);
  pvm_lvgroup(group);
  return 0;
}

/* Counts this start in `path` (under a lock): the number of starts
 * before it. */
static int count_start(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) != 0)
    return -1;
  char text[16] = {0};
  ssize_t n = read(fd, text, sizeof(text) - 1);
  int before = n > 0 ? atoi(text) : 0;
  int len = snprintf(text, sizeof(text), "%d\n", before + 1);
  if (lseek(fd, 0, SEEK_SET) != 0 || write(fd, text, (size_t)len) != len)
    before = -1;
  close(fd); /* and the lock with it */
  return before;
}

int main(int argc, char **argv) {
  /* start-odd: the 2nd, 4th, ... copy to start ends before its first PVM
   * call, so that its pvm_spawn fails; the others wait as "wait". */
  if (argc > 2 && strcmp(argv[1], "start-odd") == 0 &&
      count_start(argv[2]) % 2 != 0)
    _exit(4);
  if (argc > 1 && strcmp(argv[1], "foreign") == 0)
    setenv("NXPVM_FOREIGN_FORMAT", "1", 1);
  if (pvm_mytid() < 0)
    return 2;
  int parent = pvm_parent();
  if (parent < 0 || argc < 2)
    return 2;
  int rc = 2;
  if (strcmp(argv[1], "echo") == 0)
    rc = echo(parent);
  else if (strcmp(argv[1], "foreign") == 0)
    rc = foreign(parent);
  else if (strcmp(argv[1], "die") == 0) {
    pvm_recv(parent, 1);
    _exit(3); /* no pvm_exit: the parent learns from nexus */
  } else if (strcmp(argv[1], "noexit") == 0) {
    /* A result, then the end of main without pvm_exit (a common slip):
     * the result still arrives. */
    int v = 7;
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&v, 1, 1);
    pvm_send(parent, 77);
    return 0;
  } else if (strcmp(argv[1], "wait") == 0 || strcmp(argv[1], "start-odd") == 0)
    pvm_recv(parent, 12345);
  else if (strcmp(argv[1], "order") == 0 && argc > 2)
    rc = order(parent, atoi(argv[2]));
  pvm_exit();
  return rc;
}
