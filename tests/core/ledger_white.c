/* White-box test of the ledger (nexus/src/services/ledger.c), linked with
 * the core's static twin: RSRs to other processes are entered, settled by
 * the counts their peers answer, voided, fenced and reported, and the
 * entries still unconfirmed are counted after each step. No RSR is sent:
 * the buffers only carry what the ledger reads (destination, handler). The
 * cases cover the ledger's shortcut (a count settles the oldest entries at
 * once while every entry is open and of the latest generation) and its
 * walk (entries voided, or of a failed route's generation, among them).
 * Exit 0 when every check holds, 1 otherwise (each failure printed). */
#include <stdio.h>
#include <stdlib.h>

#include "buffers/buf.h"
#include "nexus.h"
#include "services/ledger.h"

static int failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

#define CHECK_PENDING(proc, n)                                                 \
  do {                                                                         \
    unsigned long long got_ = nxi_ledger_pending_of(proc);                     \
    if (got_ != (n)) {                                                         \
      fprintf(stderr, "%s:%d: process %#x: %llu unconfirmed, expected %llu\n", \
              __FILE__, __LINE__, (unsigned)(proc), got_,                      \
              (unsigned long long)(n));                                        \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* What the error callback heard. */
#define MAX_REPORTS 64
struct report {
  int err;
  uint64_t context;
  uint32_t handler;
};
static struct report reports[MAX_REPORTS];
static int nreports;

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (nreports < MAX_REPORTS)
    reports[nreports] = (struct report){err, context, handler};
  nreports++;
}

/* The process ids the cases talk to: none is this process's. */
static uint32_t proc_base;
static uint32_t peer(unsigned k) { return proc_base + k; }

/* `n` RSRs for process `proc` (handlers 100, 101, ...), entered on routes
 * of generation `gen`. Returns the buffers. */
static struct nx_buffer **enter(uint32_t proc, unsigned gen, int n,
                                uint32_t first_handler) {
  struct nx_buffer **b = calloc((size_t)n, sizeof(*b));
  for (int i = 0; i < n; i++) {
    b[i] = calloc(1, sizeof(struct nx_buffer));
    b[i]->context = nxi_ctxid(proc, 1);
    b[i]->handler = first_handler + (uint32_t)i;
    CHECK(nxi_ledger_note(b[i], gen) == 0);
    CHECK(b[i]->peer != NULL);
  }
  return b;
}

/* Checks that the entries of generation `gen` still open for `proc` are
 * those of `want` (handlers, oldest first, `n` of them), by making the
 * ledger report them: the route of `gen` failed, and its fence's answer
 * confirmed nothing more. They leave the ledger. */
static void check_open(int line, uint32_t proc, unsigned gen,
                       const uint32_t *want, int n) {
  int before = nreports;
  nxi_ledger_rerouted(proc, gen, NX_EPEERDEAD);
  nxi_ledger_fenced(proc, 1u << gen);
  int got = nreports - before;
  int same = got == n;
  for (int i = 0; same && i < n && before + i < MAX_REPORTS; i++)
    same = reports[before + i].handler == want[i] &&
           reports[before + i].context == nxi_ctxid(proc, 1);
  if (!same) {
    fprintf(stderr,
            "%s:%d: process %#x generation %u: %d entries open:", __FILE__,
            line, (unsigned)proc, gen, got);
    for (int i = 0; i < got && before + i < MAX_REPORTS; i++)
      fprintf(stderr, " %u", (unsigned)reports[before + i].handler);
    fprintf(stderr, " (expected %d)\n", n);
    failures++;
  }
}
#define CHECK_OPEN(proc, gen, ...)                                             \
  do {                                                                         \
    const uint32_t want_[] = {__VA_ARGS__};                                    \
    check_open(__LINE__, proc, gen, want_, sizeof(want_) / sizeof(*want_));    \
  } while (0)

static void release(struct nx_buffer **b, int n) {
  for (int i = 0; i < n; i++)
    free(b[i]);
  free(b);
}

/* Counts are cumulative: each settles the oldest entries it covers. */
static void counts_settle_the_oldest(void) {
  uint32_t p = peer(1);
  struct nx_buffer **b = enter(p, 0, 10, 100);
  CHECK_PENDING(p, 10);
  nxi_ledger_confirm(p, 0, 4);
  CHECK_PENDING(p, 6);
  nxi_ledger_confirm(p, 0, 4); /* the same count again: nothing more */
  CHECK_PENDING(p, 6);
  nxi_ledger_confirm(p, 1, 9); /* another generation's: none of these */
  CHECK_PENDING(p, 6);
  nxi_ledger_confirm(p, 0, 12); /* more than were sent: all of them */
  CHECK_PENDING(p, 0);
  struct nx_buffer **c = enter(p, 0, 3, 200);
  CHECK_PENDING(p, 3);
  nxi_ledger_confirm(p, 0, 11); /* 10 settled before: one of these */
  CHECK_PENDING(p, 2);
  CHECK_OPEN(p, 0, 201, 202);
  CHECK_PENDING(p, 0);
  release(b, 10);
  release(c, 3);
}

/* A voided entry (its send failed) is not in the peer's count. */
static void voided_entries_are_not_counted(void) {
  uint32_t p = peer(2);
  struct nx_buffer **b = enter(p, 0, 5, 100);
  CHECK(nxi_ledger_void(b[1]) == 1); /* open: the caller reports it */
  CHECK_PENDING(p, 4);
  nxi_ledger_confirm(p, 0, 3); /* b0, b2, b3 */
  CHECK_PENDING(p, 1);
  CHECK_OPEN(p, 0, 104);
  CHECK_PENDING(p, 0);
  release(b, 5);
}

/* A count that settled an entry whose send then failed covered the next
 * open one of its generation instead. */
static void void_after_settled(void) {
  uint32_t p = peer(3);
  struct nx_buffer **b = enter(p, 0, 3, 100);
  nxi_ledger_confirm(p, 0, 2); /* b0 and b1, by their place */
  CHECK_PENDING(p, 1);
  CHECK(nxi_ledger_void(b[0]) == 1); /* b0 never arrived: b2 did */
  CHECK_PENDING(p, 0);
  release(b, 3);
}

/* Two generations: each count settles its own generation's entries,
 * stepping over the other's, in either order. */
static void generations_apart(void) {
  uint32_t p = peer(4);
  struct nx_buffer **old = enter(p, 0, 2, 100);
  struct nx_buffer **cur = enter(p, 1, 3, 200);
  CHECK_PENDING(p, 5);
  nxi_ledger_confirm(p, 1, 2);
  CHECK_PENDING(p, 3);
  nxi_ledger_confirm(p, 0, 1);
  CHECK_PENDING(p, 2);
  struct nx_buffer **more = enter(p, 1, 1, 300);
  CHECK_PENDING(p, 3);
  nxi_ledger_confirm(p, 1, 4);
  CHECK_PENDING(p, 1);
  CHECK_OPEN(p, 0, 101);
  CHECK_PENDING(p, 0);
  struct nx_buffer **again = enter(p, 1, 2, 400);
  nxi_ledger_confirm(p, 1, 5);
  CHECK_PENDING(p, 1);
  CHECK_OPEN(p, 1, 401);
  CHECK_PENDING(p, 0);
  release(old, 2);
  release(cur, 3);
  release(more, 1);
  release(again, 2);
}

/* A failed route's entries, fenced: what the fence's answer does not
 * confirm is reported, one RSR at a time, naming its context and handler;
 * the new route's entries then settle as before. */
static void fenced_generation_reported(void) {
  uint32_t p = peer(5);
  struct nx_buffer **old = enter(p, 0, 3, 100);
  nxi_ledger_rerouted(p, 0, NX_EPEERDEAD);
  struct nx_buffer **cur = enter(p, 1, 2, 200);
  nxi_ledger_confirm(p, 0, 1); /* the fence's answer: old[0] arrived */
  int before = nreports;
  nxi_ledger_fenced(p, 1u << 0);
  CHECK(nreports - before == 2);
  for (int i = 0; i < 2 && before + i < MAX_REPORTS; i++) {
    CHECK(reports[before + i].err == NX_EPEERDEAD);
    CHECK(reports[before + i].context == nxi_ctxid(p, 1));
    CHECK(reports[before + i].handler == 101u + (uint32_t)i);
  }
  CHECK_PENDING(p, 2);
  nxi_ledger_confirm(p, 1, 1);
  CHECK_PENDING(p, 1);
  nxi_ledger_confirm(p, 1, 2);
  CHECK_PENDING(p, 0);
  release(old, 3);
  release(cur, 2);
}

/* A question is due once a window of RSRs gathered since the last. */
static void asks_once_a_window(void) {
  uint32_t p = peer(6);
  struct nx_buffer *b[2 * NXI_LEDGER_WINDOW];
  int asks = 0, asked_at = -1;
  for (unsigned i = 0; i < 2 * NXI_LEDGER_WINDOW; i++) {
    b[i] = calloc(1, sizeof(struct nx_buffer));
    b[i]->context = nxi_ctxid(p, 1);
    b[i]->handler = 100;
    if (nxi_ledger_note(b[i], 0) == 1) {
      asks++;
      asked_at = (int)i;
      nxi_ledger_ask(b[i]->peer); /* no way to it: only noted as asked */
    }
  }
  CHECK(asks == 1);
  CHECK(asked_at == NXI_LEDGER_WINDOW - 1);
  nxi_ledger_confirm(p, 0, 2 * NXI_LEDGER_WINDOW);
  CHECK_PENDING(p, 0);
  for (unsigned i = 0; i < 2 * NXI_LEDGER_WINDOW; i++)
    free(b[i]);
}

/* What nx_finalize reports: every entry still open, in order. */
static void unconfirmed_reported_at_the_end(void) {
  uint32_t p = peer(7);
  struct nx_buffer **b = enter(p, 0, 4, 100);
  nxi_ledger_confirm(p, 0, 1);
  CHECK(nxi_ledger_void(b[2]) == 1);
  int before = nreports;
  CHECK(nxi_ledger_report_all(NX_ETIMEDOUT) == 2);
  CHECK(nreports - before == 2);
  if (nreports - before == 2 && before + 2 <= MAX_REPORTS) {
    CHECK(reports[before].handler == 101 && reports[before + 1].handler == 103);
    CHECK(reports[before].err == NX_ETIMEDOUT);
  }
  CHECK_PENDING(p, 0);
  release(b, 4);
}

int main(void) {
  setenv("NX_PROTOCOLS", "local", 1);
  setenv("NX_PROGRESS", "poll", 1); /* no tick runs behind the cases */
  if (nx_init(NULL, NULL) != 0) {
    fprintf(stderr, "nx_init failed\n");
    return 1;
  }
  CHECK(nx_error_cb_set(on_error, NULL) == 0);
  proc_base = nxi_rt.proc_id + 0x1000;
  counts_settle_the_oldest();
  voided_entries_are_not_counted();
  void_after_settled();
  generations_apart();
  fenced_generation_reported();
  asks_once_a_window();
  unconfirmed_reported_at_the_end(); /* last: it closes every peer */
  nx_finalize();
  if (failures == 0)
    printf("ledger: every check held\n");
  return failures == 0 ? 0 : 1;
}
