/* The peer of the protocol conformance suite: a process context whose handlers echo, check and count what the suite sends. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nexus.h"
#include "conf_handlers.h"

int main(int argc, char **argv) {
  if (nx_init(&argc, &argv) != 0)
    return 2;
  if (conf_register(nx_context_self()) != 0)
    return 3;
  int r = nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 1;
}
