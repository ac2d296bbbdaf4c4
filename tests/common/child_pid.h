/* The pid of a child of this process running a given program, read from
 * /proc (for a test that kills or watches the process a nexus call
 * started for it), whether a process has ended, and whether any child is
 * left. */
#ifndef NX_TEST_CHILD_PID_H
#define NX_TEST_CHILD_PID_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A living (not zombie) child whose command name is `comm` (at most 15
 * characters, as the kernel keeps it), or -1. */
static inline pid_t nxt_child_pid(const char *comm) {
  pid_t child = -1;
  DIR *dir = opendir("/proc");
  struct dirent *e;
  while (dir != NULL && child < 0 && (e = readdir(dir)) != NULL) {
    char path[288], name[64], state;
    int pid, ppid;
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue;
    if (fscanf(f, "%d (%63[^)]) %c %d", &pid, name, &state, &ppid) == 4 &&
        ppid == (int)getpid() && state != 'Z' && strcmp(name, comm) == 0)
      child = (pid_t)pid;
    fclose(f);
  }
  if (dir != NULL)
    closedir(dir);
  return child;
}

/* Whether process `pid` has ended: gone, or a zombie nobody has reaped
 * yet (its launcher's, say). */
static inline int nxt_pid_ended(long pid) {
  char path[64], stat[256];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 1;
  size_t n = fread(stat, 1, sizeof(stat) - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *paren = strrchr(stat, ')');
  return paren != NULL && paren[1] == ' ' && paren[2] == 'Z';
}

/* Whether no child of this process is left, running or unreaped, within
 * 10 s: nx_context_destroy asks a child to end and the creator's monitor
 * reaps it soon after. Looked at without reaping (WNOWAIT), so that the
 * monitor still reaps it. */
static inline int nxt_no_children(void) {
  for (int i = 0; i < 5000; i++) {
    siginfo_t si;
    errno = 0;
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1 &&
        errno == ECHILD)
      return 1;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

#endif /* NX_TEST_CHILD_PID_H */
