/* A program run as a process context by the process tests; argv[1] picks its behaviour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  int32_t v = 0;
  nx_buffer_t *out;
  if (nx_get_int32(buf, &v) == 0 && nx_get_gp(buf, &reply) == 0 &&
      nx_rsr_init_name(&out, &reply, "pong", 8) == 0) {
    nx_put_int32(out, v + 1);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "serve";
  if (strcmp(mode, "exit-early") == 0)
    return 3; /* before nx_init: never ready */
  if (nx_init(&argc, &argv) != 0)
    return 2;
  nx_handler_register(nx_context_self(), "ping", on_ping,
                      NX_HANDLER_NONTHREADED, NULL);
  if (strcmp(mode, "no-ready") == 0) {
    sleep(600);
    return 0;
  }
  if (strcmp(mode, "peers") == 0 && argc > 2) {
    nx_gp_t *gps = NULL;
    int n = 0, rank = 0;
    int r = nx_context_peers(&gps, &n, &rank);
    FILE *f = fopen(argv[2], "w");
    if (f != NULL) {
      fprintf(f, "%d %d %d %llx\n", r, n, rank,
              n > 0 ? (unsigned long long)nx_gp_context(&gps[0]) : 0ull);
      fclose(f);
    }
    for (int i = 0; i < n; i++)
      nx_gp_release(&gps[i]);
    free(gps);
  }
  int r = nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 1;
}
