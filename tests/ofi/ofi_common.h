/* What the ofi tests and their peer program (ofi_peer.c) agree on: the
 * handlers the peer serves and their buffer layouts ("echo" is
 * tests/common/peer_handlers.h's, the payload pattern pattern.h's). C and
 * C++. */
#ifndef NX_TESTS_OFI_COMMON_H
#define NX_TESTS_OFI_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "pattern.h"

/* Handlers of the peer, in its initial context:
 *   "echo"    gp reply, u64 tag, u64 n, bytes[n]  -> "echoed" at reply:
 *             u64 tag, u64 n, bytes[n] (the same bytes)
 *   "hello"   gp reply -> "hello" at reply: u32 pid, char[16] the protocol
 *             the peer uses to reach reply, char[128] what carries it
 *   "count"   u32 thread, u32 index, u64 n, bytes[n]: counted, order per
 *             thread checked, contents checked
 *   "stats"   gp reply -> "stats" at reply: u64[REPORT_COUNT]
 *   "blast"   gp target, u32 count: the peer sends `count` "seq" RSRs to
 *             target from a threaded handler: u64 index, u64 n,
 *             bytes[n] (pattern of index), n from seq_size(index) */
enum report_field {
  REPORT_COUNTED,      /* "count" RSRs received */
  REPORT_DUPLICATES,   /* ... of an index already seen */
  REPORT_OUT_OF_ORDER, /* ... not the index after its thread's previous */
  REPORT_BAD_BYTES,    /* ... with wrong contents or malformed */
  REPORT_BLAST_FAILS,  /* "seq" sends that failed */
  REPORT_DROP_BAD_FRAME,
  REPORT_COUNT
};

#define COUNT_THREADS_MAX 16
#define COUNT_INDEX_MAX 65536

/* Sizes of the blast's "seq" RSRs: mostly small, now and then one just
 * above the module's default eager limit (8 KiB) and one that goes as a
 * large frame: a frame behind a large one must not overtake it. */
static inline size_t seq_size(uint64_t index) {
  if (index % 97 == 0)
    return 300000;
  if (index % 31 == 0)
    return 9000;
  return (size_t)(index % 7) * 37;
}

#endif /* NX_TESTS_OFI_COMMON_H */
