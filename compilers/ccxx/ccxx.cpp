// libccxx's runtime: the operation table, the request/reply RSRs behind remote
// calls, object placement, start-up of object processes, and the thread
// helpers.
#include "ccxx/ccxx.hpp"

#include <cxxabi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <thread>
#include <unordered_map>

namespace ccxx {

// The argument that makes a started copy of the executable serve objects.
static const char SERVE_FLAG[] = "--ccxx-serve";
static const char OP_HANDLER[] = "ccxx.op";
static const char REPLY_HANDLER[] = "ccxx.reply";
static const char FAIL_HANDLER[] = "ccxx.fail";

remote_error::remote_error(const std::string &object, const std::string &cause,
                           int code)
    : std::runtime_error("ccxx: remote call to " + object +
                         " failed: " + cause),
      object_(object), cause_(cause), code_(code) {}

sync_error::sync_error()
    : std::logic_error(
          "ccxx: sync variable written twice (a sync is single-assignment)") {}

runtime_error::runtime_error(const std::string &what, int code)
    : std::runtime_error("ccxx: " + what + ": " + nx_strerror(code)),
      code_(code) {}

stream::error::error(int c)
    : std::runtime_error(std::string("ccxx: bad data in a message: ") +
                         nx_strerror(c)),
      code(c) {}

const proc_t &here_() {
  static const proc_t h;
  return h;
}

namespace detail {

// ---------------------------------------------------------------- op table

struct op_entry {
  op_fn fn;
  bool reply;
  std::string name;
  place_fn place; // its last argument's placement, or NULL
};

// The operations by id. Filled by static initialisers (before main, in
// every process of the executable), read-only afterwards.
struct op_table {
  std::unordered_map<uint32_t, op_entry> by_id;
  // What a request looks up: open addressing on the id (a hash already) in
  // a power of two of places, at least twice the operations; no division,
  // no node to follow.
  std::vector<std::pair<uint32_t, const op_entry *>> index =
      std::vector<std::pair<uint32_t, const op_entry *>>(16);

  void index_add(uint32_t id, const op_entry *e) {
    std::size_t mask = index.size() - 1;
    std::size_t i = id & mask;
    while (index[i].second != nullptr && index[i].first != id)
      i = (i + 1) & mask;
    index[i] = {id, e};
  }
  const op_entry *find(uint32_t id) const {
    std::size_t mask = index.size() - 1;
    for (std::size_t i = id & mask; index[i].second != nullptr;
         i = (i + 1) & mask)
      if (index[i].first == id)
        return index[i].second;
    return nullptr;
  }
};

static op_table &ops() {
  static op_table table;
  return table;
}

uint32_t op_register(const char *name, op_fn fn, bool reply, place_fn place) {
  uint32_t id = nx_handler_id(name);
  op_table &t = ops();
  auto it = t.by_id.find(id);
  if (it != t.by_id.end() && it->second.name != name) {
    // Two operations would share a wire id: refuse to run rather than call
    // the wrong one.
    fprintf(stderr, "ccxx: operations '%s' and '%s' hash to the same id\n",
            name, it->second.name.c_str());
    abort();
  }
  op_entry &e = t.by_id[id];
  e = op_entry{fn, reply, name, place};
  if (2 * t.by_id.size() > t.index.size()) {
    t.index.assign(2 * t.index.size(), {0, nullptr});
    for (auto &kv : t.by_id)
      t.index_add(kv.first, &kv.second);
  } else {
    t.index_add(id, &e);
  }
  return id;
}

std::string object_name(const std::type_info &t, const nx_gp_t *gp) {
  return object_name(t, nx_gp_context(gp));
}

std::string object_name(const std::type_info &t, uint64_t context) {
  char ctx[32];
  snprintf(ctx, sizeof(ctx), "@0x%llx",
           static_cast<unsigned long long>(context));
  return type_name(t) + ctx;
}

std::string type_name(const std::type_info &t) {
  int status = 0;
  char *s = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string r = status == 0 && s != nullptr ? s : t.name();
  free(s);
  return r;
}

// ---------------------------------------------------------------- pending
// calls

// The locks that callers waiting for a reply and future states use: each
// the one its address picks, so a call or a state needs no mutex of its own
// to create or destroy, and completing a future that nobody waits on takes
// no lock at all.
struct state_lock {
  nx_mutex_t m;
  nx_cond_t c;
  state_lock() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
};
static const std::size_t STATE_LOCKS = 64;
// Used only once the runtime runs, after every static initialiser.
static state_lock state_locks[STATE_LOCKS];

static state_lock &lock_of(const void *state) {
  auto a = reinterpret_cast<std::uintptr_t>(state);
  return state_locks[(a >> 6) % STATE_LOCKS];
}

// A synchronous caller waiting for its reply (on its stack), on
// lock_of(itself). Whoever takes its slot out of the table (the reply
// handlers, fail_calls, the caller itself when the send fails) fills it and
// wakes it.
struct pending_call {
  bool done = false;
  int status = 0; // 0, or the failure's NX_E* code (-1: the method threw)
  // The result reader, run by the reply handler (the caller waits, so what
  // it writes to is alive).
  stream_fn unpack;
  // A failure's cause, and the kind (std_kind) and what() of a standard
  // exception the method threw.
  std::string cause;
  uint8_t kind = 0;
  std::string thrown;
};

// The calls waiting for replies, in a table of slots that a call's token
// names. A token travels as the address of the gp the reply goes to, so a
// reply handler receives it as its `address` argument: it costs the request
// and the reply no put or get of their own. Its low INDEX_BITS bits are the
// slot's index, the bits above them its generation, bumped whenever the
// slot is freed, so a late reply for a call that already ended (failed, or
// its slot reused) finds nothing. A slot holds a waiting caller or an
// asynchronous call's future state. No allocation per call (the table grows
// to the most calls outstanding at once), no hashing.
static const unsigned INDEX_BITS = sizeof(std::uintptr_t) >= 8 ? 32 : 20;
static const std::uintptr_t INDEX_MASK = (std::uintptr_t(1) << INDEX_BITS) - 1;
static const uint32_t GEN_MASK =
    sizeof(std::uintptr_t) >= 8 ? 0xffffffffu : 0xfffu;

struct pending_slot {
  uint32_t gen = 1;       // never 0: no token is 0
  uint32_t next_free = 0; // free list: index + 1, 0 ends it
  uint64_t context = 0;   // the target's context, for fail_calls
  pending_call *sync = nullptr;
  std::shared_ptr<future_base> async;
  bool used() const { return sync != nullptr || async != nullptr; }
};

// What a token named: its caller or its future state, taken out of the
// table.
struct pending_entry {
  pending_call *sync = nullptr;
  std::shared_ptr<future_base> async;
  explicit operator bool() const { return sync != nullptr || async; }
};

// The table's lock: held for a few instructions (a vector's growth aside),
// so a waiter spins, yielding the processor while the holder may be off it.
class table_lock {
public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed))
        std::this_thread::yield();
  }
  void unlock() { held_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> held_{false};
};

