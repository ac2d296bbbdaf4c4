/* pvm_catchout: a spawned task's output comes to the spawner's file, each
 * line with PVM's "[t<tid>]" prefix between a BEGIN and an END line. The
 * program catches it in a file of its own, checks it, then prints it (the
 * test runner numbers the tids, which differ from run to run). A second
 * child writes NOEXIT lines and returns from main without pvm_exit (a
 * common slip): its lines and its EOF come all the same. The two
 * children's lines may interleave, so the second's are counted, not
 * printed. */
#include <stdlib.h>

#include "common.h"

/* The lines the child's output must come as, after its prefix. */
static const char *const want[] = {"BEGIN", "a line from the child",
                                   "and another, 42", "one on stderr", "EOF"};
#define NWANT (int)(sizeof(want) / sizeof(want[0]))
#define NOEXIT 200

/* LeakSanitizer's exit hook (sanitizer/lsan_interface.h), called at exit
 * in sanitizer builds only: the child that ends without pvm_exit skips
 * the leak check. Its nexus runtime is still up then, and over ucx LSan
 * reports UCX's worker memory (libucs, libuct) as leaked; the report is
 * on the task's stderr, which pvm_catchout catches to the task's end, and
 * is no output of the program's. (It came before too, unseen: the task's
 * stderr was put back to the spawner's before exit.) Every other process
 * keeps the check. */
static int no_leak_check;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return no_leak_check; }

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    printf("a line from the child\n");
    printf("and another, %d\n", 42);
    fprintf(stderr, "one on stderr\n");
    pvm_exit();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "noexit") == 0) {
    no_leak_check = 1;
    for (int i = 0; i < NOEXIT; i++)
      printf("line %d\n", i);
    fprintf(stderr, "the last, on stderr\n");
    return 0;
  }
  FILE *caught = tmpfile();
  NXT_EXPECT(caught != NULL, 1);
  NXT_EXPECT(said("catchout", pvm_catchout(caught), PvmOk), 1);
  int showtids = pvm_getopt(PvmShowTids);
  printf("showtids: %d\n", showtids);
  NXT_EXPECT(showtids == 1, 1);
  int tid, tid2;
  if (spawn_self("child", 1, &tid) != 1 || spawn_self("noexit", 1, &tid2) != 1)
    return 1;
  pvm_exit(); /* waits for the children's output, as PVM's does */

  /* Each line is a child's, under its tid, in the order written. */
  char prefix[32], prefix2[32], line[256], expect2[64];
  snprintf(prefix, sizeof(prefix), "[t%x] ", (unsigned)tid);
  snprintf(prefix2, sizeof(prefix2), "[t%x] ", (unsigned)tid2);
  size_t np = strlen(prefix), np2 = strlen(prefix2);
  rewind(caught);
  int n = 0, n2 = 0;
  while (fgets(line, sizeof(line), caught) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, prefix2, np2) == 0) {
      /* BEGIN, line 0 ... line NOEXIT-1, the stderr line, EOF. */
      if (n2 == 0)
        snprintf(expect2, sizeof(expect2), "BEGIN");
      else if (n2 <= NOEXIT)
        snprintf(expect2, sizeof(expect2), "line %d", n2 - 1);
      else if (n2 == NOEXIT + 1)
        snprintf(expect2, sizeof(expect2), "the last, on stderr");
      else
        snprintf(expect2, sizeof(expect2), "EOF");
      NXT_EXPECT(n2 <= NOEXIT + 2, 1);
      NXT_EXPECT(strcmp(line + np2, expect2) == 0, 1);
      n2++;
      continue;
    }
    printf("%s\n", line);
    NXT_EXPECT(n < NWANT, 1);
    NXT_EXPECT(strncmp(line, prefix, np) == 0, 1);
    NXT_EXPECT(strcmp(line + np, want[n]) == 0, 1);
    n++;
  }
  NXT_EXPECT(n == NWANT, 1);
  printf("the child without pvm_exit: %d lines, BEGIN to EOF\n", n2);
  NXT_EXPECT(n2 == NOEXIT + 3, 1);
  fclose(caught);
  printf("done\n");
  return 0;
}
