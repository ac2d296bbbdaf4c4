/* The engine's shared state, and how threads sleep in its epoll and are woken
 * (engine.h). */
#include "engine/engine.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

struct nxi_engine nxi_eng;
NXI_TLS struct nxi_engine_tls nxi_eng_me;

void nxi_progress_wake_sleeper(void) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&nxi_eng.wake_pending, &expected, 1)) {
    uint64_t one = 1;
    ssize_t w = write(nxi_eng.evfd, &one, sizeof(one));
    (void)w; /* EAGAIN: the counter is already non-zero */
  }
}

/* A waiter's word is announced in `word_sleepers` before the last look at
 * it, so nx_cond_signal (which bumps the word first) either is seen here
 * or sees us and writes the eventfd. */
void nxi_engine_sleep(int timeout_ms, const uint32_t *word, uint32_t old) {
  atomic_fetch_add(&nxi_eng.sleepers, 1);
  if (word != NULL)
    atomic_fetch_add(&nxi_eng.word_sleepers, 1);
  if (!nxi_queued() && atomic_load(&nxi_eng.tq_len) == 0 &&
      !atomic_load(&nxi_eng.stopping) &&
      (word == NULL || __atomic_load_n(word, __ATOMIC_SEQ_CST) == old)) {
    struct epoll_event ev[8];
    int n = epoll_wait(nxi_eng.epfd, ev, 8, timeout_ms);
    for (int i = 0; i < n; i++) {
      if (ev[i].data.fd != nxi_eng.evfd) {
        /* A module's fd: it may be one the policy polls rarely. */
        atomic_store_explicit(&nxi_eng.poll_all, 1, memory_order_relaxed);
      } else {
        uint64_t v;
        ssize_t r = read(nxi_eng.evfd, &v, sizeof(v));
        (void)r;
        atomic_store(&nxi_eng.wake_pending, 0);
      }
    }
  }
  if (word != NULL)
    atomic_fetch_sub(&nxi_eng.word_sleepers, 1);
  atomic_fetch_sub(&nxi_eng.sleepers, 1);
}

int nxi_engine_watch(int fd) {
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  return epoll_ctl(nxi_eng.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? NX_EIO : 0;
}

void nxi_engine_set_state(int state) {
  if (atomic_load_explicit(&nxi_eng.primary_state, memory_order_relaxed) !=
      state)
    atomic_store_explicit(&nxi_eng.primary_state, state, memory_order_relaxed);
}
