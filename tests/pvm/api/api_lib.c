/* What libpvm3 exports beside pvm3.h and programs written for it use (PVM's
 * own examples among them): pvm_errno, pvm_errlist and pvm_nerr, lpvmerr,
 * pvm_perror's texts, pvmsleep, pvmgetclock, and message handler ids as
 * pvm_addmhf gives them (deleted ids are given again, last freed first;
 * handlers that could match one message are refused). pvm3.h declares none
 * of these: programs declare them, as here. */
#include "common.h"

extern int pvm_errno;
extern int pvm_nerr;
extern char *pvm_errlist[];
int lpvmerr(char *f, int n);
int pvmsleep(int secs);
int pvmgetclock(struct timeval *tm);

static int nop(int mid) {
  (void)mid;
  return 0;
}

int main(void) {
  int me = pvm_mytid();
  NXT_EXPECT(me > 0, 1);
  pvm_setopt(PvmAutoErr, 0); /* the texts go to stdout below */

  printf("pvm_nerr: %d\n", pvm_nerr);
  NXT_EXPECT(pvm_nerr == 37, 1);
  for (int i = 0; i < pvm_nerr; i++)
    printf("pvm_errlist[%d]: %s\n", i, pvm_errlist[i]);

  /* lpvmerr records its code in pvm_errno and returns it. */
  int rc = lpvmerr("api_lib", PvmNoTask);
  printf("lpvmerr: %s, pvm_errno %s\n", code(rc), code(pvm_errno));
  NXT_EXPECT(rc == PvmNoTask && pvm_errno == PvmNoTask, 1);
  /* A failing call sets pvm_errno too. */
  rc = pvm_getinst("no such group", me);
  printf("pvm_getinst: %s, pvm_errno %s\n", code(rc), code(pvm_errno));
  NXT_EXPECT(rc < 0 && pvm_errno == rc, 1);

  printf("pvmsleep(0): %d\n", pvmsleep(0));
  struct timeval tv = {0, 0};
  rc = pvmgetclock(&tv);
  printf("pvmgetclock: %d, set %s\n", rc, tv.tv_sec > 0 ? "yes" : "no");
  NXT_EXPECT(rc == 0 && tv.tv_sec > 0, 1);

  /* Handler ids: printed relative to the first (libpvm installs handlers
   * of its own before the program's). */
  int a = pvm_addmhf(-1, 71, PvmBaseContext, nop);
  int b = pvm_addmhf(-1, 72, PvmBaseContext, nop);
  int c = pvm_addmhf(-1, 73, PvmBaseContext, nop);
  printf("addmhf: %d %d %d\n", a - a, b - a, c - a);
  NXT_EXPECT(a >= 0 && b == a + 1 && c == a + 2, 1);
  NXT_EXPECT(said("addmhf overlapping", pvm_addmhf(me, 72, -1, nop), PvmExists),
             1);
  NXT_EXPECT(said("addmhf any tag", pvm_addmhf(me, -1, PvmBaseContext, nop),
                  PvmExists),
             1);
  NXT_EXPECT(said("delmhf b", pvm_delmhf(b), PvmOk), 1);
  NXT_EXPECT(said("delmhf a", pvm_delmhf(a), PvmOk), 1);
  int d = pvm_addmhf(-1, 74, PvmBaseContext, nop);
  int e = pvm_addmhf(-1, 75, PvmBaseContext, nop);
  int f = pvm_addmhf(-1, 76, PvmBaseContext, nop);
  printf("addmhf after two deletes: %d %d %d\n", d - a, e - a, f - a);
  NXT_EXPECT(d == a && e == b && f == c + 1, 1);
  NXT_EXPECT(said("delmhf past the last id", pvm_delmhf(f + 100), PvmNotFound),
             1);
  NXT_EXPECT(said("delmhf c twice", pvm_delmhf(c), PvmOk), 1);
  NXT_EXPECT(said("delmhf c again", pvm_delmhf(c), PvmNotFound), 1);
  for (int h = a; h <= f; h++)
    if (h != c)
      NXT_EXPECT(pvm_delmhf(h) == PvmOk, 1);

  pvm_exit();
  return 0;
}
