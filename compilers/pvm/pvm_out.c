/* A spawned task's stdout and stderr. With pvm_catchout: sent line by
 * line to the task that caught them, which writes each line with PVM's
 * prefix ("[t<tid>] ", with a BEGIN and an EOF line per task) or, with
 * PvmShowTids 0, as it came. Without: written to the task log, as PVM's
 * pvmd writes its tasks' output to its log, $PVM_TMP/pvml.<uid>. Either
 * way a thread of the task's own reads a pipe its descriptors 1 and 2
 * point to from its first PVM call; tasks it spawns send theirs to the
 * same tid unless it calls pvm_catchout itself. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

enum out_kind { O_BEGIN = 1, O_LINE, O_END };

static int out_fd = -1, saved_out = -1, saved_err = -1;
static int log_fd = -1; /* the task log, when the output goes there */
static int log_tid;     /* the tid its lines carry (set before the reader) */
static nx_thread_t out_thread;
static int out_running;
static atomic_int out_done;  /* out_main sent its EOF */
static atomic_uint out_sent; /* lines (and BEGIN) sent: its progress */

/* The tid a task spawned now sends its output to (0: none). */
int nxpvmi_out_tid(void) {
  nx_mutex_lock(&nxpvm.m);
  int tid = nxpvm.catch_ff != NULL ? nxpvm.mytid : nxpvm.out_tid;
  nx_mutex_unlock(&nxpvm.m);
  return tid;
}

/* One line to the task log, in one writev (the log is opened to append,
 * so the lines of tasks writing at once do not mix): the time as PVM's
 * pvmd writes it, the task and the line. */
static void log_line(const char *s, size_t n) {
  char head[64];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  int h = snprintf(head, sizeof(head), "%02d/%02d %02d:%02d:%02d [t%x] ",
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (unsigned)log_tid);
  struct iovec v[3] = {{head, (size_t)h}, {(void *)s, n}, {"\n", 1}};
  ssize_t w = writev(log_fd, v, 3);
  (void)w; /* a full disk loses the line, as it would PVM's */
}

static void out_send(int kind, const char *s, size_t n) {
  if (log_fd >= 0) {
    if (kind == O_LINE)
      log_line(s, n);
    atomic_fetch_add(&out_sent, 1);
    return;
  }
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *b;
  /* The catching task may have left PVM: it waits for us, and prints. */
  if (nxpvmi_resolve_process(nxpvm.out_tid, &gp) < 0)
    return;
  if (nxpvmi_rsr(nxpvm.out_tid, &gp, H_OUT, n + 16, &b) == 0) {
    int rc = nx_put_int32(b, kind);
    if (rc == 0)
      rc = nx_put_uint32(b, (uint32_t)n);
    if (rc == 0 && n > 0)
      rc = nx_put_char_array(b, s, n);
    if (rc == 0)
      nxpvmi_send(b);
    else
      nx_buffer_release(b);
  }
  nx_gp_release(&gp);
  atomic_fetch_add(&out_sent, 1);
}

/* Reads the pipe until every writer has closed it, sending each line. */
static void *out_main(void *arg) {
  (void)arg;
  char *line = NULL;
  size_t len = 0, cap = 0;
  char buf[4096];
  out_send(O_BEGIN, NULL, 0);
  for (;;) {
    ssize_t r = read(out_fd, buf, sizeof(buf));
    if (r <= 0)
      break;
    for (ssize_t i = 0; i < r; i++) {
      if (buf[i] == '\n') {
        out_send(O_LINE, line, len);
        len = 0;
        continue;
      }
      if (len == cap) {
        size_t c = cap ? 2 * cap : 256;
        char *l = realloc(line, c);
        if (l == NULL)
          continue; /* the character is lost, not the line */
        line = l;
        cap = c;
      }
      line[len++] = buf[i];
    }
  }
  if (len > 0)
    out_send(O_LINE, line, len);
  out_send(O_END, NULL, 0);
  free(line);
  atomic_store(&out_done, 1);
  return NULL;
}

static int out_start(int tid);

/* Sends this task's stdout and stderr to `tid` from now on. */
int nxpvmi_out_start(int tid) {
  if (tid <= 0)
    return PvmSysErr;
  return out_start(tid);
}

/* Writes this task's stdout and stderr to the task log from now on:
 * $PVM_TMP/pvml.<uid> ($PVM_TMP: /tmp when not set), where PVM's pvmd
 * writes them. When it cannot be opened, the output stays where it is. */
int nxpvmi_out_start_log(void) {
  const char *dir = getenv("PVM_TMP");
  char path[1024];
  snprintf(path, sizeof(path), "%s/pvml.%u",
           dir != NULL && dir[0] != '\0' ? dir : "/tmp", (unsigned)getuid());
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return PvmSysErr;
  log_fd = fd;
  log_tid = nxpvm.mytid;
  int rc = out_start(0);
  if (rc < 0) {
    close(log_fd);
    log_fd = -1;
  }
  return rc;
}

/* Points descriptors 1 and 2 at a pipe whose reader thread sends each line
 * to `tid` (0: writes it to the task log). */
