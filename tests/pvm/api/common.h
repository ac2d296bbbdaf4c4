/* What the API programs share: error names, a spawn of this program as a
 * child, a bounded receive, and checks. Each program prints what the calls
 * return, so its output is the same under the real PVM 3.4 and nexus-pvm
 * exactly when they behave the same; each also checks what PVM 3.4's
 * manual promises (NXT_EXPECT, tests/common/expect.h), so it fails by
 * itself, whichever PVM it is built against, when a call answers wrong. */
#ifndef NXPVM_API_COMMON_H
#define NXPVM_API_COMMON_H

#include <limits.h>
#include <stdio.h> /* before pvm3.h: PVM's declares pvm_catchout with FILE */

#include <pvm3.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "../../common/expect.h"

static inline const char *code(int rc) {
  static char buf[32];
  switch (rc) {
  case PvmOk: return "PvmOk";
  case PvmBadParam: return "PvmBadParam";
  case PvmMismatch: return "PvmMismatch";
  case PvmNoData: return "PvmNoData";
  case PvmNoHost: return "PvmNoHost";
  case PvmNoFile: return "PvmNoFile";
  case PvmDenied: return "PvmDenied";
  case PvmNoMem: return "PvmNoMem";
  case PvmBadMsg: return "PvmBadMsg";
  case PvmSysErr: return "PvmSysErr";
  case PvmNoBuf: return "PvmNoBuf";
  case PvmNoSuchBuf: return "PvmNoSuchBuf";
  case PvmNullGroup: return "PvmNullGroup";
  case PvmDupGroup: return "PvmDupGroup";
  case PvmNoGroup: return "PvmNoGroup";
  case PvmNotInGroup: return "PvmNotInGroup";
  case PvmNoInst: return "PvmNoInst";
  case PvmNoParent: return "PvmNoParent";
  case PvmNotImpl: return "PvmNotImpl";
  case PvmOutOfRes: return "PvmOutOfRes";
  case PvmDupHost: return "PvmDupHost";
  case PvmCantStart: return "PvmCantStart";
  case PvmAlready: return "PvmAlready";
  case PvmNoTask: return "PvmNoTask";
  case PvmNotFound: return "PvmNotFound";
  case PvmExists: return "PvmExists";
  default: snprintf(buf, sizeof(buf), "%s%d", rc < 0 ? "error " : "", rc);
  }
  return buf;
}

/* Prints "what: <rc's name>" and says whether rc is `want` (on stderr when
 * it is not): NXT_EXPECT(said("put", rc, PvmOk), 1). */
static inline int said(const char *what, int rc, int want) {
  printf("%s: %s\n", what, code(rc));
  if (rc == want)
    return 1;
  fprintf(stderr, "%s: got %s, ", what, code(rc));
  fprintf(stderr, "expected %s\n", code(want));
  return 0;
}

/* A program's start: stdout line-buffered (a parent and its children
 * print in the order they wrote), the task's tid (negative: no PVM here,
 * the caller skips with 77), and errors returned, not printed (the
 * program prints what each call returns). */
static inline int task_start(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int me = pvm_mytid();
  if (me >= 0)
    pvm_setopt(PvmAutoErr, 0);
  return me;
}

/* Spawns `n` copies of this program with `arg` as argv[1]. */
static inline int spawn_self(const char *arg, int n, int *tids) {
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0)
    return -1;
  self[len] = '\0';
  char *argv[] = {(char *)arg, NULL};
  return pvm_spawn(self, argv, PvmTaskDefault, "", n, tids);
}

/* A receive that gives up after 20 s (0 then), so no run hangs. */
static inline int recv_for(int tid, int tag) {
  struct timeval tv = {20, 0};
  return pvm_trecv(tid, tag, &tv);
}

#endif