static table_lock pending_mu;
static std::vector<pending_slot> slots;
static uint32_t free_slots = 0; // index + 1 of the first free slot, or 0
static const nx_handler_id_t op_handler_id = nx_handler_id(OP_HANDLER);
static const nx_handler_id_t reply_handler_id = nx_handler_id(REPLY_HANDLER);
static const nx_handler_id_t fail_handler_id = nx_handler_id(FAIL_HANDLER);

// Puts a call in the table; returns its token, or 0 when the table is full
// (INDEX_MASK + 1 calls outstanding).
static std::uintptr_t pending_add(uint64_t context, pending_call *sync,
                                  std::shared_ptr<future_base> &&async) {
  std::lock_guard<table_lock> g(pending_mu);
  uint32_t i;
  if (free_slots != 0) {
    i = free_slots - 1;
    free_slots = slots[i].next_free;
  } else {
    if (slots.size() > INDEX_MASK)
      return 0;
    i = static_cast<uint32_t>(slots.size());
    slots.emplace_back();
  }
  pending_slot &s = slots[i];
  s.context = context;
  s.sync = sync;
  s.async = std::move(async);
  return static_cast<std::uintptr_t>(s.gen) << INDEX_BITS | i;
}

// Under pending_mu: empties slot i and returns what it held.
static pending_entry slot_take(uint32_t i) {
  pending_slot &s = slots[i];
  pending_entry e;
  e.sync = s.sync;
  e.async = std::move(s.async);
  s.sync = nullptr;
  s.gen = (s.gen + 1) & GEN_MASK;
  if (s.gen == 0)
    s.gen = 1;
  s.next_free = free_slots;
  free_slots = i + 1;
  return e;
}

// The call `token` names, taken out of the table; empty when it already
// ended (or the token is not one of ours: it came off the wire).
static pending_entry pending_take(std::uintptr_t token) {
  auto i = static_cast<uint32_t>(token & INDEX_MASK);
  std::lock_guard<table_lock> g(pending_mu);
  if (i >= slots.size() || slots[i].gen != token >> INDEX_BITS ||
      !slots[i].used())
    return pending_entry();
  return slot_take(i);
}

// Wakes a synchronous caller whose pending_call is filled in.
static void wake(pending_call *c) {
  state_lock &l = lock_of(c);
  nx_mutex_lock(&l.m);
  c->done = true;
  nx_cond_broadcast(&l.c);
  nx_mutex_unlock(&l.m);
}

// Ends a call that failed before or without a reply: remote_error(object,
// cause, status) for its caller or its future.
static void fail(pending_entry &p, int status, const std::string &cause) {
  if (p.async) {
    p.async->complete(std::make_exception_ptr(remote_error(
        object_name(*p.async->type, p.async->context), cause, status)));
    return;
  }
  p.sync->status = status;
  p.sync->cause = cause;
  wake(p.sync);
}

// Fails every call to `context` (or, when `whole_process`, to any context
// of its process).
static void fail_calls(uint64_t context, bool whole_process, int err) {
  std::vector<pending_entry> hit;
  {
    std::lock_guard<table_lock> g(pending_mu);
    for (uint32_t i = 0; i < slots.size(); i++) {
      if (!slots[i].used())
        continue;
      uint64_t c = slots[i].context;
      bool match = whole_process ? (c >> 32) == (context >> 32) : c == context;
      if (match)
        hit.push_back(slot_take(i));
    }
  }
  const char *why = err == NX_EPEERDEAD
                        ? "the object's process died"
                        : "the object's context no longer exists";
  for (pending_entry &p : hit)
    fail(p, err, why);
}

// ---------------------------------------------------------------- receive
// placement

// The objects that calls' last arguments are being received into
// (on_place made them), by the address of their elements, until the
// operation's get takes one (place_claim) or the runtime reports its frame
// lost. A report names the context and the handler only, not the frame, so
// losses are counted per context: when a context's lost frames are as many
// as its objects still outstanding, every one of them is lost (each
// outstanding object ends exactly once, by its get or by a report) and all
// are freed. Until then none is (one may still be written into). The lock
// is a plain mutex: on_place runs inside a module's receive path, and no
// thread holds it while it calls nexus.
struct placed_entry {
  placed_obj o;
  uint64_t context;
};
struct placed_count {
  std::size_t outstanding = 0, lost = 0;
};
static std::mutex place_mu;
static std::unordered_map<const void *, placed_entry> placed;
static std::unordered_map<uint64_t, placed_count> placed_counts;
// The ids of this process's contexts with ccxx's handlers (on_place may
// not ask nexus for one).
static std::unordered_map<const nx_context_t *, uint64_t> context_ids;
// This process's id: the high 32 bits of its contexts' ids.
static std::atomic<uint64_t> self_proc{0};
// ccxx::placement()'s counters, under place_mu.
static placement_stats place_stats;

