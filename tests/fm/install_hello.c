/* A C program built against the installed libfm by tests/fm/install.sh: one
 * value through a channel. */
#include <stdio.h>

#include <fm.h>

int main(int argc, char **argv) {
  fm_port_t in, out;
  int32_t v = 0;
  if (fm_init(&argc, &argv) != 0 || fm_channel(&in, &out) != 0 ||
      fm_send_int32(&out, 42) != 0 || fm_receive_int32(&in, &v) != 0 || v != 42)
    return 1;
  printf("fm install: %d through a channel\n", (int)v);
  return fm_finalize() == 0 ? 0 : 1;
}
