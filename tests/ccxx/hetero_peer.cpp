// The ccxx heterogeneity test's peer (cross-built for s390x by hetero.sh and
// run under qemu-s390x, or built natively): makes a Meter object in an
// in-process context, joins the host's computation with nx_attach(URL),
// sends it the object's global pointer ("ccxx_hetero.hello") and serves
// calls until the host calls Meter::quit.
//
// usage: ccxx_hetero_peer URL
#include "hetero_types.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ccxx_hetero_peer URL\n");
    return 2;
  }
  if (ccxx::init(argc, argv) != 0)
    return 1;
  int status = 1;
  try {
    // The host is another executable: its calls name these operations.
    ccxx::expose<&Meter::check, &Meter::ask, &Meter::machine, &Meter::quit,
                 &Meter::doubles, &Meter::ints, &Meter::placed,
                 &Meter::ask_big>();
    ccxx::global_ptr<Meter> m = ccxx::create<Meter>(ccxx::here);
    nx_gp_t host = NX_GP_NULL;
    int rc = nx_attach(argv[1], &host);
    nx_buffer_t *buf = nullptr;
    if (rc == 0)
      rc = nx_rsr_init_name(&buf, &host, "ccxx_hetero.hello", 64);
    if (rc == 0 && (rc = nx_put_gp(buf, m.gp())) != 0)
      nx_buffer_release(buf);
    if (rc == 0)
      rc = nx_rsr_send(buf);
    nx_gp_release(&host);
    if (rc != 0) {
      fprintf(stderr, "ccxx hetero peer: sending hello: %s\n", nx_strerror(rc));
    } else {
      // The host calls quit; at most 300 s.
      for (int i = 0; i < 30000 && !quit_signal.is_set(); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      status = quit_signal.is_set() ? 0 : 1;
      if (status != 0)
        fprintf(stderr, "ccxx hetero peer: no quit from the host in 300 s\n");
    }
    ccxx::destroy(m);
  } catch (const std::exception &e) {
    fprintf(stderr, "ccxx hetero peer: %s\n", e.what());
  }
  ccxx::finalize();
  return status;
}