// Under place_mu: frees every object of `context` when all are lost.
static void place_reclaim(uint64_t context,
                          std::vector<placed_obj> &free_later) {
  auto c = placed_counts.find(context);
  if (c == placed_counts.end() || c->second.lost < c->second.outstanding)
    return;
  for (auto it = placed.begin(); it != placed.end();) {
    if (it->second.context == context) {
      free_later.push_back(it->second.o);
      place_stats.outstanding--;
      place_stats.lost++;
      it = placed.erase(it);
    } else {
      ++it;
    }
  }
  placed_counts.erase(c);
}

static void place_free(std::vector<placed_obj> &objs) {
  for (placed_obj &o : objs)
    o.del(o.obj);
}

bool place_claim(const void *data, placed_obj *out) {
  std::vector<placed_obj> gone;
  {
    std::lock_guard<std::mutex> g(place_mu);
    auto it = placed.find(data);
    if (it == placed.end())
      return false;
    *out = it->second.o;
    uint64_t context = it->second.context;
    placed.erase(it);
    placed_counts[context].outstanding--;
    place_stats.outstanding--;
    place_stats.placed++;
    place_reclaim(context, gone);
  }
  place_free(gone);
  return true;
}

// A placed frame for `context` that no get will take: lost on the way
// (NX_EPEERDEAD), or its operation did not read it.
static void place_lost(uint64_t context) {
  std::vector<placed_obj> gone;
  {
    std::lock_guard<std::mutex> g(place_mu);
    auto c = placed_counts.find(context);
    if (c == placed_counts.end())
      return; // nothing outstanding: not one of ours
    c->second.lost++;
    place_reclaim(context, gone);
  }
  place_free(gone);
}

// The placement callback of "ccxx.op": when the operation (the request's
// first value) takes a contiguous value last, makes that value's object
// and names its storage. Calls no nexus function but the get on `lead`.
static int on_place(nx_context_t *ctx, void *, nx_buffer_t *lead,
                    std::size_t tail_bytes, nx_place_t *where) {
  uint32_t id;
  if (nx_get_uint32(lead, &id) < 0)
    return 0;
  const op_entry *op = ops().find(id);
  if (op == nullptr || op->place == nullptr)
    return 0;
  placed_obj o;
  try {
    if (!op->place(tail_bytes, &o))
      return 0;
  } catch (...) {
    return NX_ENOMEM; // std::bad_alloc, or std::length_error for a size
  }
  try {
    std::lock_guard<std::mutex> g(place_mu);
    auto c = context_ids.find(ctx);
    if (c != context_ids.end()) {
      placed.emplace(o.data, placed_entry{o, c->second});
      placed_counts[c->second].outstanding++;
      place_stats.outstanding++;
      where->addr = o.data;
      where->len = tail_bytes;
      return 1;
    }
  } catch (...) {
  }
  o.del(o.obj);
  return 0;
}

} // namespace detail

placement_stats placement() {
  std::lock_guard<std::mutex> g(detail::place_mu);
  return detail::place_stats;
}

