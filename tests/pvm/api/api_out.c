/* pvm_catchout: a spawned task's output comes to the spawner's file, each
 * line with PVM's "[t<tid>]" prefix between a BEGIN and an END line. The
 * program catches it in a file of its own, checks it, then prints it (the
 * test runner numbers the tids, which differ from run to run). */
#include <stdlib.h>

#include "common.h"

/* The lines the child's output must come as, after its prefix. */
static const char *const want[] = {"BEGIN", "a line from the child",
                                   "and another, 42", "one on stderr", "EOF"};
#define NWANT (int)(sizeof(want) / sizeof(want[0]))

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
  FILE *caught = tmpfile();
  NXT_EXPECT(caught != NULL, 1);
  NXT_EXPECT(said("catchout", pvm_catchout(caught), PvmOk), 1);
  int showtids = pvm_getopt(PvmShowTids);
  printf("showtids: %d\n", showtids);
  NXT_EXPECT(showtids == 1, 1);
  int tid;
  if (spawn_self("child", 1, &tid) != 1)
    return 1;
  pvm_exit(); /* waits for the child's output, as PVM's does */

  /* Each line is the child's, under its tid, in the order written. */
  char prefix[32], line[256];
  snprintf(prefix, sizeof(prefix), "[t%x] ", (unsigned)tid);
  size_t np = strlen(prefix);
  rewind(caught);
  int n = 0;
  while (fgets(line, sizeof(line), caught) != NULL) {
    fputs(line, stdout);
    line[strcspn(line, "\n")] = '\0';
    NXT_EXPECT(n < NWANT, 1);
    NXT_EXPECT(strncmp(line, prefix, np) == 0, 1);
    NXT_EXPECT(strcmp(line + np, want[n]) == 0, 1);
    n++;
  }
  NXT_EXPECT(n == NWANT, 1);
  fclose(caught);
  printf("done\n");
  return 0;
}
