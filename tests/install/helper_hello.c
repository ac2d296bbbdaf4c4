/* A program built outside the tree against the installed libnexus: one RSR to
 * itself, and it reports which module file carried it. */
#include <stdio.h>
#include <string.h>

#include <nexus.h>

static nx_mutex_t m;
static nx_cond_t c;
static int got;

static void hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t v = 0;
  nx_get_int32(buf, &v);
  nx_mutex_lock(&m);
  got = v;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

int main(void) {
  if (nx_init(NULL, NULL) != 0)
    return 2;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_handler_register(nx_context_self(), "hello", hello, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_gp_t me;
  nx_gp_make(NULL, &me);
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &me, "hello", 8) != 0 || nx_put_int32(b, 42) != 0 ||
      nx_rsr_send(b) != 0)
    return 3;
  nx_mutex_lock(&m);
  while (got != 42)
    nx_cond_wait(&c, &m);
  nx_mutex_unlock(&m);
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) == 0 && strcmp(info.name, "local") == 0)
      printf("local %s\n", info.path);
  }
  printf("protocol %s\n", nx_gp_protocol(&me));
  nx_gp_release(&me);
  return nx_finalize() == 0 ? 0 : 4;
}