namespace detail {

// The runtime drops an RSR or finds a peer dead: wake whoever waits for it.
static void on_error(int err, uint64_t context, uint32_t handler, void *) {
  if (getenv("CCXX_DEBUG") != nullptr)
    fprintf(stderr, "ccxx[%d]: dropped RSR: %s, context 0x%llx handler %u\n",
            (int)getpid(), nx_strerror(err), (unsigned long long)context,
            handler);
  if (err == NX_EPEERDEAD && handler == op_handler_id &&
      context >> 32 == self_proc.load(std::memory_order_relaxed)) {
    // A request to one of this process's contexts, placed, whose sender
    // died before all of it came: its object is freed, no call failed.
    place_lost(context);
    return;
  }
  if (err == NX_EPEERDEAD)
    fail_calls(context, true, err);
  else if (err == NX_ENOCONTEXT && handler == op_handler_id)
    fail_calls(context, false, err);
}

// The standard exceptions that reach the caller with their type and what()
// (the exact types: a class derived from one stays remote_error).
enum std_kind : uint8_t {
  K_NONE,
  K_LOGIC,
  K_INVALID_ARGUMENT,
  K_DOMAIN,
  K_LENGTH,
  K_OUT_OF_RANGE,
  K_RUNTIME,
  K_RANGE,
  K_OVERFLOW,
  K_UNDERFLOW,
  K_BAD_ALLOC,
};

static uint8_t std_kind_of(const std::exception &e) {
  const std::type_info &t = typeid(e);
  if (t == typeid(std::logic_error))
    return K_LOGIC;
  if (t == typeid(std::invalid_argument))
    return K_INVALID_ARGUMENT;
  if (t == typeid(std::domain_error))
    return K_DOMAIN;
  if (t == typeid(std::length_error))
    return K_LENGTH;
  if (t == typeid(std::out_of_range))
    return K_OUT_OF_RANGE;
  if (t == typeid(std::runtime_error))
    return K_RUNTIME;
  if (t == typeid(std::range_error))
    return K_RANGE;
  if (t == typeid(std::overflow_error))
    return K_OVERFLOW;
  if (t == typeid(std::underflow_error))
    return K_UNDERFLOW;
  if (t == typeid(std::bad_alloc))
    return K_BAD_ALLOC;
  return K_NONE;
}

// Throws what a failed call's reply says: one of the standard exceptions
// of kind `kind` with `what`, else remote_error(object, cause, status).
[[noreturn]] static void raise(const std::string &object, int status,
                               const std::string &cause, uint8_t kind,
                               const std::string &what) {
  switch (kind) {
  case K_LOGIC: throw std::logic_error(what);
  case K_INVALID_ARGUMENT: throw std::invalid_argument(what);
  case K_DOMAIN: throw std::domain_error(what);
  case K_LENGTH: throw std::length_error(what);
  case K_OUT_OF_RANGE: throw std::out_of_range(what);
  case K_RUNTIME: throw std::runtime_error(what);
  case K_RANGE: throw std::range_error(what);
  case K_OVERFLOW: throw std::overflow_error(what);
  case K_UNDERFLOW: throw std::underflow_error(what);
  case K_BAD_ALLOC: throw std::bad_alloc();
  default: throw remote_error(object, cause, status);
  }
}

// "ccxx.reply" (non-threaded), to the token as its address: the call
// succeeded and the buffer holds its result, which the caller's unpack
// reads here (then it is woken) or an asynchronous call's state reads.
static void on_reply(nx_context_t *, void *address, nx_buffer_t *buf) {
  pending_entry e = pending_take(reinterpret_cast<std::uintptr_t>(address));
  if (!e)
    return;
  if (e.async) {
    e.async->deliver(buf);
    return;
  }
  pending_call *p = e.sync;
  if (p->unpack) {
    stream s(buf);
    try {
      p->unpack(s);
    } catch (const stream::error &x) {
      p->status = x.code;
      p->cause = x.what();
    }
  }
  wake(p);
}

// "ccxx.fail" (non-threaded), to the token as its address: the call
// failed. It carries the status (an NX_E* code, or -1 when the method
// threw), the cause and, for -1, the kind (std_kind) and what() of the
// exception.
static void on_fail(nx_context_t *, void *address, nx_buffer_t *buf) {
  pending_entry e = pending_take(reinterpret_cast<std::uintptr_t>(address));
  if (!e)
    return;
  stream s(buf);
  int status = 0;
  uint8_t kind = K_NONE;
  std::string cause, what;
  try {
    s >> status >> cause;
    if (status == 0)
      throw stream::error(NX_EPROTO); // a failure must say what failed
    if (status == -1)
      s >> kind >> what;
  } catch (const stream::error &x) {
    status = x.code;
    cause = x.what();
    kind = K_NONE;
  }
  if (e.async) {
    future_base &st = *e.async;
    try {
      raise(object_name(*st.type, st.context), status, cause, kind, what);
    } catch (...) {
      st.complete(std::current_exception());
    }
    return;
  }
  pending_call *p = e.sync;
  p->status = status;
  p->cause = std::move(cause);
  p->kind = kind;
  p->thrown = std::move(what);
  wake(p);
}

// Sends a failure to the caller's reply gp (see on_fail).
static void send_failure(const nx_gp_t *to, int status,
                         const std::string &cause, uint8_t kind,
                         const std::string &what) {
  nx_buffer_t *out;
  if (nx_rsr_init(&out, to, fail_handler_id, 64 + cause.size() + what.size()) <
      0)
    return;
  stream s(out);
  try {
    s << status << cause;
    if (status == -1)
      s << kind << what;
  } catch (const stream::error &) {
    nx_buffer_release(out);
    return;
  }
  nx_rsr_send(out);
}

// Runs the request in `buf` (see on_op), reading it through `in`; `op`
// receives its operation once the id is read.
static void run_op(void *address, nx_buffer_t *buf, stream &in,
                   const op_entry *&op) {
  uint32_t id;
  nx_gp_t reply_to = NX_GP_NULL;
  if (nx_get_uint32(buf, &id) < 0)
    return;
  op = ops().find(id);
  if (nx_get_gp(buf, &reply_to) < 0)
    return;
  bool want_reply = nx_gp_context(&reply_to) != 0; // else one-way
  if (op == nullptr || (op->reply && !want_reply)) {
    if (want_reply)
      send_failure(&reply_to, NX_ENOHANDLER,
                   "the object's process does not know this operation "
                   "(another executable?)",
                   K_NONE, "");
    else if (op != nullptr)
      fprintf(stderr, "ccxx: refused a one-way request of an operation "
                      "with a result\n");
    nx_gp_release(&reply_to);
    return;
  }
  nx_buffer_t *out = nullptr;
  if (want_reply && nx_rsr_init(&out, &reply_to, reply_handler_id, 64) < 0) {
    nx_gp_release(&reply_to);
    return;
  }
  int status = 0;
  uint8_t kind = K_NONE;
  std::string cause, what;
  try {
    if (out != nullptr) {
      stream s(out);
      op->fn(address, in, &s);
    } else {
      op->fn(address, in, nullptr);
    }
  } catch (const stream::error &e) {
    status = e.code;
    cause = e.what();
  } catch (const std::exception &e) {
    status = -1;
    cause = std::string("the method threw: ") + e.what();
    kind = std_kind_of(e);
    what = e.what();
  } catch (...) {
    status = -1;
    cause = "the method threw a non-standard exception";
  }
  if (status == 0 && out != nullptr) {
    nx_rsr_send(out);
  } else {
    if (out != nullptr)
      nx_buffer_release(out);
    if (want_reply)
      send_failure(&reply_to, status, cause, kind, what);
    else if (status != 0)
      fprintf(stderr, "ccxx: one-way call failed: %s\n", cause.c_str());
  }
  nx_gp_release(&reply_to);
}

// "ccxx.op" (threaded): runs one operation on the object at `address`. The
// request carries the op's id, the gp the reply goes to (null for a one-way
// call; its address is the caller's token), then the arguments. A reply to
// "ccxx.reply" carries the result alone; a failure goes to "ccxx.fail".
//
// A placed request whose operation did not take the object (it failed
// before its last argument): the object is lost, as its frame's would be.
// Only an operation with a placement can have one (on_place).
static void on_op(nx_context_t *ctx, void *address, nx_buffer_t *buf) {
  stream in(buf);
  const op_entry *op = nullptr;
  run_op(address, buf, in, op);
  if (op != nullptr && op->place != nullptr && !in.claimed() &&
      nx_buffer_placement(buf) == 1)
    place_lost(nx_context_id(ctx));
}

static int register_handlers(nx_context_t *ctx) {
  int r =
      nx_handler_register(ctx, OP_HANDLER, on_op, NX_HANDLER_THREADED, nullptr);
  if (r == 0)
    r = nx_handler_set_place(ctx, OP_HANDLER, on_place);
  if (r == 0)
    r = nx_handler_register(ctx, REPLY_HANDLER, on_reply,
                            NX_HANDLER_NONTHREADED, nullptr);
  if (r == 0)
    r = nx_handler_register(ctx, FAIL_HANDLER, on_fail, NX_HANDLER_NONTHREADED,
                            nullptr);
  if (r == 0) {
    uint64_t id = nx_context_id(ctx);
    self_proc.store(id >> 32, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(place_mu);
    context_ids[ctx] = id;
  }
  return r;
}

// Waits until the runtime reads no value a call put by reference (the
// frame is sent, or failed). Their release comes before the reply in
// practice; when not, this polls, driving progress, until it does.
static void pin_wait(ref_pin &pin) {
  if (pin.held.load(std::memory_order_acquire) == 0)
    return;
  state_lock &l = lock_of(&pin);
  nx_mutex_lock(&l.m);
  while (pin.held.load(std::memory_order_acquire) != 0) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 100000;
    if (t.tv_nsec >= 1000000000) {
      t.tv_sec++;
      t.tv_nsec -= 1000000000;
    }
    nx_cond_timedwait(&l.c, &l.m, &t);
  }
  nx_mutex_unlock(&l.m);
}

// The request of op `id` to `target` (see on_op); `token` 0 makes it
// one-way. Returns 0, or an error and its cause.
// `pin` (may be NULL) lets large contiguous arguments go by reference.
static int make_request(const nx_gp_t *target, uint32_t id,
                        std::uintptr_t token, stream_fn pack, ref_pin *pin,
                        nx_buffer_t **out, std::string &cause) {
  nx_buffer_t *buf;
  int r = nx_rsr_init(&buf, target, op_handler_id, 64);
  if (r < 0) {
    cause = nx_strerror(r);
    return r;
  }
  nx_gp_t me = NX_GP_NULL;
  if (token != 0 &&
      (r = nx_gp_make(reinterpret_cast<void *>(token), &me)) < 0) {
    nx_buffer_release(buf);
    cause = nx_strerror(r);
    return r;
  }
  try {
    stream s(buf, pin);
    s << id;
    stream::check(nx_put_gp(buf, &me));
    if (pack)
      pack(s);
  } catch (const stream::error &e) {
    nx_buffer_release(buf);
    nx_gp_release(&me);
    cause = e.what();
    return e.code;
  }
  nx_gp_release(&me);
  *out = buf;
  return 0;
}

static const char TOO_MANY[] = "too many calls outstanding";

void op_call(const nx_gp_t *target, uint32_t id, bool reply, stream_fn pack,
             stream_fn unpack, const std::type_info &type) {
  // The object's name is built only for an error.
  auto what = [&type, target] { return object_name(type, target); };
  uint64_t context = nx_gp_context(target); // 0: a null gp
  if (context == 0)
    throw remote_error(what(), "null global pointer", NX_EINVAL);
  nx_buffer_t *buf;
  std::string cause;
  int r;
  // The arguments `pack` reads live until this returns: large ones go by
  // reference, and this waits until the runtime is done with them.
  ref_pin pin;
  if (!reply) {
    if ((r = make_request(target, id, 0, pack, &pin, &buf, cause)) == 0)
      r = nx_rsr_send(buf);
    pin_wait(pin);
    if (r < 0)
      throw remote_error(what(), cause.empty() ? nx_strerror(r) : cause, r);
    return;
  }
  pending_call p;
  p.unpack = unpack;
  std::uintptr_t token = pending_add(context, &p, nullptr);
  if (token == 0)
    throw remote_error(what(), TOO_MANY, NX_ENOMEM);
  r = make_request(target, id, token, pack, &pin, &buf, cause);
  if (r == 0 && (r = nx_rsr_send(buf)) < 0)
    cause = nx_strerror(r);
  if (r < 0) {
    // Failed before the request left: unless fail_calls took it meanwhile
    // (and fails it), it fails here.
    pending_entry e = pending_take(token);
    if (e)
      fail(e, r, cause);
  }
  state_lock &l = lock_of(&p);
  nx_mutex_lock(&l.m);
  while (!p.done)
    nx_cond_wait(&l.c, &l.m);
  nx_mutex_unlock(&l.m);
  pin_wait(pin);
  // A reply handler read the result, or the failure.
  if (p.status != 0)
    raise(what(), p.status, p.cause, p.kind, p.thrown);
}

void op_async(const nx_gp_t *target, uint32_t id, stream_fn pack,
              std::shared_ptr<future_base> state) {
  uint64_t context = nx_gp_context(target); // 0: a null gp
  if (context == 0) {
    state->complete(std::make_exception_ptr(
        remote_error(object_name(*state->type, state->context),
                     "null global pointer", NX_EINVAL)));
    return;
  }
  future_base *st = state.get();
  std::uintptr_t token = pending_add(context, nullptr, std::move(state));
  if (token == 0) {
    st->complete(std::make_exception_ptr(remote_error(
        object_name(*st->type, st->context), TOO_MANY, NX_ENOMEM)));
    return;
  }
  nx_buffer_t *buf;
  std::string cause;
  int r = make_request(target, id, token, pack, nullptr, &buf, cause);
  if (r == 0 && (r = nx_rsr_send(buf)) < 0)
    cause = nx_strerror(r);
  if (r < 0) {
    pending_entry e = pending_take(token);
    if (e)
      fail(e, r, cause);
  }
}

// ---------------------------------------------------------------- futures

// The per-thread cache of state_alloc: freed blocks by size class (64-byte
// steps up to 512 bytes), at most STATE_CACHE_MAX each; a block may be freed
// by another thread than the one that took it, and joins that thread's
// cache. What a thread holds at its exit goes back to operator delete.
static const std::size_t STATE_STEP = 64, STATE_CLASSES = 8,
                         STATE_CACHE_MAX = 4096;
struct state_block {
  state_block *next;
};
// Plain data with a constant initialiser, in the initial-exec TLS model:
// reaching it is one load, where a thread_local with a destructor costs a
// call to __tls_get_addr and a guard per access. (Initial-exec takes these
// hundred bytes from the static TLS block, whose reserve holds them also
// when a program loads libccxx with dlopen.)
struct state_cache {
  state_block *head[STATE_CLASSES];
  uint32_t count[STATE_CLASSES];
  bool owned; // a state_cache_owner empties it at the thread's exit
  // Emptied at the thread's exit: a state freed later in the exit (by
  // another thread_local's destructor, or at exit by a static's, such as
  // the table of pending calls) goes straight to operator delete.
  bool gone;
};
static thread_local state_cache states
    __attribute__((tls_model("initial-exec"))) = {};

struct state_cache_owner {
  ~state_cache_owner() {
    state_cache &sc = states;
    sc.gone = true;
    for (std::size_t c = 0; c < STATE_CLASSES; c++)
      while (sc.head[c] != nullptr) {
        state_block *b = sc.head[c];
        sc.head[c] = b->next;
        ::operator delete(b);
      }
  }
};

// The first block a thread keeps makes its owner (whose destructor runs at
// the thread's exit).
static void own_states() {
  static thread_local state_cache_owner owner;
  (void)owner;
  states.owned = true;
}

static std::size_t state_class(std::size_t bytes) {
  return (bytes + STATE_STEP - 1) / STATE_STEP - 1;
}

void *state_alloc(std::size_t bytes) {
  std::size_t c = state_class(bytes);
  if (bytes == 0 || c >= STATE_CLASSES)
    return ::operator new(bytes);
  state_cache &sc = states;
  if (state_block *b = sc.head[c]) {
    sc.head[c] = b->next;
    sc.count[c]--;
    return b;
  }
  // The whole class's size: the block may join any thread's cache.
  return ::operator new((c + 1) * STATE_STEP);
}

void state_free(void *p, std::size_t bytes) noexcept {
  std::size_t c = state_class(bytes);
  state_cache &sc = states;
  if (bytes == 0 || c >= STATE_CLASSES || sc.gone ||
      sc.count[c] >= STATE_CACHE_MAX) {
    ::operator delete(p);
    return;
  }
  if (!sc.owned)
    own_states();
  auto *b = static_cast<state_block *>(p);
  b->next = sc.head[c];
  sc.head[c] = b;
  sc.count[c]++;
}

enum : unsigned { F_DONE = 1, F_WAITERS = 2, F_THEN = 4 };

// F_DONE is set (release) after the value and error_ are written: a reader
// that sees it (acquire) sees them.
bool future_base::ready() {
  return flags_.load(std::memory_order_acquire) & F_DONE;
}

void future_base::wait() {
  unsigned f = flags_.load(std::memory_order_acquire);
  if (f & F_DONE)
    return;
  state_lock &l = lock_of(this);
  nx_mutex_lock(&l.m);
  // Announce the waiter under the lock, unless it completed meanwhile: a
  // completion after this takes the lock to wake us, so it cannot slip
  // between the check and the sleep.
  while (!(f & F_DONE) && !flags_.compare_exchange_weak(
                              f, f | F_WAITERS, std::memory_order_acquire))
    ;
  while (!(flags_.load(std::memory_order_acquire) & F_DONE))
    nx_cond_wait(&l.c, &l.m);
  nx_mutex_unlock(&l.m);
}

void future_base::deliver(nx_buffer_t *) { complete(nullptr); }

void future_base::complete(std::exception_ptr error) {
  error_ = std::move(error);
  unsigned f = flags_.fetch_or(F_DONE, std::memory_order_acq_rel);
  if (!(f & (F_WAITERS | F_THEN)))
    return;
  std::vector<std::function<void()>> then;
  state_lock &l = lock_of(this);
  nx_mutex_lock(&l.m);
  then.swap(then_);
  if (f & F_WAITERS)
    nx_cond_broadcast(&l.c);
  nx_mutex_unlock(&l.m);
  for (auto &fn : then)
    fn();
}

void future_base::on_ready(std::function<void()> f) {
  state_lock &l = lock_of(this);
  nx_mutex_lock(&l.m);
  unsigned fl = flags_.load(std::memory_order_acquire);
  if (!(fl & F_DONE)) {
    then_.push_back(std::move(f));
    // Unless it completed meanwhile, complete will take the lock and run
    // then_; if it did, complete did not look at then_: run f here.
    while (!(fl & F_DONE) && !flags_.compare_exchange_weak(
                                 fl, fl | F_THEN, std::memory_order_acq_rel))
      ;
    if (!(fl & F_DONE)) {
      nx_mutex_unlock(&l.m);
      return;
    }
    f = std::move(then_.back());
    then_.pop_back();
  }
  nx_mutex_unlock(&l.m);
  f();
}

// ---------------------------------------------------------------- placement

// An in-process placement: the constructor to run in the new context, and
// what it threw there (with the context's id, for remote_error).
struct local_place {
  const std::function<void *()> *make;
  std::exception_ptr thrown;
  uint64_t context = 0;
};

static int local_init(nx_context_t *ctx, void *arg) {
  int r = register_handlers(ctx);
  if (r < 0)
    return r;
  auto *place = static_cast<local_place *>(arg);
  void *obj;
  try {
    obj = (*place->make)();
  } catch (...) {
    place->thrown = std::current_exception();
    place->context = nx_context_id(ctx);
    return NX_EINVAL;
  }
  // The gp the creator gets names the context's data: the object.
  return nx_context_set_data(ctx, obj);
}

nx_gp_t place_local(const std::function<void *()> &make,
                    const std::type_info &type) {
  local_place place{&make, nullptr};
  nx_gp_t gp = NX_GP_NULL;
  int r = nx_context_create_local(local_init, &place, &gp);
  if (place.thrown) {
    // As a constructor in a process context reports it (on_op): a standard
    // exception with its type and what(), anything else as remote_error.
    std::string object = object_name(type, place.context);
    try {
      std::rethrow_exception(place.thrown);
    } catch (const std::exception &e) {
      raise(object, -1, std::string("the method threw: ") + e.what(),
            std_kind_of(e), e.what());
    } catch (...) {
      raise(object, -1, "the method threw a non-standard exception", K_NONE,
            "");
    }
  }
  if (r < 0)
    throw runtime_error("nx_context_create_local", r);
  return gp;
}

static std::string self_exe() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    return "";
  path[n] = '\0';
  return path;
}

