/* Attach (attach.c): what nx_finalize calls, and the URL parser (its fuzz
 * target calls it too). */
#ifndef NXI_ATTACH_H
#define NXI_ATTACH_H

#include <stddef.h>
#include <stdint.h>

#include "nexus/protocol.h"

/* Stops listening for attaching programs. */
void nxi_attach_finalize(void);

/* Splits "nexus://host:port/keyhex" (or "[v6]:port") into `host` (hl bytes),
 * `port` (pl bytes) and the key. Returns 0 or NX_EINVAL. */
int nxi_attach_parse_url(const char *url, char *host, size_t hl, char *port,
                         size_t pl, uint8_t key[NX_KEY_SIZE]);

#endif /* NXI_ATTACH_H */
