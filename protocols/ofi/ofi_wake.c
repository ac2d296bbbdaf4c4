/* The wait fd of the ofi module: the providers' completion fds, a wake-up
 * channel for shm (which has none), and the liveness of peers on this host
 * through pidfds. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ofi_wake.h"
#include "ofi_rail.h"
#include "nxu_time.h"
#include "nxu_key.h"

/* The wait fd is an epoll set of our own. The core sleeps in epoll_wait
 * on it (nested in its own set) only after a progress round of its found
 * nothing, and after at least one millisecond of such rounds
 * (docs/design.md section 7). What goes in it:
 *
 * 1. The completion queue fd of a rail whose provider has one
 *    (tcp;ofi_rxm: FI_WAIT_FD, an epoll set of its sockets). Before the
 *    core may sleep we call fi_trywait, libfabric's protocol for it: it
 *    fails with -FI_EAGAIN if completions are ready, and otherwise makes
 *    sure the fd signals the next one.
 *
 * 2. For shm, which has no fd at all (fi_cq_open with FI_WAIT_FD gives
 *    FI_ENOSYS), a wake-up channel: a datagram socket bound to an abstract
 *    name derived from our process uuid, and a page in /dev/shm holding
 *    one word, `armed`, that peers map read-only. A sender that posted a
 *    message to us loads `armed` and, if it is set, sends us one byte.
 *    That costs a system call, so we set `armed` only when a driver
 *    thread has found no work for OFI_ARM_NS (250 us; the core sleeps only
 *    after 1 ms), and clear it as soon as work shows up: a busy ping-pong
 *    never pays for it.
 *
 *    No lost wake-up between the sender and us: we store armed = 1
 *    (sequentially consistent) and then read the completion queue once
 *    more; the sender writes the message into our shm queue (and sets
 *    shm's own signal word), issues a sequentially consistent fence and
 *    then loads `armed`. Either our read sees the message, or its load
 *    sees armed = 1 and the byte makes our epoll set readable.
 *
 *    The core calls ofi_wake_arm (the `arm` slot) right before a
 *    driver sleeps, so the thread that sleeps has always armed.
 *
 * 3. A pidfd per peer on this host (same host id and pid namespace), that
 *    becomes readable when the peer's process ends: shm never reports a
 *    dead peer, and ofi_rxm only when a send to it fails.
 *
 * progress() reads the set (epoll_wait with timeout 0) when its thread is
 * idle, at most every OFI_CHECK_NS otherwise: it drains the socket and
 * fails peers whose pidfd fired, so nothing stays readable. */

#define WAKE_MAGIC 0x4e584f57u /* "WOXN" */
#define WAKE_PAGE 4096

/* What an epoll entry is: the low bits of its data tag the pointer. */
enum { WATCH_RAIL = 1, WATCH_SOCK = 2, WATCH_PEER = 3 };

static uint64_t watch(void *obj, int kind) {
  return (uint64_t)(uintptr_t)obj | (uint64_t)kind;
}

/* Per driver thread: when its last progress call found work (0: not
 * stamped yet), and progress calls since the clock was last read. A busy
 * poll loop calls progress tens of millions of times a second: reading
 * the clock on every call would cost more than the rest of an idle call,
 * so it is read on every OFI_CLOCK_EVERY-th call only. */
#define OFI_CLOCK_EVERY 32
static _Thread_local struct {
  uint64_t last_work;
  unsigned calls;
} tl;

/* "/nx-ofi-<pid ns>-<pid>-<uuid>" for shm_open; the socket's abstract
 * name is the same without the slash. The pid lets a later process remove
 * the page of one that was killed (wake_sweep). */
#define WAKE_PREFIX "nx-ofi-"

static void wake_name(uint64_t pidns, uint32_t pid, const uint8_t *uuid,
                      char *out, size_t len) {
  char hex[2 * OFI_UUID_SIZE + 1];
  nxu_hex_encode(uuid, OFI_UUID_SIZE, hex);
  snprintf(out, len, "/" WAKE_PREFIX "%llx-%u-%s", (unsigned long long)pidns,
           pid, hex);
}

