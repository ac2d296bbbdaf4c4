/* The protocol module loader: finds libnx_proto_<name>.so files, checks their
 * ABI and slots once, initialises them, and orders them. */
#include <dirent.h>
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modules/module.h"

#define MAX_MODULES NXI_MAX_MODULES
#define PREFIX "libnx_proto_"
#define SUFFIX ".so"

static struct nxi_module mods[MAX_MODULES];
/* Each module's ops table as the core uses it: a copy, with iov_max
 * clamped to what the core can build. */
static struct nx_protocol_ops tables[MAX_MODULES];
static int nmods;
struct nxi_module *nxi_loaded[NXI_MAX_MODULES];
_Atomic int nxi_nloaded;
/* Modules left to join after nx_init (nxi_modules_join_next), in order,
 * and the core API they are handed. Only the joining thread takes them;
 * `info_lock` keeps nx_module_info from reading one as it loads. */
static struct nxi_module *late[NXI_MAX_MODULES];
static int nlate, late_next;
static const struct nx_core_api *late_api;
static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;

static struct nxi_module *find(const char *name) {
  for (int i = 0; i < nmods; i++)
    if (strcmp(mods[i].name, name) == 0)
      return &mods[i];
  return NULL;
}

static struct nxi_module *add(const char *name) {
  struct nxi_module *m = find(name);
  if (m != NULL || nmods == MAX_MODULES || strlen(name) > NX_PROTO_NAME_MAX ||
      name[0] == '\0')
    return m;
  m = &mods[nmods++];
  memset(m, 0, sizeof(*m));
  snprintf(m->name, sizeof(m->name), "%s", name);
  m->order = nmods - 1;
  m->error = NX_ENOENT;
  snprintf(m->reason, sizeof(m->reason), "no %s%s%s found", PREFIX, name,
           SUFFIX);
  return m;
}

/* Records every module file in `dir`; the first path found for a name wins.
 * With `only_listed`, names not already asked for are ignored. */
static void scan_dir(const char *dir, int only_listed) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0 ||
        len <= strlen(PREFIX) + strlen(SUFFIX) ||
        strcmp(e->d_name + len - strlen(SUFFIX), SUFFIX) != 0)
      continue;
    char name[64];
    size_t nl = len - strlen(PREFIX) - strlen(SUFFIX);
    if (nl >= sizeof(name))
      continue;
    memcpy(name, e->d_name + strlen(PREFIX), nl);
    name[nl] = '\0';
    struct nxi_module *m = only_listed ? find(name) : add(name);
    if (m == NULL || m->path[0] != '\0')
      continue;
    snprintf(m->path, sizeof(m->path), "%s/%s", dir, e->d_name);
  }
  closedir(d);
}

/* The build tree keeps each module in protocols/<name>/. */
static void scan_tree(const char *root, int only_listed) {
  DIR *d = opendir(root);
  if (d == NULL)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char sub[1024];
    if (snprintf(sub, sizeof(sub), "%s/%s", root, e->d_name) >=
        (int)sizeof(sub))
      continue; /* a path this long is not ours */
    scan_dir(sub, only_listed);
  }
  closedir(d);
}

static void discover(int only_listed) {
  const char *path = getenv("NX_PROTO_PATH");
  if (path != NULL && path[0] != '\0') {
    char *copy = strdup(path);
    char *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
         dir = strtok_r(NULL, ":", &save))
      scan_dir(dir, only_listed);
    free(copy);
  }
  /* Next to this library: <libdir>/nexus when installed, ../protocols/
   * when run from the build tree. */
  Dl_info info;
  if (dladdr((void *)&nxi_modules_load, &info) != 0 && info.dli_fname) {
    char *copy = strdup(info.dli_fname);
    if (copy != NULL) {
      char dir[1024];
      const char *base = dirname(copy);
      snprintf(dir, sizeof(dir), "%s/nexus", base);
      scan_dir(dir, only_listed);
      snprintf(dir, sizeof(dir), "%s/../protocols", base);
      scan_tree(dir, only_listed);
      free(copy);
    }
  }
  scan_dir(NX_MODULE_DIR, only_listed);
}

