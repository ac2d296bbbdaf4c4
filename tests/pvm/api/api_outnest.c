/* pvm_catchout by a task whose own output is caught: the child catches
 * its own child's output on its stdout, which the parent catches. The
 * grandchild's lines come to the parent under both prefixes, in the order
 * written, between the child's lines written before its pvm_catchout and
 * after its pvm_exit (which waits for the grandchild's output, to its
 * EOF). The program prints what it caught with the tids named, and checks
 * it. */
#include "common.h"

/* What the parent catches, each tid's prefix named. */
static const char *const want[] = {"[child] BEGIN",
                                   "[child] before catchout",
                                   "[child] catchout: PvmOk",
                                   "[child] [grandchild] BEGIN",
                                   "[child] [grandchild] a line",
                                   "[child] [grandchild] one on stderr",
                                   "[child] [grandchild] EOF",
                                   "[child] exit: PvmOk",
                                   "[child] after pvm_exit",
                                   "[child] EOF"};
#define NWANT (int)(sizeof(want) / sizeof(want[0]))

/* LeakSanitizer's exit hook (sanitizer/lsan_interface.h), called at exit
 * in sanitizer builds only. The real PVM's libpvm3 keeps the record of
 * pvm_catchout's wait (wait_new, 80 bytes) in a task that catches, and the
 * child's stderr, where LSan would report it, is caught: the real PVM's
 * child skips the check. nexus-pvm's keeps it. */
static int no_leak_check;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return no_leak_check; }

/* The child: the grandchild's output comes to its stdout. It waits for
 * the grandchild's end before pvm_exit, so that what it says there is
 * the same under every PVM. */
static int child(void) {
#ifndef NEXUS_PVM
  no_leak_check = 1;
#endif
  printf("before catchout\n");
  if (!said("catchout", pvm_catchout(stdout), PvmOk))
    return 1;
  int g;
  if (spawn_self("grandchild", 1, &g) != 1)
    return 1;
  pvm_notify(PvmTaskExit, 2, 1, &g);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&g, 1, 1);
  pvm_send(pvm_parent(), 1);
  if (recv_for(-1, 2) <= 0)
    return 1;
  said("exit", pvm_exit(), PvmOk);
  printf("after pvm_exit\n");
  return 0;
}

/* Replaces `tid`'s prefix at the start of *s by `name`'s, moving *s. */
static void name_tid(char **s, char *out, size_t cap, int tid,
                     const char *name) {
  char prefix[32];
  snprintf(prefix, sizeof(prefix), "[t%x] ", (unsigned)tid);
  size_t n = strlen(prefix);
  if (strncmp(*s, prefix, n) != 0)
    return;
  size_t len = strlen(out);
  snprintf(out + len, cap - len, "[%s] ", name);
  *s += n;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
  if (argc > 1 && strcmp(argv[1], "grandchild") == 0) {
    printf("a line\n");
    fprintf(stderr, "one on stderr\n");
    pvm_exit();
    return 0;
  }
  FILE *caught = tmpfile();
  NXT_EXPECT(caught != NULL, 1);
  NXT_EXPECT(said("catchout", pvm_catchout(caught), PvmOk), 1);
  int c, g = 0;
  NXT_EXPECT(spawn_self("child", 1, &c) == 1, 1);
  NXT_EXPECT(recv_for(c, 1) > 0, 1);
  pvm_upkint(&g, 1, 1);
  pvm_exit(); /* waits for the child's output, as PVM's does */

  char line[256];
  int n = 0;
  rewind(caught);
  while (fgets(line, sizeof(line), caught) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    char named[320] = "", *s = line;
    name_tid(&s, named, sizeof(named), c, "child");
    name_tid(&s, named, sizeof(named), g, "grandchild");
    strncat(named, s, sizeof(named) - strlen(named) - 1);
    printf("%s\n", named);
    NXT_EXPECT(n < NWANT && strcmp(named, want[n]) == 0, 1);
    n++;
  }
  NXT_EXPECT(n == NWANT, 1);
  fclose(caught);
  printf("done\n");
  return 0;
}
