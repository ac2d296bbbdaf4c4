/* What both halves of the big-endian test share (tests/hetero, docs/
 * heterogeneity.md): the values that cross, how each kind of RSR is packed
 * and checked, and the third context's handlers. hetero_host runs on this
 * machine, hetero_peer under qemu-s390x; every check is done by the
 * receiver against values it computes itself, so an error in one direction
 * cannot cancel one in the other. */
#ifndef HETERO_H
#define HETERO_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

/* What crosses, one row of the table each. */
enum hx_item {
  HX_HELLO,    /* the peer's hello: its format, machine and two gps */
  HX_SCALARS,  /* every scalar type, two values each */
  HX_ARRAYS,   /* every array type, nx_put_bytes, an empty array */
  HX_ZEROCOPY, /* nx_put_*_array_ref read with nx_get_*_array_ptr */
  HX_BUFBYTES, /* nx_buffer_bytes moved as bytes, nx_buffer_from_bytes */
  HX_GP,       /* a gp passed on to a third context, which uses it */
  HX_FIG3,     /* Figure 3: arrays of doubles circulated (rows by size) */
  HX_FINAL,    /* counters at the end: drops, lost RSRs, released refs */
  HX_NITEMS
};

/* Where the values went: into the peer or into the host. A verdict is
 * always about values that arrived in the process that sends it. */
enum hx_dir { HX_TO_PEER, HX_TO_HOST, HX_NDIRS };

/* The Figure 3 sizes, in doubles: 0 B to 1 MiB, as in the paper's range
 * (4 MiB left out to keep the test short under qemu). */
#define HX_FIG3_SIZES 8
extern const uint32_t hx_fig3_count[HX_FIG3_SIZES];
#define HX_FIG3_MAX (1u << 17)

/* Checks. Every failed one prints a line on stderr naming this process and
 * the check; the count ends up in a verdict. */
struct hx_check {
  int checks;
  int failed;
};
void hx_expect(struct hx_check *ck, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Counts an nx_* call that must return 0. */
void hx_rc(struct hx_check *ck, int rc, const char *what);
/* Checks failed in this process so far. */
int hx_failed(void);

/* Set once at start: "host" or "peer" (for messages), which direction
 * values arriving here travel, and the gp of the host's initial context,
 * where verdicts go. */
extern const char *hx_role;
extern enum hx_dir hx_incoming;
extern nx_gp_t hx_coord;

/* The format buffers from the other process must carry: the opposite of
 * this machine's, or this machine's when HETERO_SAME_ORDER=1 (the native
 * dry run of run.sh, which checks the test but no byte order). */
int hx_remote_format(void);
/* Checks that `buf` arrived in `want` (NX_FORMAT_LITTLE or _BIG). */
void hx_check_format(struct hx_check *ck, nx_buffer_t *buf, int want);

/* Packs item HX_SCALARS to HX_BUFBYTES into an RSR buffer, and
 * checks one that arrived. Puts by reference count into hx_refs_put and,
 * when released, hx_refs_released (hx_refs_bad if the status was not 0). */
int hx_pack(nx_buffer_t *buf, int item);
void hx_check_item(struct hx_check *ck, nx_buffer_t *buf, int item);
extern int hx_refs_put, hx_refs_released, hx_refs_bad;
void hx_release_cb(void *arg, const void *v, int status);

/* Figure 3: element i of every circulated array. */
double hx_fig3_value(uint32_t i);

/* Sends a verdict to hx_coord ("verdict": item, row, direction, ok,
 * checks, failed). */
void hx_send_verdict(int item, int row, const struct hx_check *ck);

/* Registers "relay" and "via" in a third context (nx_context_create_local
 * init function). "relay" takes a gp and sends "via" to it; "via" checks
 * what came and sends a verdict on HX_GP. */
int hx_third_init(nx_context_t *ctx, void *arg);

/* Sends an RSR to `gp`, handler `name`, with `item` packed; returns 0 or an
 * NX_E* code. */
int hx_send_item(const nx_gp_t *gp, const char *name, int item);

/* The machine name (uname -m), for the table. */
void hx_machine(char out[16]);

#endif /* HETERO_H */