static int fail(struct nxi_module *m, int err, const char *fmt,
                const char *arg) {
  m->error = err;
  snprintf(m->reason, sizeof(m->reason), fmt, arg);
  if (m->dl_handle != NULL)
    dlclose(m->dl_handle);
  m->dl_handle = NULL;
  m->ops = NULL;
  /* A malformed setting is the user's to fix: say so even without
   * NX_DEBUG. */
  nxi_log(err == NX_EINVAL ? 0 : 1, m->name, "skipped: %s", m->reason);
  return err;
}

/* The launcher table's rules; NULL when they hold, else the reason. */
static const char *check_launch(const struct nx_launch_ops *l) {
  int spawning = (l->node_spec != NULL) + (l->spawn != NULL) +
                 (l->ctl_send != NULL) + (l->ctl_recv != NULL) +
                 (l->ctl_close != NULL);
  if (spawning != 0 && spawning != 5)
    return "launcher slots node_spec, spawn, ctl_send, ctl_recv and "
           "ctl_close must all be set or all be NULL";
  if (l->ctl_parent != NULL &&
      (l->ctl_send == NULL || l->ctl_recv == NULL || l->ctl_close == NULL))
    return "launcher slot ctl_parent needs ctl_send, ctl_recv and ctl_close";
  return NULL;
}

/* Loads and validates one module: ABI version, name and every mandatory
 * slot are checked here, once, so the rest of the core can call slots
 * without checking. */
static int load(struct nxi_module *m, const struct nx_core_api *api) {
  if (m->path[0] == '\0') {
    nxi_log(1, m->name, "skipped: %s", m->reason);
    return m->error;
  }
  /* Gateways' descriptors carry this name (dlist.h): no module may. */
  if (strcmp(m->name, "gw") == 0)
    return fail(m, NX_EMODULE, "%s", "the name gw is reserved for gateways");
  m->dl_handle = dlopen(m->path, RTLD_NOW | RTLD_LOCAL);
  if (m->dl_handle == NULL)
    return fail(m, NX_EMODULE, "dlopen failed: %s", dlerror());
  char sym[64];
  snprintf(sym, sizeof(sym), "nx_protocol_%s", m->name);
  const struct nx_protocol_ops *ops = dlsym(m->dl_handle, sym);
  if (ops == NULL)
    return fail(m, NX_EMODULE, "no symbol %s", sym);
  /* One ABI: a table of any other version has another layout, and
   * reading it as this one would call garbage. */
  if (ops->abi_version != NX_PROTOCOL_ABI_VERSION) {
    char v[64];
    snprintf(v, sizeof(v), "%u, this core speaks only %u", ops->abi_version,
             NX_PROTOCOL_ABI_VERSION);
    return fail(m, NX_EABI, "wrong ABI version %s", v);
  }
  struct nx_protocol_ops *table = &tables[m - mods];
  *table = *ops;
  if (table->iov_max > NX_FRAME_IOV_MAX)
    table->iov_max = NX_FRAME_IOV_MAX;
  ops = table;
  if (ops->name == NULL || strcmp(ops->name, m->name) != 0)
    return fail(m, NX_EMODULE, "table names another module (%s)",
                ops->name ? ops->name : "NULL");
  const char *missing = !ops->init         ? "init"
                        : !ops->finalize   ? "finalize"
                        : !ops->descriptor ? "descriptor"
                        : !ops->reachable  ? "reachable"
                        : !ops->connect    ? "connect"
                        : !ops->disconnect ? "disconnect"
                        : !ops->send       ? "send"
                                           : NULL;
  if (missing != NULL)
    return fail(m, NX_EMODULE, "mandatory slot %s is NULL", missing);
  const char *bad = ops->launch != NULL ? check_launch(ops->launch) : NULL;
  if (bad != NULL)
    return fail(m, NX_EMODULE, "%s", bad);
  char why[256] = "init failed";
  int r = ops->init(api, &m->state, why, sizeof(why));
  if (r < 0)
    return fail(m, r, "%s", why);
  memset(&m->desc, 0, sizeof(m->desc));
  r = ops->descriptor(m->state, &m->desc);
  if (r < 0 || m->desc.scope_len > NX_DESC_SCOPE_MAX ||
      m->desc.data_len > NX_DESC_DATA_MAX) {
    ops->finalize(m->state);
    return fail(m, r < 0 ? r : NX_EPROTO, "%s", "bad descriptor");
  }
  m->wait_fd = ops->wait_fd != NULL ? ops->wait_fd(m->state) : -1;
  m->ops = ops;
  m->launch = ops->launch;
  m->loaded = 1;
  m->error = 0;
  m->reason[0] = '\0';
  return 0;
}