nx_gp_t place_process(const std::string &spec, uint32_t ctor, stream_fn pack,
                      const std::type_info &type) {
  nx_node_t node;
  int r = nx_nodes_acquire(spec.c_str(), 1, &node);
  if (r < 0)
    throw runtime_error("nx_nodes_acquire(\"" + spec + "\")", r);
  std::string exe = self_exe();
  char *const argv[] = {const_cast<char *>(exe.c_str()),
                        const_cast<char *>(SERVE_FLAG), nullptr};
  nx_gp_t ctx = NX_GP_NULL;
  r = nx_context_create(&node, exe.c_str(), argv, &ctx);
  nx_node_release(&node);
  if (r < 0)
    throw runtime_error("nx_context_create", r);
  nx_gp_t obj = NX_GP_NULL;
  try {
    op_call(
        &ctx, ctor, true, pack,
        [&obj](stream &s) { stream::check(nx_get_gp(s.buffer(), &obj)); },
        type);
  } catch (...) {
    nx_context_destroy(&ctx);
    nx_gp_release(&ctx);
    throw;
  }
  nx_gp_release(&ctx);
  return obj;
}

int destroy_context(nx_gp_t *gp, uint32_t del, const std::type_info &type) {
  int result = 0;
  try {
    op_call(gp, del, true, nullptr, nullptr, type);
  } catch (const remote_error &e) {
    result = e.code() < 0 ? e.code() : NX_EPROTO;
  }
  if (result == NX_EPEERDEAD) {
    // The process is gone already; nx_finalize reaps it. Destroying it now
    // races with libnexus's process monitor, which may still be handling
    // the hang-up (a use-after-free in nexus/src/processes/ under ASan).
    nx_gp_release(gp);
    return result;
  }
  int r = nx_context_destroy(gp);
  nx_gp_release(gp);
  return result < 0 ? result : r;
}