static socklen_t wake_sockaddr(uint64_t pidns, uint32_t pid,
                               const uint8_t *uuid, struct sockaddr_un *sun) {
  char name[96];
  wake_name(pidns, pid, uuid, name, sizeof(name));
  memset(sun, 0, sizeof(*sun));
  sun->sun_family = AF_UNIX;
  size_t n = strlen(name + 1);
  memcpy(sun->sun_path + 1, name + 1, n); /* sun_path[0] = 0: abstract */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Process identity. */

/* Field 22 of /proc/<pid>/stat: the start time in clock ticks after boot;
 * 0 if unreadable. */
static uint64_t start_time_of(const char *stat_path) {
  char buf[1024];
  int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold anything */
  if (p == NULL)
    return 0;
  p++;
  /* Fields from 3 (state) on; the start time is the 20th of them. */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (p == NULL)
      return 0;
  }
  return strtoull(p + 1, NULL, 10);
}

void ofi_self_identity(uint32_t *pid, uint64_t *start, uint64_t *pidns) {
  *pid = (uint32_t)getpid();
  *start = start_time_of("/proc/self/stat");
  struct stat st;
  *pidns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Setup. */

/* 1 if `name` is a region libfabric's shm provider names "<pid>:<n>:<n>"
 * (16 MiB each), and sets `pid`. */
static int fabric_region(const char *name, unsigned *pid) {
  unsigned a, b;
  int end = 0;
  return sscanf(name, "%u:%u:%u%n", pid, &a, &b, &end) == 3 &&
         name[end] == '\0' && name[0] >= '0' && name[0] <= '9';
}

/* Removes what processes that are gone left in /dev/shm (a process killed
 * with SIGKILL cannot remove its own), as Open MPI does at start: our wake
 * pages of processes of our pid namespace, and the shm provider's regions
 * of processes of this user that no longer exist (the provider cannot
 * clean up after a killed process; its names carry no pid namespace, so a
 * region is taken as stale only when no process of that pid exists here
 * and it belongs to our uid). */
static void wake_sweep(struct ofi *o) {
  DIR *d = opendir("/dev/shm");
  if (d == NULL)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    unsigned long long ns;
    unsigned pid;
    char rest[2];
    if (fabric_region(e->d_name, &pid)) {
      struct stat st;
      char path[300];
      snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
      if (pid != 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH &&
          stat(path, &st) == 0 && st.st_uid == getuid() && unlink(path) == 0)
        OFI_LOG(o, 1,
                "removed %s (%lld bytes), left by shm of process %u "
                "that ended",
                path, (long long)st.st_size, pid);
      continue;
    }
    if (o->pidns == 0 ||
        strncmp(e->d_name, WAKE_PREFIX, strlen(WAKE_PREFIX)) != 0 ||
        sscanf(e->d_name + strlen(WAKE_PREFIX), "%llx-%u-%1s", &ns, &pid,
               rest) != 3 ||
        ns != o->pidns || pid == 0 ||
        (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
      continue;
    char name[300];
    snprintf(name, sizeof(name), "/%s", e->d_name);
    if (shm_unlink(name) == 0)
      OFI_LOG(o, 2, "removed %s, left by a process that ended", name);
  }
  closedir(d);
}

static void wake_channel_open(struct ofi *o) {
  wake_sweep(o);
  char name[96];
  wake_name(o->pidns, o->pid, o->core->process_uuid, name, sizeof(name));
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    OFI_LOG(o, 1, "shm_open %s: %s; shm wake-ups off", name, strerror(errno));
    return;
  }
  void *page = MAP_FAILED;
  if (ftruncate(fd, WAKE_PAGE) == 0)
    page = mmap(NULL, WAKE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (page == MAP_FAILED) {
    OFI_LOG(o, 1, "wake-up page: %s; shm wake-ups off", strerror(errno));
    shm_unlink(name);
    return;
  }
  snprintf(o->wake_path, sizeof(o->wake_path), "%s", name);
  o->wake_page = page;
  atomic_store(&o->wake_page->armed, 0);
  o->wake_page->magic = WAKE_MAGIC;
  struct sockaddr_un sun;
  socklen_t len = wake_sockaddr(o->pidns, o->pid, o->core->process_uuid, &sun);
  o->wake_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  o->send_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = watch(o, WATCH_SOCK)};
  if (o->wake_sock < 0 || o->send_sock < 0 ||
      bind(o->wake_sock, (struct sockaddr *)&sun, len) < 0 ||
      epoll_ctl(o->epfd, EPOLL_CTL_ADD, o->wake_sock, &ev) < 0) {
    OFI_LOG(o, 1, "wake-up socket: %s; shm wake-ups off", strerror(errno));
    o->wake_page->magic = 0; /* peers leave us alone */
    return;
  }
  o->sources++;
}

int ofi_wake_init(struct ofi *o, char *why, size_t why_len) {
  o->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (o->epfd < 0) {
    snprintf(why, why_len, "epoll_create1: %s", strerror(errno));
    return NX_ENOMEM;
  }
  int local = 0;
  for (int i = 0; i < o->nrails; i++) {
    struct ofi_rail *r = &o->rails[i];
    local |= r->local;
    if (r->wait_fd < 0)
      continue;
    struct epoll_event ev = {.events = EPOLLIN,
                             .data.u64 = watch(r, WATCH_RAIL)};
    if (epoll_ctl(o->epfd, EPOLL_CTL_ADD, r->wait_fd, &ev) < 0) {
      OFI_LOG(o, 1, "%s: cannot watch its wait fd: %s", r->prov,
              strerror(errno));
      r->wait_fd = -1;
      continue;
    }
    o->sources++;
  }
  if (local)
    wake_channel_open(o);
  return 0;
}

void ofi_wake_fini(struct ofi *o) {
  if (o->wake_page != NULL) {
    munmap(o->wake_page, WAKE_PAGE);
    shm_unlink(o->wake_path);
    o->wake_page = NULL;
  }
  if (o->wake_sock >= 0)
    close(o->wake_sock);
  if (o->send_sock >= 0)
    close(o->send_sock);
  if (o->epfd >= 0)
    close(o->epfd);
  o->wake_sock = o->send_sock = o->epfd = -1;
}

/* Peers. */

void ofi_wake_peer(struct ofi *o, struct ofi_peer *p) {
  if (p->same_host && p->pidns != 0 && p->pidns == o->pidns && p->pid != 0) {
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)p->pid, 0);
    if (fd < 0 && errno == ESRCH) {
      p->gone = 1;
    } else if (fd >= 0) {
      /* The pidfd pins the process; if the pid was reused before we got
       * it, the start time tells. */
      char path[64];
      snprintf(path, sizeof(path), "/proc/%u/stat", p->pid);
      struct epoll_event ev = {.events = EPOLLIN,
                               .data.u64 = watch(p, WATCH_PEER)};
      if (start_time_of(path) != p->start_time) {
        p->gone = 1;
        close(fd);
      } else if (epoll_ctl(o->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
      } else {
        p->pidfd = fd;
      }
    }
  }
  if (!p->rail->local || o->wake_page == NULL)
    return;
  char name[96];
  wake_name(p->pidns, p->pid, p->base.uuid, name, sizeof(name));
  int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    OFI_LOG(o, 1, "no wake-up page for a shm peer (%s): it is polled",
            strerror(errno));
    return;
  }
  struct stat st;
  void *page = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size >= WAKE_PAGE)
    page = mmap(NULL, WAKE_PAGE, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (page == MAP_FAILED)
    return;
  const struct ofi_wake_page *w = page;
  if (w->magic != WAKE_MAGIC) {
    munmap(page, WAKE_PAGE);
    return;
  }
  p->wake_map = page;
  p->wake_word = &w->armed;
  p->wake_len = wake_sockaddr(p->pidns, p->pid, p->base.uuid, &p->wake_addr);
}