/* A module name as NX_PROTOCOLS may hold it: what a file libnx_proto_<name>.so
 * can carry and the ops table's name can match (no spaces, no empty names). */
static int name_ok(const char *n, size_t len) {
  if (len == 0 || len > NX_PROTO_NAME_MAX)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= '0' && n[i] <= '9') ||
          n[i] == '_' || n[i] == '-'))
      return 0;
  return 1;
}

/* Refuses NX_PROTOCOLS with a malformed or unknown name, naming the modules
 * that are there: a typo must fail nx_init, not the first send much later. */
static int check_listed(const char *list) {
  const char *bad = NULL;
  size_t bad_len = 0;
  for (const char *p = list;; p++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char name[NX_PROTO_NAME_MAX + 1];
    if (!name_ok(p, len)) {
      bad = p, bad_len = len;
      break;
    }
    memcpy(name, p, len);
    name[len] = '\0';
    struct nxi_module *m = find(name);
    if (m == NULL || m->path[0] == '\0') {
      bad = p, bad_len = len;
      break;
    }
    if (end == NULL)
      break;
    p = end;
  }
  if (bad == NULL)
    return 0;
  /* Everything installed, for the message. */
  discover(0);
  char known[512] = "";
  size_t off = 0;
  for (int i = 0; i < nmods; i++)
    if (mods[i].path[0] != '\0' && off < sizeof(known))
      off += (size_t)snprintf(known + off, sizeof(known) - off, "%s%s",
                              off ? ", " : "", mods[i].name);
  nxi_log(0, NULL,
          "NX_PROTOCOLS=\"%s\": %s module name \"%.*s\"; known modules: %s",
          list, name_ok(bad, bad_len) ? "unknown" : "malformed", (int)bad_len,
          bad, off ? known : "(none found)");
  return NX_EINVAL;
}

/* Modules loaded only when NX_PROTOCOLS names them, with the reason. ofi:
 * loading it makes a process context cost about 0.3-0.4 s more to start
 * (bench_context_create): the constructors of libinfinipath and libpsm2,
 * which Debian's libfabric links, calibrate a clock with usleep for about
 * 100 ms each, and fi_getinfo then reads /proc/kallsyms twice; ucx and tcp
 * reach the same peers (shared memory, TCP) and start in a few ms. */
static const struct {
  const char *name, *why;
} named_only[] = {
    {"ofi", "not in the default set: starting libfabric takes 0.3-0.4 s here "
            "(its psm libraries calibrate clocks at load); name it in "
            "NX_PROTOCOLS to use it"},
};

static const char *only_when_named(const char *name) {
  for (size_t i = 0; i < sizeof(named_only) / sizeof(named_only[0]); i++)
    if (strcmp(named_only[i].name, name) == 0)
      return named_only[i].why;
  return NULL;
}