// ---------------------------------------------------------------- atomic

static std::mutex atomic_mu;
static std::unordered_map<const void *, std::unique_ptr<monitor>> atomic_locks;

monitor::monitor() {
  nx_mutex_init(&m_);
  nx_cond_init(&c_);
}

monitor::~monitor() {
  nx_cond_destroy(&c_);
  nx_mutex_destroy(&m_);
}

void monitor::lock() {
  uint64_t me = nx_thread_id();
  nx_mutex_lock(&m_);
  while (depth_ > 0 && owner_ != me)
    nx_cond_wait(&c_, &m_);
  owner_ = me;
  depth_++;
  nx_mutex_unlock(&m_);
}

void monitor::unlock() {
  nx_mutex_lock(&m_);
  if (--depth_ == 0)
    nx_cond_signal(&c_);
  nx_mutex_unlock(&m_);
}

monitor &atomic_lock(const void *object) {
  std::lock_guard<std::mutex> g(atomic_mu);
  auto &m = atomic_locks[object];
  if (!m)
    m.reset(new monitor);
  return *m;
}

void atomic_forget(const void *object) {
  std::lock_guard<std::mutex> g(atomic_mu);
  atomic_locks.erase(object);
}

} // namespace detail

// ---------------------------------------------------------------- start-up

