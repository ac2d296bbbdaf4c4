/* libFuzzer target: the attach URL parser (nexus/src/processes/attach.c) on
 * arbitrary text; what it accepts fits the buffers it was given. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "processes/attach.h"
#include "nexus/errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = malloc(size + 1);
  if (url == NULL)
    return 0;
  memcpy(url, data, size);
  url[size] = '\0';
  char host[128], port[16];
  uint8_t key[NX_KEY_SIZE];
  if (nxi_attach_parse_url(url, host, sizeof(host), port, sizeof(port), key) ==
      0) {
    NXT_ASSERT(strnlen(host, sizeof(host)) < sizeof(host));
    NXT_ASSERT(strnlen(port, sizeof(port)) < sizeof(port));
    NXT_ASSERT(port[0] != '\0');
  }
  free(url);
  return 0;
}