void ofi_wake_peer_fini(struct ofi_peer *p) {
  if (p->wake_map != NULL)
    munmap(p->wake_map, WAKE_PAGE);
  if (p->pidfd >= 0)
    close(p->pidfd); /* closing removes it from the epoll set */
  p->wake_map = NULL;
  p->wake_word = NULL;
  p->pidfd = -1;
}

int ofi_wake_peer_alive(const struct ofi_peer *p) {
  if (p->pidfd < 0)
    return 0;
  /* A pidfd becomes readable when its process ends, and stays so. */
  struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
  return poll(&pfd, 1, 0) == 0;
}

void ofi_wake_after_send(struct ofi *o, struct ofi_peer *p) {
  if (p->wake_word == NULL)
    return;
  /* Orders the message we posted before the load (see the top). */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(p->wake_word, memory_order_relaxed) == 0)
    return;
  static const char byte = 1;
  /* EAGAIN: its socket holds wake-ups already. */
  (void)sendto(o->send_sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
               (const struct sockaddr *)&p->wake_addr, p->wake_len);
}

/* Progress. */

/* Reads the epoll set without waiting: drains the wake-up socket, fails
 * peers whose process ended. Returns the deaths found. */
static int check(struct ofi *o) {
  struct epoll_event ev[16];
  int n = epoll_wait(o->epfd, ev, 16, 0);
  int deaths = 0;
  for (int i = 0; i < n; i++) {
    uint64_t d = ev[i].data.u64;
    int kind = (int)(d & 7);
    void *obj = (void *)(uintptr_t)(d & ~(uint64_t)7);
    if (kind == WATCH_SOCK) {
      char buf[64];
      while (recv(o->wake_sock, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
    } else if (kind == WATCH_PEER) {
      struct ofi_peer *p = obj;
      epoll_ctl(o->epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
      o->peer_kill(o, p, "its process has ended");
      deaths++;
    }
    /* WATCH_RAIL: the completion queue is read by every progress call. */
  }
  return deaths;
}

static void set_armed(struct ofi *o, int armed) {
  atomic_store(&o->armed, armed);
  if (o->wake_page != NULL)
    atomic_store(&o->wake_page->armed, (uint32_t)armed);
}

/* Arms every wake-up source; returns the events found while doing so (the
 * core must then poll again rather than sleep). */
static int arm(struct ofi *o) {
  set_armed(o, 1);
  int events = 0;
  for (int i = 0; i < o->nrails; i++) {
    struct ofi_rail *r = &o->rails[i];
    if (r->wait_fd >= 0) {
      struct fid *fids[1] = {&r->cq->fid};
      ofi_rail_lock(r);
      int rc = fi_trywait(r->fabric, fids, 1);
      ofi_rail_unlock(r);
      if (rc == -FI_EAGAIN)
        events++;
    }
    /* What arrived before `armed` was visible to senders. */
    o->budget = OFI_DELIVER_MAX;
    events += ofi_rail_poll(r);
  }
  return events;
}

int ofi_wake_arm(struct ofi *o) {
  uint64_t now = nxu_now_ns();
  o->last_check = now;
  int found = check(o);
  if (found == 0)
    found = arm(o);
  if (found > 0) {
    tl.last_work = now;
    set_armed(o, 0);
  }
  return found;
}

int ofi_wake_progress(struct ofi *o, int events) {
  if (events > 0) {
    tl.last_work = 0; /* stamped at the next clock reading */
    if (atomic_load_explicit(&o->armed, memory_order_relaxed))
      set_armed(o, 0);
  }
  if (++tl.calls < OFI_CLOCK_EVERY)
    return events;
  tl.calls = 0;
  uint64_t now = nxu_now_ns();
  if (events > 0 || tl.last_work == 0) {
    if (tl.last_work == 0)
      tl.last_work = now;
    /* Busy: peers' liveness now and then. */
    if (now - o->last_check >= OFI_CHECK_NS) {
      o->last_check = now;
      events += check(o);
    }
    return events;
  }
  if (now - tl.last_work < OFI_ARM_NS)
    return 0;
  /* This thread found nothing for a while: it may be about to sleep. */
  int found = 0;
  if (now - o->last_check >= OFI_ARM_NS / 8 ||
      !atomic_load_explicit(&o->armed, memory_order_relaxed)) {
    o->last_check = now;
    found = check(o);
  }
  if (!atomic_load_explicit(&o->armed, memory_order_relaxed))
    found += arm(o);
  if (found > 0) {
    tl.last_work = now;
    set_armed(o, 0);
  }
  return found;
}