static int init_depth = 0;
// The handle of detail::on_error (nx_error_cb_add), beside the program's.
static int error_cb = 0;

int init(int &argc, char **&argv) {
  if (init_depth++ > 0)
    return 0;
  bool serve = argc > 1 && std::strcmp(argv[1], SERVE_FLAG) == 0;
  int r = nx_init(&argc, &argv);
  if (r < 0) {
    fprintf(stderr, "ccxx: nx_init: %s\n", nx_strerror(r));
    init_depth = 0;
    return r;
  }
  r = detail::register_handlers(nx_context_self());
  if (r == 0 && (r = nx_error_cb_add(detail::on_error, nullptr)) > 0) {
    error_cb = r;
    r = 0;
  }
  if (r < 0) {
    fprintf(stderr, "ccxx: registering handlers: %s\n", nx_strerror(r));
    nx_finalize();
    init_depth = 0;
    return r;
  }
  if (serve) {
    // A processor-object process: objects arrive by RSR; the creator ends
    // it with nx_context_destroy.
    r = nx_context_serve();
    int f = nx_finalize();
    std::exit(r == 0 && f == 0 ? 0 : 1);
  }
  return 0;
}

static std::mutex spawn_mu;
static std::condition_variable spawn_cv;
static int spawned = 0;