static int out_start(int tid) {
  int fds[2];
  if (out_running || pipe(fds) < 0)
    return PvmSysErr;
  fflush(stdout);
  fflush(stderr);
  /* What descriptors 1 and 2 become again when the task leaves PVM: what
   * they were, or, for a task whose output goes to the log, the log
   * itself (without the prefix). Not the spawner's pipe, which they
   * inherited: a copy kept here would hold the spawner's pipe open, and
   * its pvm_exit would wait for this task's. */
  saved_out = dup(tid > 0 ? 1 : log_fd);
  saved_err = dup(tid > 0 ? 2 : log_fd);
  if (saved_out < 0 || saved_err < 0 || dup2(fds[1], 1) < 0 ||
      dup2(fds[1], 2) < 0) {
    close(fds[0]);
    close(fds[1]);
    return PvmSysErr;
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(saved_out, F_SETFD, FD_CLOEXEC);
  fcntl(saved_err, F_SETFD, FD_CLOEXEC);
  /* Line by line, as on a terminal, so lines go out as they are written. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  out_fd = fds[0];
  nxpvm.out_tid = tid;
  atomic_store(&out_done, 0);
  if (nx_thread_create(&out_thread, out_main, NULL) != 0) {
    nxpvmi_out_stop();
    return PvmSysErr;
  }
  out_running = 1;
  return PvmOk;
}

/* Puts stdout and stderr back, which closes the pipe's last write ends
 * (but those of processes this task started that still hold it), and
 * waits until the last line has been sent: for ever (ms < 0: pvm_exit,
 * whose goodbyes the lines must precede, after its children ended), or
 * until the reader has sent nothing for `ms` (at exit without pvm_exit,
 * when children that still run may hold the pipe open). A reader that is
 * still sending lines is waited for (on a loaded machine 200 lines may
 * take seconds), up to 30 times `ms` in all: a process this task started
 * that holds the pipe and never stops writing does not keep it alive. */
static void out_finish(int ms) {
  if (out_fd < 0)
    return;
  fflush(stdout);
  fflush(stderr);
  if (saved_out >= 0) { /* not after an earlier out_finish that timed out */
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    saved_out = saved_err = -1;
  }
  unsigned sent = atomic_load(&out_sent);
  for (int idle = 0, all = 0;
       ms >= 0 && out_running && !atomic_load(&out_done) && idle < ms &&
       all < 30 * ms;
       idle++, all++) {
    usleep(1000);
    unsigned now = atomic_load(&out_sent);
    if (now != sent) { /* still sending: the quiet time starts again */
      sent = now;
      idle = 0;
    }
  }
  if (out_running && (ms < 0 || atomic_load(&out_done))) {
    nx_thread_join(out_thread, NULL);
    out_running = 0;
  }
  if (out_running)
    return; /* still reading: the process ends with it */
  close(out_fd);
  out_fd = -1;
  if (log_fd >= 0) {
    close(log_fd);
    log_fd = -1;
  }
}

/* pvm_exit. Caught output: every line, however long the reader takes (a
 * process this task started may still hold the pipe). The log: as at
 * exit, since what reads the lines is this process's own thread. */
void nxpvmi_out_stop(void) { out_finish(log_fd >= 0 ? 2000 : -1); }

/* A task that ends without pvm_exit: its last lines and its EOF still go
 * to the catching task (flush_at_exit, before the RSRs are confirmed). */
void nxpvmi_out_stop_at_exit(void) { out_finish(2000); }

/* "nxpvm.out": a line (or BEGIN, END) of a task whose output this one
 * caught. */
void nxpvmi_on_out(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int from;
  int32_t kind;
  uint32_t n;
  if (nxpvmi_origin(buf, &from) < 0 || nx_get_int32(buf, &kind) < 0 ||
      nx_get_uint32(buf, &n) < 0 || n > nx_buffer_remaining(buf))
    return;
  char *s = malloc((size_t)n + 1);
  if (s == NULL || (n > 0 && nx_get_char_array(buf, s, n) < 0)) {
    free(s);
    return;
  }
  s[n] = '\0';
  nx_mutex_lock(&nxpvm.m);
  FILE *ff = nxpvm.catch_ff != NULL ? nxpvm.catch_ff : stdout;
  int tids = nxpvm.showtids;
  nx_mutex_unlock(&nxpvm.m);
  if (tids && kind == O_BEGIN)
    fprintf(ff, "[t%x] BEGIN\n", (unsigned)from);
  else if (tids && kind == O_END)
    fprintf(ff, "[t%x] EOF\n", (unsigned)from);
  else if (kind == O_LINE && tids)
    fprintf(ff, "[t%x] %s\n", (unsigned)from, s);
  else if (kind == O_LINE)
    fprintf(ff, "%s\n", s);
  fflush(ff);
  free(s);
}

/* Output of tasks spawned from now on comes to `ff` (NULL: no more). */
int pvm_catchout(FILE *ff) {
  if (!nxpvm.started) {
    nxpvm.catch_ff = ff;
    return PvmOk;
  }
  nx_mutex_lock(&nxpvm.m); /* handlers read it */
  nxpvm.catch_ff = ff;
  nx_mutex_unlock(&nxpvm.m);
  return PvmOk;
}
