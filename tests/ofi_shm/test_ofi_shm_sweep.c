/* A process that used ofi and was killed leaves libfabric shm's 16 MiB region
 * and the module's wake page in /dev/shm; the next process that starts the
 * ofi module removes them (issue 16). A real child is killed with SIGKILL.
 * Exit 77 (skip) when the ofi module or its shm rail does not start here. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nexus.h"

/* How many /dev/shm entries belong to process `pid`: its shm regions
 * "<pid>:n:n" and its wake pages "nx-ofi-<ns>-<pid>-<uuid>". */
static int leftovers(pid_t pid) {
  char region[32], page[32];
  snprintf(region, sizeof(region), "%d:", (int)pid);
  snprintf(page, sizeof(page), "-%d-", (int)pid);
  DIR *d = opendir("/dev/shm");
  if (d == NULL)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, region, strlen(region)) == 0 ||
        (strncmp(e->d_name, "nx-ofi-", 7) == 0 &&
         strstr(e->d_name, page) != NULL))
      n++;
  closedir(d);
  return n;
}

static int ofi_loaded(void) {
  int n = nx_module_count();
  for (int i = 0; i < n; i++) {
    nx_module_info_t m;
    if (nx_module_info(i, &m) == 0 && strcmp(m.name, "ofi") == 0)
      return m.loaded;
  }
  return 0;
}

int main(void) {
  setenv("NX_PROTOCOLS", "ofi,local", 1);
  int p[2];
  if (pipe(p) < 0)
    return 1;
  pid_t pid = fork();
  if (pid < 0)
    return 1;
  if (pid == 0) {
    char ok = nx_init(NULL, NULL) == 0 && ofi_loaded() ? 'y' : 'n';
    if (write(p[1], &ok, 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  char ok = 'n';
  if (read(p[0], &ok, 1) != 1)
    ok = 'n';
  int before = leftovers(pid);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  if (ok != 'y' || before == 0) {
    printf("SKIP: the ofi module or its shm rail does not start here (%s)\n",
           ok != 'y' ? "ofi not loaded" : "no /dev/shm region");
    return 77;
  }
  int killed = leftovers(pid);
  printf("killed process %d left %d file(s) in /dev/shm\n", (int)pid, killed);
  if (killed == 0) {
    printf("FAIL: nothing left behind to clean: the test proves nothing\n");
    return 1;
  }
  if (nx_init(NULL, NULL) != 0 || !ofi_loaded()) {
    printf("FAIL: ofi did not start in the second process\n");
    return 1;
  }
  int after = leftovers(pid);
  nx_finalize();
  printf("after the next process started ofi: %d\n", after);
  if (after != 0) {
    printf("FAIL: the dead process's files are still in /dev/shm\n");
    return 1;
  }
  /* Our own files are not swept while we live, and go at finalize. */
  return leftovers(getpid()) == 0 ? 0 : 1;
}