/* Modules of the default set that a process context started by
 * nx_context_create loads after it told its creator it is ready (`defer`):
 * their start is most of a new process's (bench_context_create: ucx's
 * libraries, ucp_init and its worker 6-7 ms, mpi's libmpi about 1.5 ms,
 * against 1-2 ms for local and tcp), and tcp reaches the same peers
 * meanwhile. Only when tcp is loaded: it is what carries the RSRs until
 * they join. */
static const char *const late_names[] = {"ucx", "mpi"};
#define LATE_NEEDS "tcp"

static int joins_late(const char *name) {
  for (size_t i = 0; i < sizeof(late_names) / sizeof(late_names[0]); i++)
    if (strcmp(late_names[i], name) == 0)
      return 1;
  return 0;
}

/* Puts m in the loaded list (the end of it: its preference among the
 * others is its cost, which route choice compares first). The count is
 * published after the entry, so that a reader that sees it sees the
 * module. */
static void publish(struct nxi_module *m) {
  int n = atomic_load(&nxi_nloaded);
  m->order = n;
  nxi_loaded[n] = m;
  atomic_store_explicit(&nxi_nloaded, n + 1, memory_order_release);
}

int nxi_modules_join_next(struct nxi_module **out) {
  if (late_next >= nlate)
    return -1;
  struct nxi_module *m = late[late_next++];
  /* nx_module_info waits the few milliseconds the module's init takes,
   * rather than read it half written. */
  pthread_mutex_lock(&info_lock);
  int r = load(m, late_api);
  m->joining = 0;
  pthread_mutex_unlock(&info_lock);
  if (r < 0)
    return 0;
  *out = m;
  return 1;
}

void nxi_module_publish(struct nxi_module *m, uint64_t poll_ns) {
  pthread_mutex_lock(&info_lock);
  m->poll_ns = m->poll_ns_init = poll_ns;
  publish(m);
  pthread_mutex_unlock(&info_lock);
}

int nxi_modules_joining(void) { return nlate - late_next; }

int nxi_modules_load(const struct nx_core_api *api, int defer) {
  nmods = 0;
  nxi_nloaded = 0;
  nlate = late_next = 0;
  late_api = api;
  const char *list = getenv("NX_PROTOCOLS");
  if (list != NULL && list[0] == '\0')
    list = NULL; /* set but empty: as unset */
  if (list != NULL) {
    char *copy = strdup(list);
    if (copy == NULL)
      return NX_ENOMEM;
    char *save = NULL;
    for (char *n = strtok_r(copy, ",", &save); n;
         n = strtok_r(NULL, ",", &save))
      add(n);
    free(copy);
  }
  discover(list != NULL);
  if (list != NULL) {
    int r = check_listed(list);
    if (r < 0)
      return r;
  }
  for (int i = 0; i < nmods; i++) {
    const char *why = list == NULL ? only_when_named(mods[i].name) : NULL;
    if (why != NULL && mods[i].path[0] != '\0') {
      mods[i].error = NX_ENOTSUP;
      snprintf(mods[i].reason, sizeof(mods[i].reason), "%s", why);
      nxi_log(1, mods[i].name, "skipped: %s", why);
      continue;
    }
    if (defer && list == NULL && joins_late(mods[i].name) &&
        mods[i].path[0] != '\0') {
      late[nlate++] = &mods[i];
      continue;
    }
    if (load(&mods[i], api) == 0)
      nxi_loaded[nxi_nloaded++] = &mods[i];
  }
  /* Without tcp nothing would carry RSRs from another process until the
   * late ones joined: they load now. */
  int have_carrier = 0;
  for (int i = 0; i < nxi_nloaded; i++)
    have_carrier |= strcmp(nxi_loaded[i]->name, LATE_NEEDS) == 0;
  for (; !have_carrier && late_next < nlate; late_next++)
    if (load(late[late_next], api) == 0)
      nxi_loaded[nxi_nloaded++] = late[late_next];
  for (int i = late_next; i < nlate; i++) {
    late[i]->joining = 1;
    late[i]->error = NX_EAGAIN;
    snprintf(late[i]->reason, sizeof(late[i]->reason),
             "joining: loaded after this process context was ready");
  }
  /* Preference: NX_PROTOCOLS order when given, else by cost. */
  if (list == NULL)
    for (int i = 1; i < nxi_nloaded; i++)
      for (int j = i;
           j > 0 && nxi_loaded[j]->ops->cost < nxi_loaded[j - 1]->ops->cost;
           j--) {
        struct nxi_module *t = nxi_loaded[j];
        nxi_loaded[j] = nxi_loaded[j - 1];
        nxi_loaded[j - 1] = t;
      }
  for (int i = 0; i < nxi_nloaded; i++)
    nxi_loaded[i]->order = i;
  return 0;
}

