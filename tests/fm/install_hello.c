/* A C program built against the installed libfm by tests/fm/install.sh: one
 * value through a channel. */
#include <stdio.h>

#include <fm.h>

#include "../common/expect.h"

int main(int argc, char **argv) {
  fm_port_t in, out;
  int32_t v = 0;
  NXT_EXPECT(fm_init(&argc, &argv) == 0, 1);
  NXT_EXPECT(fm_channel(&in, &out) == 0, 1);
  NXT_EXPECT(fm_send_int32(&out, 42) == 0, 1);
  NXT_EXPECT(fm_receive_int32(&in, &v) == 0, 1);
  NXT_EXPECT(v == 42, 1);
  printf("fm install: %d through a channel\n", (int)v);
  NXT_EXPECT(fm_finalize() == 0, 1);
  return 0;
}
