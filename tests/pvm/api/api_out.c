/* pvm_catchout: a spawned task's output comes to the spawner's file, each
 * line with PVM's "[t<tid>]" prefix between a BEGIN and an END line (the
 * test runner numbers the tids, which differ from run to run). */
#include "common.h"

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (pvm_mytid() < 0)
    return 77;
  pvm_setopt(PvmAutoErr, 0);
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    printf("a line from the child\n");
    printf("and another, %d\n", 42);
    fprintf(stderr, "one on stderr\n");
    pvm_exit();
    return 0;
  }
  printf("catchout: %s\n", code(pvm_catchout(stdout)));
  printf("showtids: %d\n", pvm_getopt(PvmShowTids));
  int tid;
  if (spawn_self("child", 1, &tid) != 1)
    return 1;
  pvm_exit(); /* waits for the child's output, as PVM's does */
  printf("done\n");
  return 0;
}