void nxi_modules_unload(void) {
  nlate = late_next = 0; /* the joining thread has ended (child.c) */
  for (int i = 0; i < nxi_nloaded; i++) {
    nxi_loaded[i]->ops->finalize(nxi_loaded[i]->state);
    /* Modules stay mapped: a library they use (libuv, UCX, MPI) may have
     * threads or atexit handlers that outlive finalize. */
  }
  nxi_nloaded = 0;
}

int nx_module_count(void) { return nxi_ready() ? nmods : NX_ENOTINIT; }

int nxi_module_count_all(void) { return nmods; }

void nxi_module_explain(int i) {
  nxi_log(0, mods[i].name, "skipped: %s", mods[i].reason);
}

static int module_info(const struct nxi_module *m, nx_module_info_t *info);

int nx_module_info(int index, nx_module_info_t *info) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (info == NULL || index < 0 || index >= nmods)
    return NX_EINVAL;
  const struct nxi_module *m = &mods[index];
  pthread_mutex_lock(&info_lock);
  int r = module_info(m, info);
  pthread_mutex_unlock(&info_lock);
  return r;
}

/* info_lock held: a module is not read while it joins. */
static int module_info(const struct nxi_module *m, nx_module_info_t *info) {
  memset(info, 0, sizeof(*info));
  snprintf(info->name, sizeof(info->name), "%s", m->name);
  snprintf(info->path, sizeof(info->path), "%s", m->path);
  snprintf(info->reason, sizeof(info->reason), "%s", m->reason);
  info->loaded = m->loaded;
  info->error = m->error;
  info->rank = m->loaded ? m->order : -1;
  if (m->ops != NULL) {
    info->cost = m->ops->cost;
    info->wire_version = m->ops->wire_version;
    info->poll_ns = m->loaded ? (unsigned)m->poll_ns_init : 0;
    if (m->ops->backend_version != NULL)
      snprintf(info->backend, sizeof(info->backend), "%s",
               m->ops->backend_version(m->state));
    size_t off =
        (size_t)snprintf(info->descriptor, sizeof(info->descriptor), "scope=");
    for (int i = 0; i < m->desc.scope_len && off + 3 < sizeof(info->descriptor);
         i++)
      off += (size_t)snprintf(info->descriptor + off,
                              sizeof(info->descriptor) - off, "%02x",
                              m->desc.scope[i]);
    snprintf(info->descriptor + off, sizeof(info->descriptor) - off,
             " bytes=%u", (unsigned)m->desc.data_len);
  }
  return 0;
}

struct nxi_module *nxi_module_launcher(const char *spec) {
  size_t len = strcspn(spec, ":");
  for (int i = 0; i < nxi_nloaded; i++) {
    struct nxi_module *m = nxi_loaded[i];
    if (strlen(m->name) == len && strncmp(m->name, spec, len) == 0)
      return m->launch != NULL && m->launch->spawn != NULL ? m : NULL;
  }
  return NULL;
}