int finalize() {
  {
    std::unique_lock<std::mutex> g(spawn_mu);
    spawn_cv.wait(g, [] { return spawned == 0; });
  }
  if (init_depth == 0 || --init_depth > 0)
    return 0;
  if (error_cb > 0)
    nx_error_cb_remove(error_cb);
  error_cb = 0;
  return nx_finalize();
}

template <class Fn> static int start_with(int argc, char **argv, Fn fn) {
  int r = init(argc, argv);
  if (r < 0)
    return 1;
  int status;
  try {
    status = fn(argc, argv);
  } catch (const std::exception &e) {
    fprintf(stderr, "%s\n", e.what());
    status = 1;
  }
  if (finalize() < 0 && status == 0)
    status = 1;
  return status;
}

int start(int argc, char **argv, int (*main_fn)(int, char **)) {
  return start_with(argc, argv, main_fn);
}

int start(int argc, char **argv, int (*main_fn)()) {
  return start_with(argc, argv, [main_fn](int, char **) { return main_fn(); });
}

// ---------------------------------------------------------------- threads

// Counts running threads; the waiter sleeps on a nexus condition variable,
// so a handler waiting here on the progress thread hands progress on
// (std::thread::join would stall every reply the threads wait for).
class latch {
public:
  explicit latch(long n) : n_(n) {
    nx_mutex_init(&m_);
    nx_cond_init(&c_);
  }
  ~latch() {
    nx_cond_destroy(&c_);
    nx_mutex_destroy(&m_);
  }
  void count_down() {
    nx_mutex_lock(&m_);
    if (--n_ == 0)
      nx_cond_broadcast(&c_);
    nx_mutex_unlock(&m_);
  }
  void wait() {
    nx_mutex_lock(&m_);
    while (n_ > 0)
      nx_cond_wait(&c_, &m_);
    nx_mutex_unlock(&m_);
  }

private:
  nx_mutex_t m_;
  nx_cond_t c_;
  long n_;
};

void par_run(std::vector<std::function<void()>> &tasks) {
  if (tasks.empty())
    return;
  std::vector<std::exception_ptr> errors(tasks.size());
  std::vector<std::thread> threads;
  threads.reserve(tasks.size() - 1);
  latch done(static_cast<long>(tasks.size()) - 1);
  for (size_t i = 1; i < tasks.size(); i++)
    threads.emplace_back([&tasks, &errors, &done, i] {
      try {
        tasks[i]();
      } catch (...) {
        errors[i] = std::current_exception();
      }
      done.count_down();
    });
  // The caller runs the first statement itself: one thread fewer.
  try {
    tasks[0]();
  } catch (...) {
    errors[0] = std::current_exception();
  }
  done.wait();
  for (auto &t : threads)
    t.join();
  for (auto &e : errors)
    if (e)
      std::rethrow_exception(e);
}

static long parfor_threads() {
  static const long n = [] {
    const char *s = std::getenv("CCXX_PARFOR_THREADS");
    long v = s != nullptr ? std::strtol(s, nullptr, 10) : 0;
    if (v <= 0)
      v = static_cast<long>(std::thread::hardware_concurrency());
    return v > 0 ? v : 1;
  }();
  return n;
}

void parfor_run(long begin, long end, const std::function<void(long)> &body) {
  if (end <= begin)
    return;
  long n = end - begin;
  long workers = std::min(n, parfor_threads());
  std::atomic<long> next{begin};
  std::mutex err_mu;
  std::exception_ptr error;
  // Threads take runs of iterations (a sixteenth of a thread's share):
  // one shared counter bump per iteration costs more than an empty body.
  long grain = std::max(1L, n / (workers * 16));
  auto work = [&] {
    for (long first; (first = next.fetch_add(grain)) < end;) {
      long last = std::min(end, first + grain);
      for (long i = first; i < last; i++) {
        try {
          body(i);
        } catch (...) {
          std::lock_guard<std::mutex> g(err_mu);
          if (!error)
            error = std::current_exception();
        }
      }
    }
  };
  std::vector<std::thread> threads;
  latch done(workers - 1);
  for (long w = 1; w < workers; w++)
    threads.emplace_back([&work, &done] {
      work();
      done.count_down();
    });
  work();
  done.wait();
  for (auto &t : threads)
    t.join();
  if (error)
    std::rethrow_exception(error);
}

void parfor_group::run() {
  parfor_run(0, static_cast<long>(tasks_.size()),
             [this](long i) { tasks_[i](); });
  tasks_.clear();
}

void spawn_run(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(spawn_mu);
    spawned++;
  }
  std::thread([f = std::move(f)] {
    try {
      f();
    } catch (const std::exception &e) {
      fprintf(stderr, "ccxx: a spawned function threw: %s\n", e.what());
    }
    std::lock_guard<std::mutex> g(spawn_mu);
    if (--spawned == 0)
      spawn_cv.notify_all();
  }).detach();
}

} // namespace ccxx
