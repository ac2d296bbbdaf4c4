// libccxx: the CC++-style runtime (processor objects, global pointers, sync,
// par, parfor, spawn, atomic) on nexus RSRs.
#ifndef CCXX_CCXX_HPP
#define CCXX_CCXX_HPP

#include <nexus.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <typeinfo>
#include <type_traits>
#include <utility>
#include <vector>

// What libccxx exports: this header's non-template functions and classes
// (detail:: included: its templates call them); everything else in the
// library is hidden.
#define CCXX_API __attribute__((visibility("default")))

namespace ccxx {

// ---------------------------------------------------------------- errors

// A remote operation failed: the object is dead or unreachable, the remote
// code threw, or the data did not unpack. what() reads
// "ccxx: remote call to <object> failed: <cause>".
class CCXX_API remote_error : public std::runtime_error {
public:
  remote_error(const std::string &object, const std::string &cause, int code);
  const std::string &object() const noexcept { return object_; }
  const std::string &cause() const noexcept { return cause_; }
  int code() const noexcept { return code_; } // an NX_E* code, or 0
private:
  std::string object_, cause_;
  int code_;
};

// A sync variable was written a second time. what() is exactly
// "ccxx: sync variable written twice (a sync is single-assignment)".
class CCXX_API sync_error : public std::logic_error {
public:
  sync_error();
};

// A nexus call the runtime needed failed (start-up, creation). what() names
// the call and the nexus error.
class CCXX_API runtime_error : public std::runtime_error {
public:
  runtime_error(const std::string &what, int code);
  int code() const noexcept { return code_; }

private:
  int code_;
};

// ---------------------------------------------------------------- start-up

// Starts the runtime for this process (nx_init, the ccxx handlers in the
// initial context). When this process is a processor-object process started
// by ccxx::create, it serves its objects and exits instead of returning.
// Returns 0 when the program should run its main. Call it first in main, or
// let ccxx::start call it.
CCXX_API int init(int &argc, char **&argv);

// Waits for spawned threads, then stops the runtime (nx_finalize).
// Returns 0 or the nx_finalize error.
CCXX_API int finalize();

// init, then main_fn, then finalize; an uncaught ccxx exception is printed
// and gives exit status 1. The translator's main calls this.
CCXX_API int start(int argc, char **argv, int (*main_fn)(int, char **));
CCXX_API int start(int argc, char **argv, int (*main_fn)());

// Receive placement in this process (docs/ccxx.md, "Large arguments"):
// `placed`, call arguments received straight into their object and moved
// into the call (no copy); `outstanding`, objects made for arguments still
// arriving; `lost`, objects freed because their request was lost after it
// was placed (its sender died midway) or its operation did not read them.
struct placement_stats {
  uint64_t placed = 0;
  uint64_t outstanding = 0;
  uint64_t lost = 0;
};
CCXX_API placement_stats placement();

// ---------------------------------------------------------------- marshalling

template <class T> class global_ptr;

namespace detail {
// The values a call's arguments put by reference (nx_put_*_ref): how many
// the runtime still reads. The caller keeps its arguments until none is
// left (op_call waits for it).
struct ref_pin {
  std::atomic<int> held{0};
  static void release(void *arg, const void *, int) {
    static_cast<ref_pin *>(arg)->held.fetch_sub(1, std::memory_order_release);
  }
};
} // namespace detail

// The data transfer stream: wraps a nexus buffer. operator<< packs,
// operator>> unpacks (throws remote_error-compatible stream failures as
// ccxx::stream::error).
class stream {
public:
  struct CCXX_API error : std::runtime_error {
    explicit error(int code);
    int code;
  };
  // `pin`, when given, lets large contiguous values go by reference: the
  // caller keeps them unchanged until pin->held is 0 again.
  explicit stream(nx_buffer_t *buf, detail::ref_pin *pin = nullptr)
      : buf_(buf), pin_(pin) {}
  nx_buffer_t *buffer() const { return buf_; }
  detail::ref_pin *pin() const { return pin_; }
  // Whether a get took a placed argument's object (receive placement:
  // docs/ccxx.md, "Large arguments").
  bool claimed() const { return claimed_; }
  void set_claimed() { claimed_ = true; }
  // Throws stream::error when `r` is a nexus error.
  static void check(int r) {
    if (r < 0)
      throw error(r);
  }

private:
  nx_buffer_t *buf_;
  detail::ref_pin *pin_;
  bool claimed_ = false;
};

#define CCXX_STREAM_FUNDAMENTAL(T, PUT, GET, WIRE)                             \
  inline stream &operator<<(stream &s, const T &v) {                           \
    stream::check(PUT(s.buffer(), static_cast<WIRE>(v)));                      \
    return s;                                                                  \
  }                                                                            \
  inline stream &operator>>(stream &s, T &v) {                                 \
    WIRE w;                                                                    \
    stream::check(GET(s.buffer(), &w));                                        \
    v = static_cast<T>(w);                                                     \
    return s;                                                                  \
  }
CCXX_STREAM_FUNDAMENTAL(bool, nx_put_uint8, nx_get_uint8, uint8_t)
CCXX_STREAM_FUNDAMENTAL(char, nx_put_char, nx_get_char, char)
CCXX_STREAM_FUNDAMENTAL(signed char, nx_put_int8, nx_get_int8, int8_t)
CCXX_STREAM_FUNDAMENTAL(unsigned char, nx_put_uint8, nx_get_uint8, uint8_t)
CCXX_STREAM_FUNDAMENTAL(short, nx_put_int16, nx_get_int16, int16_t)
CCXX_STREAM_FUNDAMENTAL(unsigned short, nx_put_uint16, nx_get_uint16, uint16_t)
CCXX_STREAM_FUNDAMENTAL(int, nx_put_int32, nx_get_int32, int32_t)
CCXX_STREAM_FUNDAMENTAL(unsigned, nx_put_uint32, nx_get_uint32, uint32_t)
CCXX_STREAM_FUNDAMENTAL(long, nx_put_int64, nx_get_int64, int64_t)
CCXX_STREAM_FUNDAMENTAL(unsigned long, nx_put_uint64, nx_get_uint64, uint64_t)
CCXX_STREAM_FUNDAMENTAL(long long, nx_put_int64, nx_get_int64, int64_t)
CCXX_STREAM_FUNDAMENTAL(unsigned long long, nx_put_uint64, nx_get_uint64,
                        uint64_t)
CCXX_STREAM_FUNDAMENTAL(float, nx_put_float, nx_get_float, float)
CCXX_STREAM_FUNDAMENTAL(double, nx_put_double, nx_get_double, double)
#undef CCXX_STREAM_FUNDAMENTAL

namespace detail {
// Receive placement of a call's last argument (docs/ccxx.md, "Large
// arguments"): the object the runtime made for it when the call's leading
// values were in, and whose storage the argument's elements were received
// into.
struct placed_obj {
  void *obj = nullptr;  // a new std::vector<T> or std::string
  void *data = nullptr; // its elements
  void (*del)(void *) = nullptr;
  const std::type_info *type = nullptr;
};
// Takes the object placed at `data` out of the runtime's table (false:
// none is).
CCXX_API bool place_claim(const void *data, placed_obj *out);

// The typed nexus arrays a contiguous value travels as: W is the element
// type on the wire, `scale` wire elements make one T. void: element by
// element.
template <std::size_t Size, bool Signed> struct sized_int {
  using type = void;
};
template <> struct sized_int<1, true> { using type = int8_t; };
template <> struct sized_int<1, false> { using type = uint8_t; };
template <> struct sized_int<2, true> { using type = int16_t; };
template <> struct sized_int<2, false> { using type = uint16_t; };
template <> struct sized_int<4, true> { using type = int32_t; };
template <> struct sized_int<4, false> { using type = uint32_t; };
template <> struct sized_int<8, true> { using type = int64_t; };
template <> struct sized_int<8, false> { using type = uint64_t; };
template <class T> struct array_wire {
  using type = void;
  static constexpr std::size_t scale = 1;
};
template <> struct array_wire<char> {
  using type = char;
  static constexpr std::size_t scale = 1;
};
template <> struct array_wire<float> {
  using type = float;
  static constexpr std::size_t scale = 1;
};
template <> struct array_wire<double> {
  using type = double;
  static constexpr std::size_t scale = 1;
};
// Integers other than char and bool: by size and signedness (what their
// single values' puts write, so the receiver converts byte order alike).
template <class T>
constexpr bool int_array_v =
    std::is_integral_v<T> && !std::is_same_v<T, bool> &&
    !std::is_same_v<T, char>;
template <class T> struct int_array_wire {
  using type = typename sized_int<sizeof(T), std::is_signed_v<T>>::type;
  static constexpr std::size_t scale = 1;
};
// Opaque trivially copyable classes (those the stream writes as bytes):
// one array of bytes, never converted.
struct opaque_byte {};
template <class T> struct opaque_array_wire {
  using type = opaque_byte;
  static constexpr std::size_t scale = sizeof(T);
};
#define CCXX_ARRAY_IO(W, NAME)                                                 \
  inline int put_array(nx_buffer_t *b, const W *v, std::size_t n) {            \
    return nx_put_##NAME##_array(b, v, n);                                     \
  }                                                                            \
  inline int put_array_ref(nx_buffer_t *b, const W *v, std::size_t n,          \
                           nx_release_fn fn, void *arg) {                      \
    return nx_put_##NAME##_array_ref(b, v, n, fn, arg);                        \
  }                                                                            \
  inline int get_array(nx_buffer_t *b, W *v, std::size_t n) {                  \
    return nx_get_##NAME##_array(b, v, n);                                     \
  }                                                                            \
  inline int get_array_ptr(nx_buffer_t *b, const W **v, std::size_t n) {       \
    return nx_get_##NAME##_array_ptr(b, v, n);                                 \
  }
CCXX_ARRAY_IO(char, char)
CCXX_ARRAY_IO(int8_t, int8)
CCXX_ARRAY_IO(uint8_t, uint8)
CCXX_ARRAY_IO(int16_t, int16)
CCXX_ARRAY_IO(uint16_t, uint16)
CCXX_ARRAY_IO(int32_t, int32)
CCXX_ARRAY_IO(uint32_t, uint32)
CCXX_ARRAY_IO(int64_t, int64)
CCXX_ARRAY_IO(uint64_t, uint64)
CCXX_ARRAY_IO(float, float)
CCXX_ARRAY_IO(double, double)
#undef CCXX_ARRAY_IO
inline int put_array(nx_buffer_t *b, const opaque_byte *v, std::size_t n) {
  return nx_put_bytes(b, v, n);
}
inline int put_array_ref(nx_buffer_t *b, const opaque_byte *v, std::size_t n,
                         nx_release_fn fn, void *arg) {
  return nx_put_bytes_ref(b, v, n, fn, arg);
}
inline int get_array(nx_buffer_t *b, opaque_byte *v, std::size_t n) {
  return nx_get_bytes(b, v, n);
}
inline int get_array_ptr(nx_buffer_t *b, const opaque_byte **v, std::size_t n) {
  return nx_get_bytes_ptr(b, reinterpret_cast<const void **>(v), n);
}

// Puts `n` values of type T at `v` as one array of W (after the count the
// caller put): by reference when the stream allows it and they are large
// enough to be placed at the receiver, else copied.
template <class W, std::size_t Scale, class T>
void put_contiguous(stream &s, const T *v, std::size_t n) {
  const W *w = reinterpret_cast<const W *>(v);
  ref_pin *pin = s.pin();
  if (pin != nullptr && n * sizeof(T) >= NX_PLACE_MIN) {
    pin->held.fetch_add(1, std::memory_order_relaxed);
    int r = put_array_ref(s.buffer(), w, n * Scale, ref_pin::release, pin);
    if (r < 0)
      pin->held.fetch_sub(1, std::memory_order_relaxed); // not called
    stream::check(r);
    return;
  }
  stream::check(put_array(s.buffer(), w, n * Scale));
}

// Reads the array of `n` T into `v` (a std::vector<T> or std::string, its
// count read already). A placed one (the call's last argument, received
// into an object the placement callback made) is moved in: no copy.
template <class W, std::size_t Scale, class V>
void get_contiguous(stream &s, V &v, std::size_t n) {
  using T = typename V::value_type;
  nx_buffer_t *b = s.buffer();
  if (n * sizeof(T) >= NX_PLACE_MIN && nx_buffer_placement(b) == 1) {
    const W *p;
    stream::check(get_array_ptr(b, &p, n * Scale));
    placed_obj o;
    if (place_claim(p, &o)) {
      s.set_claimed();
      if (*o.type == typeid(V)) {
        v = std::move(*static_cast<V *>(o.obj));
        o.del(o.obj);
        return;
      }
      // Not the type the callback made (another executable's operation
      // of the same id): copied out before the object goes.
      v.resize(n);
      std::memcpy(static_cast<void *>(&v[0]), p, n * sizeof(T));
      o.del(o.obj);
      return;
    }
    v.resize(n);
    std::memcpy(static_cast<void *>(&v[0]), p, n * sizeof(T));
    return;
  }
  v.resize(n);
  if (n != 0)
    stream::check(get_array(b, reinterpret_cast<W *>(&v[0]), n * Scale));
  else
    stream::check(get_array(b, static_cast<W *>(nullptr), 0));
}
} // namespace detail

// A string: its length, then its bytes as one array (placed at the
// receiver when it is a call's last argument: docs/ccxx.md).
inline stream &operator<<(stream &s, const std::string &v) {
  stream::check(nx_put_uint64(s.buffer(), v.size()));
  detail::put_contiguous<detail::opaque_byte, 1>(s, v.data(), v.size());
  return s;
}
inline stream &operator>>(stream &s, std::string &v) {
  uint64_t n;
  stream::check(nx_get_uint64(s.buffer(), &n));
  if (n > nx_buffer_remaining(s.buffer()))
    throw stream::error(NX_ERANGE);
  detail::get_contiguous<detail::opaque_byte, 1>(s, v, n);
  return s;
}

// Enumerations travel as their underlying integer type.
template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
stream &operator<<(stream &s, const E &v) {
  return s << static_cast<std::underlying_type_t<E>>(v);
}
template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
stream &operator>>(stream &s, E &v) {
  std::underlying_type_t<E> u;
  s >> u;
  v = static_cast<E>(u);
  return s;
}

namespace detail {
// The number of fields of an aggregate: the most initialisers T{...} takes
// from values that convert to anything (which never brace-elide).
struct any_field {
  template <class T> operator T() const;
};
template <class T, class Seq, class = void>
struct braces_take : std::false_type {};
template <class T, std::size_t... I>
struct braces_take<T, std::index_sequence<I...>,
                   std::void_t<decltype(T{(void(I), any_field{})...})>>
    : std::true_type {};
template <class T, std::size_t N = 0> constexpr std::size_t field_count() {
  if constexpr (N > 16)
    return N; // more than the generated transfer handles (see below)
  else if constexpr (braces_take<T, std::make_index_sequence<N + 1>>::value)
    return field_count<T, N + 1>();
  else
    return N;
}

// Calls f on each field of the aggregate v in order (at most 16 fields).
template <class F, class... A> void for_each_arg(F &f, A &...a) { (f(a), ...); }
template <class T, class F> void for_each_field(T &v, F &&f) {
  constexpr std::size_t n = field_count<std::remove_const_t<T>>();
  static_assert(n <= 16,
                "ccxx: generated data transfer handles aggregates of at "
                "most 16 fields; write operator<< and operator>> for this "
                "type");
  // clang-format off
#define CCXX_FIELDS(N, ...)                                                    \
  else if constexpr (n == N) {                                                 \
    auto &[__VA_ARGS__] = v;                                                   \
    for_each_arg(f, __VA_ARGS__);                                              \
  }
  if constexpr (n == 0) {
  }
  CCXX_FIELDS(1, f1)
  CCXX_FIELDS(2, f1, f2)
  CCXX_FIELDS(3, f1, f2, f3)
  CCXX_FIELDS(4, f1, f2, f3, f4)
  CCXX_FIELDS(5, f1, f2, f3, f4, f5)
  CCXX_FIELDS(6, f1, f2, f3, f4, f5, f6)
  CCXX_FIELDS(7, f1, f2, f3, f4, f5, f6, f7)
  CCXX_FIELDS(8, f1, f2, f3, f4, f5, f6, f7, f8)
  CCXX_FIELDS(9, f1, f2, f3, f4, f5, f6, f7, f8, f9)
  CCXX_FIELDS(10, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10)
  CCXX_FIELDS(11, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11)
  CCXX_FIELDS(12, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12)
  CCXX_FIELDS(13, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13)
  CCXX_FIELDS(14, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14)
  CCXX_FIELDS(15, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15)
  CCXX_FIELDS(16, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16)
#undef CCXX_FIELDS
  // clang-format on
}

// A class whose data transfer ccxx generates: an aggregate (public fields,
// no constructors, no virtual functions), not std::array.
template <class T> struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
constexpr bool generated_v =
    std::is_class_v<T> &&std::is_aggregate_v<T> && !std::is_polymorphic_v<T> &&
    !is_std_array<T>::value;
} // namespace detail
// Aggregates of transferable fields: each field in order, through its own
// operator<< / operator>> (so every arithmetic value goes through nexus's
// typed puts and the receiver converts byte order). A user's own pair for
// the type is a better match and wins.
template <class T, std::enable_if_t<detail::generated_v<T>, int> = 0>
stream &operator<<(stream &s, const T &v) {
  detail::for_each_field(v, [&s](const auto &f) { s << f; });
  return s;
}
template <class T, std::enable_if_t<detail::generated_v<T>, int> = 0>
stream &operator>>(stream &s, T &v) {
  detail::for_each_field(v, [&s](auto &f) { s >> f; });
  return s;
}

// Other trivially copyable classes (private fields, constructors) travel as
// opaque bytes: same layout everywhere, no byte-order conversion.
template <class T,
          std::enable_if_t<std::is_trivially_copyable_v<T> &&
                               std::is_class_v<T> && !detail::generated_v<T> &&
                               !detail::is_std_array<T>::value,
                           int> = 0>
stream &operator<<(stream &s, const T &v) {
  stream::check(nx_put_bytes(s.buffer(), &v, sizeof(T)));
  return s;
}
template <class T,
          std::enable_if_t<std::is_trivially_copyable_v<T> &&
                               std::is_class_v<T> && !detail::generated_v<T> &&
                               !detail::is_std_array<T>::value,
                           int> = 0>
stream &operator>>(stream &s, T &v) {
  stream::check(nx_get_bytes(s.buffer(), &v, sizeof(T)));
  return s;
}

template <class T, std::size_t N>
stream &operator<<(stream &s, const std::array<T, N> &v) {
  for (const T &x : v)
    s << x;
  return s;
}
template <class T, std::size_t N>
stream &operator>>(stream &s, std::array<T, N> &v) {
  for (T &x : v)
    s >> x;
  return s;
}

template <class A, class B>
stream &operator<<(stream &s, const std::pair<A, B> &v) {
  return s << v.first << v.second;
}
template <class A, class B> stream &operator>>(stream &s, std::pair<A, B> &v) {
  return s >> v.first >> v.second;
}

template <class... T> stream &operator<<(stream &s, const std::tuple<T...> &v) {
  std::apply([&s](const auto &...x) { (void)(s << ... << x); }, v);
  return s;
}
template <class... T> stream &operator>>(stream &s, std::tuple<T...> &v) {
  std::apply([&s](auto &...x) { (void)(s >> ... >> x); }, v);
  return s;
}

template <class T> stream &operator<<(stream &s, const std::optional<T> &v) {
  s << v.has_value();
  if (v)
    s << *v;
  return s;
}
template <class T> stream &operator>>(stream &s, std::optional<T> &v) {
  bool has;
  s >> has;
  if (!has) {
    v.reset();
    return s;
  }
  T x{};
  s >> x;
  v = std::move(x);
  return s;
}

template <class K, class V, class C, class A>
stream &operator<<(stream &s, const std::map<K, V, C, A> &m) {
  stream::check(nx_put_uint64(s.buffer(), m.size()));
  for (const auto &kv : m)
    s << kv.first << kv.second;
  return s;
}
template <class K, class V, class C, class A>
stream &operator>>(stream &s, std::map<K, V, C, A> &m) {
  uint64_t n;
  stream::check(nx_get_uint64(s.buffer(), &n));
  if (n > nx_buffer_remaining(s.buffer()))
    throw stream::error(NX_ERANGE);
  m.clear();
  for (uint64_t i = 0; i < n; i++) {
    K k{};
    V v{};
    s >> k >> v;
    m.emplace(std::move(k), std::move(v));
  }
  return s;
}

namespace detail {
// How a std::vector<T>'s elements travel: one typed array (arithmetic
// types but bool; the opaque trivially copyable classes, as bytes), else
// element by element (void).
template <class T>
using vector_wire = std::conditional_t<
    int_array_v<T>, int_array_wire<T>,
    std::conditional_t<std::is_trivially_copyable_v<T> && std::is_class_v<T> &&
                           !generated_v<T> && !is_std_array<T>::value,
                       opaque_array_wire<T>, array_wire<T>>>;
template <class T>
constexpr bool vector_contiguous_v =
    !std::is_void_v<typename vector_wire<T>::type>;
} // namespace detail

template <class T> stream &operator<<(stream &s, const std::vector<T> &v) {
  stream::check(nx_put_uint64(s.buffer(), v.size()));
  if constexpr (detail::vector_contiguous_v<T>) {
    using w = detail::vector_wire<T>;
    detail::put_contiguous<typename w::type, w::scale>(s, v.data(), v.size());
  } else {
    for (const T &x : v)
      s << x;
  }
  return s;
}
template <class T> stream &operator>>(stream &s, std::vector<T> &v) {
  uint64_t n;
  stream::check(nx_get_uint64(s.buffer(), &n));
  // Every element takes at least one byte: a length larger than what is
  // left is malformed, not a reason to allocate.
  if (n > nx_buffer_remaining(s.buffer()))
    throw stream::error(NX_ERANGE);
  if constexpr (detail::vector_contiguous_v<T>) {
    using w = detail::vector_wire<T>;
    detail::get_contiguous<typename w::type, w::scale>(s, v, n);
  } else {
    v.clear();
    v.resize(n);
    for (uint64_t i = 0; i < n; i++)
      s >> v[i];
  }
  return s;
}

// ---------------------------------------------------------------- internals

namespace detail {

// The code of one remote operation: reads its arguments from `in`, works on
// the object at `address`, writes the result (if any) to `out` (NULL for a
// one-way operation).
using op_fn = void (*)(void *address, stream &in, stream *out);

// Makes the object a call's last argument is received into (receive
// placement): for a tail of `tail_bytes` bytes, a new value of the
// argument's type with room for exactly them. False: not this type's size.
using place_fn = bool (*)(std::size_t tail_bytes, placed_obj *out);

template <class V> struct placeable : std::false_type {};
template <class T>
struct placeable<std::vector<T>> : std::bool_constant<vector_contiguous_v<T>> {
};
template <> struct placeable<std::string> : std::true_type {};

// The elements are value-initialised (std::vector and std::string have no
// other way to get their size) and then overwritten by the module.
template <class V> bool place_make(std::size_t tail_bytes, placed_obj *out) {
  using T = typename V::value_type;
  if (tail_bytes % sizeof(T) != 0)
    return false;
  auto *v = new V();
  try {
    v->resize(tail_bytes / sizeof(T));
  } catch (...) {
    delete v;
    throw;
  }
  out->obj = v;
  out->data = &(*v)[0];
  out->del = [](void *o) { delete static_cast<V *>(o); };
  out->type = &typeid(V);
  return true;
}

// The placement of an operation whose arguments are the tuple's types:
// its last one's, if that is a contiguous value, else none.
template <class Tuple> struct tuple_placer {
  static constexpr place_fn fn = nullptr;
};
template <class V> constexpr place_fn placer_of() {
  if constexpr (placeable<V>::value)
    return &place_make<V>;
  else
    return nullptr;
}
template <class A0, class... A> struct tuple_placer<std::tuple<A0, A...>> {
  static constexpr place_fn fn =
      placer_of<std::tuple_element_t<sizeof...(A), std::tuple<A0, A...>>>();
};

// Registers an operation under the mangled name of its template instance
// (typeid: it names the member function with its parameter types, so
// overloads differ); every process of the executable computes the same id.
// `place` (may be NULL) makes the object its last argument lands in.
CCXX_API uint32_t op_register(const char *name, op_fn fn, bool reply,
                              place_fn place = nullptr);

// A reference to a callable that packs into or unpacks from a stream:
// what a call's pack and unpack are, valid while the call runs. Calling it
// is one indirect call; std::function would add its manager's calls.
class stream_fn {
public:
  stream_fn() = default;
  stream_fn(std::nullptr_t) {}
  template <class F, class D = std::remove_cv_t<std::remove_reference_t<F>>,
            std::enable_if_t<!std::is_same_v<D, stream_fn> &&
                                 !std::is_same_v<D, std::nullptr_t>,
                             int> = 0>
  stream_fn(F &&f)
      : obj_(const_cast<void *>(static_cast<const void *>(&f))),
        call_([](void *o, stream &s) {
          (*static_cast<std::remove_reference_t<F> *>(o))(s);
        }) {}
  explicit operator bool() const { return call_ != nullptr; }
  void operator()(stream &s) const { call_(obj_, s); }

private:
  void *obj_ = nullptr;
  void (*call_)(void *, stream &) = nullptr;
};

// Sends op `id` to `target` with the arguments packed by `pack`; unless
// `reply` is false, waits for the answer and lets `unpack` read it. Throws
// remote_error, naming the object as object_name(type, target).
CCXX_API void op_call(const nx_gp_t *target, uint32_t id, bool reply,
                      stream_fn pack, stream_fn unpack,
                      const std::type_info &type);

class future_base;
// Sends op `id` to `target` with a reply and returns at once; a reply that
// says the call succeeded goes to state->deliver, a failure completes the
// state with its exception (in the runtime's reply handlers, or here when
// the send fails). The runtime holds `state` until then, so the call costs
// no allocation beyond the state itself.
CCXX_API void op_async(const nx_gp_t *target, uint32_t id, stream_fn pack,
                       std::shared_ptr<future_base> state);

// The readable name of a type (demangled).
CCXX_API std::string type_name(const std::type_info &t);
// "Counter@0x100000002": an object's type and context, for messages.
CCXX_API std::string object_name(const std::type_info &t, const nx_gp_t *gp);
CCXX_API std::string object_name(const std::type_info &t, uint64_t context);

// The recursive lock behind an object's `atomic` methods. It waits on a
// nexus condition variable, so a handler that waits for it on the progress
// thread hands progress on (a std::mutex would stall every reply). Its owner
// is an nx_thread_id: lazy threaded handlers share OS threads.
class CCXX_API monitor {
public:
  monitor();
  ~monitor();
  void lock();
  void unlock();

private:
  nx_mutex_t m_;
  nx_cond_t c_;
  uint64_t owner_ = 0;
  int depth_ = 0;
};
CCXX_API monitor &atomic_lock(const void *object);
CCXX_API void atomic_forget(const void *object);

template <class T> struct is_global_ptr : std::false_type {};
template <class T> struct is_global_ptr<global_ptr<T>> : std::true_type {};

// Remote parameters and results: no local pointers or references (they mean
// nothing in another address space). The index and type show in the
// compiler's note for this template.
template <std::size_t Index, class Param> struct check_param {
  static_assert(!std::is_pointer_v<std::remove_reference_t<Param>>,
                "ccxx: a remote method parameter is a local pointer; use "
                "T *global (ccxx::global_ptr<T>) instead (the parameter's "
                "index is Index in check_param<Index, Param>)");
  static_assert(!std::is_reference_v<Param>,
                "ccxx: a remote method parameter is a reference; pass it by "
                "value (the parameter's index is Index in check_param<Index, "
                "Param>)");
  static constexpr bool ok = true;
};

template <class... Args, std::size_t... I>
constexpr bool check_params(std::index_sequence<I...>) {
  return (true && ... && check_param<I, Args>::ok);
}

template <class Tuple, std::size_t... I>
void read_tuple(stream &in, Tuple &t, std::index_sequence<I...>) {
  (void)(in >> ... >> std::get<I>(t));
}

// How a constructor's argument travels: by value; a C string as a
// std::string (the pointer means nothing in another process).
template <class A>
using wire_t =
    std::conditional_t<std::is_same_v<std::decay_t<A>, const char *> ||
                           std::is_same_v<std::decay_t<A>, char *>,
                       std::string, std::decay_t<A>>;

template <class M> struct method_traits;
template <class C, class R, class... A> struct method_traits<R (C::*)(A...)> {
  using cls = C;
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
  static constexpr bool params_ok =
      check_params<A...>(std::index_sequence_for<A...>{});
};
template <class C, class R, class... A>
struct method_traits<R (C::*)(A...) const> : method_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct method_traits<R (C::*)(A...) noexcept> : method_traits<R (C::*)(A...)> {
};
template <class C, class R, class... A>
struct method_traits<R (C::*)(A...) const noexcept>
    : method_traits<R (C::*)(A...)> {};

// The result type of method M.
template <auto M> using result_t = typename method_traits<decltype(M)>::ret;

// What a call holds of its arguments while it packs them (inside the call,
// before it returns): an argument of the parameter's own type by const
// reference (no copy: a large vector goes from the caller's object to the
// wire), any other converted to the parameter's type. With another number
// of arguments than parameters, the parameters' tuple (whose construction
// then reports the mistake).
template <class P, class A>
using arg_hold_t =
    std::conditional_t<std::is_same_v<std::decay_t<A>, P>, const P &, P>;
template <bool Same, class Params, class... A> struct arg_holds {
  using type = Params;
};
template <class... P, class... A>
struct arg_holds<true, std::tuple<P...>, A...> {
  using type = std::tuple<arg_hold_t<P, A>...>;
};
template <class Params, class... A>
using arg_holds_t =
    typename arg_holds<std::tuple_size_v<Params> == sizeof...(A), Params,
                       A...>::type;
template <auto M, class... A>
using call_args_t =
    arg_holds_t<typename method_traits<decltype(M)>::args, A...>;

// The stub of a global class C: C::ccxx_stub_, which the translator nests in
// every global class (void when there is none).
template <class T, class = void> struct stub_of { using type = void; };
template <class T> struct stub_of<T, std::void_t<typename T::ccxx_stub_>> {
  using type = typename T::ccxx_stub_;
};

// One method as a remote operation; `name()` is unique per method.
template <auto M> struct method_op {
  using tr = method_traits<decltype(M)>;
  using C = typename tr::cls;
  using R = typename tr::ret;
  static_assert(tr::params_ok);
  static_assert(!std::is_pointer_v<R> && !std::is_reference_v<R>,
                "ccxx: a remote method returns a local pointer or reference");
  static void run(void *address, stream &in, stream *out) {
    typename tr::args args;
    read_tuple(
        in, args,
        std::make_index_sequence<std::tuple_size_v<typename tr::args>>{});
    C *obj = static_cast<C *>(address);
    if constexpr (std::is_void_v<R>) {
      std::apply([obj](auto &...a) { (obj->*M)(std::move(a)...); }, args);
    } else {
      R r = std::apply([obj](auto &...a) { return (obj->*M)(std::move(a)...); },
                       args);
      *out << r;
    }
  }
  static const char *name() { return typeid(method_op).name(); }
  static inline const uint32_t id = op_register(
      name(), run, !std::is_void_v<R>, tuple_placer<typename tr::args>::fn);
};

// Construction of a C in the current context from arguments Args.
template <class C, class... Args> struct ctor_op {
  static void run(void *, stream &in, stream *out) {
    std::tuple<Args...> args;
    read_tuple(in, args, std::index_sequence_for<Args...>{});
    C *obj =
        std::apply([](auto &...a) { return new C(std::move(a)...); }, args);
    nx_gp_t gp;
    stream::check(nx_gp_make(obj, &gp));
    int r = nx_put_gp(out->buffer(), &gp);
    nx_gp_release(&gp);
    stream::check(r);
  }
  static const char *name() { return typeid(ctor_op).name(); }
  static inline const uint32_t id =
      op_register(name(), run, true, tuple_placer<std::tuple<Args...>>::fn);
};

template <class C> struct delete_op {
  static void run(void *address, stream &, stream *out) {
    // Waits for running atomic methods, so their lock outlives them.
    atomic_lock(address).lock();
    atomic_lock(address).unlock();
    delete static_cast<C *>(address);
    atomic_forget(address);
    *out << true;
  }
  static const char *name() { return typeid(delete_op).name(); }
  static inline const uint32_t id = op_register(name(), run, true);
};

template <class T> struct sync_assign;

// Remote read and write of the T a global pointer names.
template <class T> struct get_op {
  static void run(void *address, stream &, stream *out) {
    *out << static_cast<const T &>(*static_cast<T *>(address));
  }
  static const char *name() { return typeid(get_op).name(); }
  static inline const uint32_t id = op_register(name(), run, true);
};
template <class T> struct put_op {
  static void run(void *address, stream &in, stream *out) {
    typename sync_assign<T>::value_type v;
    in >> v;
    sync_assign<T>::assign(*static_cast<T *>(address), std::move(v));
    *out << true;
  }
  static const char *name() { return typeid(put_op).name(); }
  static inline const uint32_t id = op_register(name(), run, true);
};

// Places an object: `make` runs in the new in-process context (proc_t here)
// or the op `ctor` is sent to a new process context. Returns the object's gp;
// an exception of the constructor is thrown as a remote call's would be
// (a standard one with its type and what(), else remote_error naming `type`).
CCXX_API nx_gp_t place_local(const std::function<void *()> &make,
                             const std::type_info &type);
CCXX_API nx_gp_t place_process(const std::string &spec, uint32_t ctor,
                               stream_fn pack, const std::type_info &type);
CCXX_API int destroy_context(nx_gp_t *gp, uint32_t del,
                             const std::type_info &type);

} // namespace detail

// ---------------------------------------------------------------- global_ptr

template <class T> class remote_ref;

// A global pointer: names a T in some context of the computation. Made from
// a local pointer (in the calling thread's current context), copied, sent in
// arguments, dereferenced remotely (get/put, *g, g->member via member()),
// and used to call methods (call<&T::f>(args...)).
template <class T> class global_ptr {
public:
  global_ptr() : gp_(NX_GP_NULL) {}
  global_ptr(std::nullptr_t) : gp_(NX_GP_NULL) {}
  // The gp of a local object; `&x` inside a processor object's method
  // converts to `T *global` through this.
  global_ptr(T *local) : gp_(NX_GP_NULL) {
    int r = local != nullptr ? nx_gp_make(local, &gp_) : 0;
    if (r < 0)
      throw runtime_error("nx_gp_make", r);
  }
  // Adopts `gp` (takes its reference).
  static global_ptr adopt(nx_gp_t gp) {
    global_ptr p;
    p.gp_ = gp;
    return p;
  }
  global_ptr(const global_ptr &o) : gp_(NX_GP_NULL) {
    nx_gp_copy(&o.gp_, &gp_);
  }
  global_ptr(global_ptr &&o) noexcept : gp_(o.gp_) { o.gp_ = NX_GP_NULL; }
  global_ptr &operator=(const global_ptr &o) {
    if (this != &o) {
      nx_gp_release(&gp_);
      nx_gp_copy(&o.gp_, &gp_);
    }
    return *this;
  }
  global_ptr &operator=(global_ptr &&o) noexcept {
    if (this != &o) {
      nx_gp_release(&gp_);
      gp_ = o.gp_;
      o.gp_ = NX_GP_NULL;
    }
    return *this;
  }
  ~global_ptr() { nx_gp_release(&gp_); }

  explicit operator bool() const { return !nx_gp_is_null(&gp_); }
  bool operator==(const global_ptr &o) const {
    return nx_gp_equal(&gp_, &o.gp_) == 1;
  }
  bool operator!=(const global_ptr &o) const { return !(*this == o); }
  const nx_gp_t *gp() const { return &gp_; }
  // "Counter@0x100000002" : the type and the context, for messages.
  std::string describe() const;

  // Remote read and write of the pointee. Reading a sync<V> waits, in its
  // context, until it is written and returns the V.
  typename detail::sync_assign<T>::value_type get() const {
    typename detail::sync_assign<T>::value_type v{};
    detail::op_call(
        &gp_, detail::get_op<T>::id, true, nullptr, [&v](stream &s) { s >> v; },
        typeid(T));
    return v;
  }
  template <class V> void put(const V &v) const {
    typename detail::sync_assign<T>::value_type w = v;
    detail::op_call(
        &gp_, detail::put_op<T>::id, true, [&w](stream &s) { s << w; }, nullptr,
        typeid(T));
  }
  remote_ref<T> operator*() const { return remote_ref<T>(*this); }

  // A global pointer to a member of the pointee (g->member in CC++).
  template <class M, class U = T> global_ptr<M> member(M U::*field) const {
    nx_gp_t gp = NX_GP_NULL;
    nx_gp_copy(&gp_, &gp);
    // The same executable runs everywhere, so the member's offset is the
    // same in the remote context.
    // The offset is taken on storage of U's size and alignment (never a
    // null pointer, which the sanitizers rightly refuse).
    alignas(U) static const unsigned char storage[sizeof(U)] = {};
    const U *base = reinterpret_cast<const U *>(storage);
    gp.address += static_cast<uint64_t>(
        reinterpret_cast<const unsigned char *>(&(base->*field)) - storage);
    return global_ptr<M>::adopt(gp);
  }

  // p->f(args): the pointee's stub (the translator nests one in every global
  // class, C::ccxx_stub_), whose member functions have C's signatures and
  // make the remote calls.
  template <class U = T, class S = typename detail::stub_of<U>::type,
            std::enable_if_t<!std::is_void_v<S>, int> = 0>
  S operator->() const {
    return S{*this};
  }
  template <class U = T, class S = typename detail::stub_of<U>::type,
            std::enable_if_t<std::is_void_v<S>, int> = 0>
  void operator->() const {
    static_assert(!std::is_void_v<S>,
                  "ccxx: p->f() needs the pointee to be a global class "
                  "(declared 'global class' in a .ccxx file); otherwise "
                  "call p.call<&C::f>(args) or read p.member(&C::m)");
  }

  // A synchronous remote call of method M (void methods are one-way: the
  // call returns once the request is sent).
  template <auto M, class... A> auto call(A &&...a) const {
    using op = detail::method_op<M>;
    using R = typename detail::method_traits<decltype(M)>::ret;
    detail::call_args_t<M, A...> args(std::forward<A>(a)...);
    auto pack = [&args](stream &s) {
      std::apply([&s](const auto &...x) { (void)(s << ... << x); }, args);
    };
    if constexpr (std::is_void_v<R>) {
      detail::op_call(&gp_, op::id, false, pack, nullptr, typeid(T));
    } else {
      R r{};
      detail::op_call(
          &gp_, op::id, true, pack, [&r](stream &s) { s >> r; }, typeid(T));
      return r;
    }
  }

private:
  nx_gp_t gp_;
};

template <class T> stream &operator<<(stream &s, const global_ptr<T> &p) {
  stream::check(nx_put_gp(s.buffer(), p.gp()));
  return s;
}
template <class T> stream &operator>>(stream &s, global_ptr<T> &p) {
  nx_gp_t gp;
  stream::check(nx_get_gp(s.buffer(), &gp));
  p = global_ptr<T>::adopt(gp);
  return s;
}

// *g as a value (remote read) or as the target of = (remote write). It holds
// its own copy of the global pointer, so it may outlive the expression that
// made it (`auto m = q->x;`, where q->x's pointer is a temporary); each
// conversion reads again.
template <class T> class remote_ref {
public:
  using value_type = typename detail::sync_assign<T>::value_type;
  explicit remote_ref(global_ptr<T> p) : p_(std::move(p)) {}
  operator value_type() const { return p_.get(); }
  // One remote read, as a value (the comparisons below use it).
  value_type get() const { return p_.get(); }
  template <class V> const remote_ref &operator=(const V &v) const {
    p_.put(v);
    return *this;
  }

private:
  global_ptr<T> p_;
};

namespace detail {
template <class T> struct is_remote_ref : std::false_type {};
template <class T> struct is_remote_ref<remote_ref<T>> : std::true_type {};
template <class V>
using not_remote_ref = std::enable_if_t<!is_remote_ref<V>::value, int>;
} // namespace detail

// Comparisons read the value once and compare it, so `q->name == "pt"`
// works where the conversion alone would not be tried (std::string's
// operators are templates).
#define CCXX_REMOTE_REF_COMPARE(OP)                                            \
  template <class T, class V, detail::not_remote_ref<V> = 0>                   \
  bool operator OP(const remote_ref<T> &a, const V &b) {                       \
    return a.get() OP b;                                                       \
  }                                                                            \
  template <class V, class T, detail::not_remote_ref<V> = 0>                   \
  bool operator OP(const V &a, const remote_ref<T> &b) {                       \
    return a OP b.get();                                                       \
  }                                                                            \
  template <class T, class U>                                                  \
  bool operator OP(const remote_ref<T> &a, const remote_ref<U> &b) {           \
    return a.get() OP b.get();                                                 \
  }
CCXX_REMOTE_REF_COMPARE(==)
CCXX_REMOTE_REF_COMPARE(!=)
CCXX_REMOTE_REF_COMPARE(<)
CCXX_REMOTE_REF_COMPARE(<=)
CCXX_REMOTE_REF_COMPARE(>)
CCXX_REMOTE_REF_COMPARE(>=)
#undef CCXX_REMOTE_REF_COMPARE

// ---------------------------------------------------------------- sync

// A single-assignment variable: reading blocks until it is written; a second
// write throws sync_error.
template <class T> class sync {
  static_assert(!std::is_reference_v<T>, "ccxx: sync of a reference");

public:
  sync() {
    nx_mutex_init(&m_);
    nx_cond_init(&c_);
  }
  sync(const sync &) = delete;
  sync &operator=(const sync &) = delete;
  ~sync() {
    nx_cond_destroy(&c_);
    nx_mutex_destroy(&m_);
  }
  void set(const T &v) {
    nx_mutex_lock(&m_);
    if (full_) {
      nx_mutex_unlock(&m_);
      throw sync_error();
    }
    v_ = v;
    full_ = true;
    nx_cond_broadcast(&c_);
    nx_mutex_unlock(&m_);
  }
  const T &get() const {
    nx_mutex_lock(&m_);
    while (!full_)
      nx_cond_wait(&c_, &m_);
    nx_mutex_unlock(&m_);
    return v_;
  }
  bool is_set() const {
    nx_mutex_lock(&m_);
    bool f = full_;
    nx_mutex_unlock(&m_);
    return f;
  }
  sync &operator=(const T &v) {
    set(v);
    return *this;
  }
  operator const T &() const { return get(); }

private:
  mutable nx_mutex_t m_;
  mutable nx_cond_t c_;
  bool full_ = false;
  T v_{};
};

namespace detail {
template <class T> struct sync_assign {
  using value_type = T;
  static void assign(T &dst, T &&v) { dst = std::move(v); }
};
template <class T> struct sync_assign<sync<T>> {
  using value_type = T;
  static void assign(sync<T> &dst, T &&v) { dst.set(v); }
};
template <class T> struct get_op<sync<T>> {
  static void run(void *address, stream &, stream *out) {
    *out << static_cast<sync<T> *>(address)->get();
  }
  static const char *name() { return typeid(get_op).name(); }
  static inline const uint32_t id = op_register(name(), run, true);
};
} // namespace detail

// ---------------------------------------------------------------- placement

// Where a processor object lives: a node spec ("localhost", "mpi",
// "mpi:host=a,b": a new process context running this executable) or
// ccxx::here (a new in-process context).
class proc_t {
public:
  proc_t(const char *spec) : spec_(spec != nullptr ? spec : "") {}
  proc_t(std::string spec) : spec_(std::move(spec)) {}
  bool in_process() const { return spec_.empty(); }
  const std::string &spec() const { return spec_; }

private:
  proc_t() = default;
  friend const proc_t &here_();
  std::string spec_;
};
CCXX_API const proc_t &here_();
// A new in-process context (the paper's cheap context).
static const proc_t &here = here_();

// new (where) C(args...): makes a C in a new context at `where`. The
// arguments travel by value through ccxx::stream (in-process: moved).
template <class C, class... A>
global_ptr<C> create(const proc_t &where, A &&...a) {
  if (where.in_process()) {
    auto args = std::make_tuple(std::forward<A>(a)...);
    nx_gp_t gp = detail::place_local(
        [&args]() -> void * {
          return std::apply([](auto &...x) { return new C(std::move(x)...); },
                            args);
        },
        typeid(C));
    return global_ptr<C>::adopt(gp);
  }
  using op = detail::ctor_op<C, detail::wire_t<A>...>;
  std::tuple<detail::wire_t<A>...> args(std::forward<A>(a)...);
  nx_gp_t gp = detail::place_process(
      where.spec(), op::id,
      [&args](stream &s) {
        std::apply([&s](const auto &...x) { (void)(s << ... << x); }, args);
      },
      typeid(C));
  return global_ptr<C>::adopt(gp);
}

// delete p: destroys the object and its context. Returns 0, or the error
// of a context that was already gone (the object is then gone too).
template <class C> int destroy(global_ptr<C> &p) {
  nx_gp_t gp = NX_GP_NULL;
  nx_gp_copy(p.gp(), &gp);
  p = nullptr;
  return detail::destroy_context(&gp, detail::delete_op<C>::id, typeid(C));
}

// Registers the remote operations of methods M... in this process. A call
// registers its operation in the caller, and every process of one
// executable registers alike; a program serving objects to another
// executable (a different program, or the same source built for another
// machine or by another compiler) exposes the methods it serves.
template <auto... M> void expose() { (void(detail::method_op<M>::id), ...); }

// `delete e;` in a .ccxx file: destroys a global pointer's object (and
// nulls the pointer), deletes a local pointer's.
template <class C> void delete_(global_ptr<C> &p) { destroy(p); }
template <class C> void delete_(global_ptr<C> &&p) { destroy(p); }
template <class T> void delete_(T *p) { delete p; }

namespace detail {
// A stub's call (the translator's C::ccxx_stub_): N is the stub function's
// template parameter, so nothing is compiled until the function is called.
template <auto M, int N, class T, class... A>
auto stub_call(const global_ptr<T> &p, A &&...a) {
  return p.template call<M>(std::forward<A>(a)...);
}
} // namespace detail

template <class T> std::string global_ptr<T>::describe() const {
  return detail::object_name(typeid(T), &gp_);
}

// ---------------------------------------------------------------- futures

namespace detail {
// A future's shared state, less its value: completion, the exception, and
// the functions to run when it completes.
class CCXX_API future_base {
public:
  future_base() = default;
  virtual ~future_base() = default;
  future_base(const future_base &) = delete;
  future_base &operator=(const future_base &) = delete;
  bool ready();
  void wait();
  // Marks it complete (with `error`, or NULL), wakes the waiters and runs
  // the on_ready functions in this thread.
  void complete(std::exception_ptr error);
  // Runs f when complete: now, in this thread, when it already is.
  void on_ready(std::function<void()> f);
  const std::exception_ptr &error() const { return error_; }
  // An asynchronous call's reply that says it succeeded, valid during the
  // call and positioned at the result: reads the result (async_state) and
  // completes. A failed call completes with its exception instead.
  virtual void deliver(nx_buffer_t *reply);
  // The object an asynchronous call went to (its type and context), named
  // in an error.
  const std::type_info *type = nullptr;
  uint64_t context = 0;

private:
  // Completion (1), and whether a thread waits (2) or on_ready functions
  // wait (4): then complete takes the lock (one of a fixed set of
  // mutexes and condition variables, chosen by the state's address), else
  // it is one atomic exchange.
  std::atomic<unsigned> flags_{0};
  std::exception_ptr error_;
  std::vector<std::function<void()>> then_; // under the lock
};

template <class R> struct future_state : future_base {
  std::optional<R> value;
};
template <> struct future_state<void> : future_base {};

// Memory for future states: a per-thread cache of freed blocks of each
// size up to 512 bytes (malloc's own per-thread cache holds 7 of a size,
// fewer than a burst of calls leaves), else operator new.
CCXX_API void *state_alloc(std::size_t bytes);
CCXX_API void state_free(void *p, std::size_t bytes) noexcept;
template <class T> struct state_allocator {
  using value_type = T;
  state_allocator() = default;
  template <class U> state_allocator(const state_allocator<U> &) {}
  T *allocate(std::size_t n) {
    return static_cast<T *>(state_alloc(n * sizeof(T)));
  }
  void deallocate(T *p, std::size_t n) noexcept {
    state_free(p, n * sizeof(T));
  }
  template <class U> bool operator==(const state_allocator<U> &) const {
    return true;
  }
  template <class U> bool operator!=(const state_allocator<U> &) const {
    return false;
  }
};

// The state of ccxx::async's future: it reads the result from the reply.
template <class R> struct async_state : future_state<R> {
  void deliver(nx_buffer_t *reply) override {
    std::exception_ptr e;
    try {
      stream s(reply);
      R r{};
      s >> r;
      this->value.emplace(std::move(r));
    } catch (const stream::error &x) {
      e = std::make_exception_ptr(remote_error(
          object_name(*this->type, this->context), x.what(), x.code));
    }
    this->complete(e);
  }
};
template <> struct async_state<void> : future_state<void> {};
} // namespace detail

template <class R> class future;

namespace detail {
template <class R> struct make_future;
template <class F, class R> struct then_result {
  using type = std::invoke_result_t<F, R>;
};
template <class F> struct then_result<F, void> {
  using type = std::invoke_result_t<F>;
};
} // namespace detail

// The result of ccxx::async: get() waits for it and returns the value or
// throws what the call threw (as a synchronous call would); ready() and
// wait() ask and wait; then(fn) makes the future of fn(value). Copies share
// one state.
template <class R> class future {
public:
  future() = default;
  bool valid() const { return s_ != nullptr; }
  bool ready() const { return s_->ready(); }
  void wait() const { s_->wait(); }
  // The value (a copy; get may be called again) or the call's exception.
  R get() const {
    s_->wait();
    if (s_->error())
      std::rethrow_exception(s_->error());
    if constexpr (!std::is_void_v<R>)
      return *s_->value;
  }
  // The future of fn(value) (fn() for a future<void>). fn runs in the
  // thread that completes this future (the runtime's reply handler: keep it
  // short), or in the caller when this one is ready already. An exception
  // of this future or of fn goes to the new one.
  template <class F>
  future<typename detail::then_result<F, R>::type> then(F fn) const {
    using U = typename detail::then_result<F, R>::type;
    auto next = std::make_shared<detail::future_state<U>>();
    auto mine = s_;
    s_->on_ready([mine, next, fn = std::move(fn)]() mutable {
      if (mine->error()) {
        next->complete(mine->error());
        return;
      }
      try {
        if constexpr (std::is_void_v<R> && std::is_void_v<U>)
          fn();
        else if constexpr (std::is_void_v<R>)
          next->value.emplace(fn());
        else if constexpr (std::is_void_v<U>)
          fn(*mine->value);
        else
          next->value.emplace(fn(*mine->value));
      } catch (...) {
        next->complete(std::current_exception());
        return;
      }
      next->complete(nullptr);
    });
    return future<U>(next);
  }

  explicit future(std::shared_ptr<detail::future_state<R>> s)
      : s_(std::move(s)) {}
  const std::shared_ptr<detail::future_state<R>> &state() const { return s_; }

private:
  std::shared_ptr<detail::future_state<R>> s_;
};

// An asynchronous remote call of method M of *p with args (UPC++ rpc, HPX
// async): sends the request and returns at once; the reply fulfils the
// future (no thread waits for it), so one thread may have many calls
// outstanding. A void method's future completes when the method has run.
// In a .ccxx file, ccxx::async(p, &C::f, args...) is written so.
template <auto M, class C, class... A>
future<detail::result_t<M>> async(const global_ptr<C> &p, A &&...a) {
  using R = detail::result_t<M>;
  using op = detail::method_op<M>;
  detail::call_args_t<M, A...> args(std::forward<A>(a)...);
  auto st = std::allocate_shared<detail::async_state<R>>(
      detail::state_allocator<detail::async_state<R>>());
  st->type = &typeid(C);
  st->context = nx_gp_context(p.gp());
  auto pack = [&args](stream &s) {
    std::apply([&s](const auto &...x) { (void)(s << ... << x); }, args);
  };
  detail::op_async(p.gp(), op::id, pack, st);
  return future<R>(std::move(st));
}

// A future that is ready when all of `fs` are, holding them (each then
// ready; its get() gives its value or throws its exception), as HPX's
// when_all.
template <class... R>
future<std::tuple<future<R>...>> when_all(const future<R> &...fs) {
  using T = std::tuple<future<R>...>;
  auto all = std::make_shared<detail::future_state<T>>();
  all->value.emplace(fs...);
  constexpr std::size_t n = sizeof...(R);
  if constexpr (n == 0) {
    all->complete(nullptr);
  } else {
    auto left = std::make_shared<std::atomic<std::size_t>>(n);
    auto one = [all, left] {
      if (left->fetch_sub(1) == 1)
        all->complete(nullptr);
    };
    (fs.state()->on_ready(one), ...);
  }
  return future<T>(all);
}

// The same for a vector of futures of one type.
template <class R>
future<std::vector<future<R>>> when_all(const std::vector<future<R>> &fs) {
  using T = std::vector<future<R>>;
  auto all = std::make_shared<detail::future_state<T>>();
  all->value.emplace(fs);
  if (fs.empty()) {
    all->complete(nullptr);
    return future<T>(all);
  }
  auto left = std::make_shared<std::atomic<std::size_t>>(fs.size());
  for (const future<R> &f : fs)
    f.state()->on_ready([all, left] {
      if (left->fetch_sub(1) == 1)
        all->complete(nullptr);
    });
  return future<T>(all);
}

// ---------------------------------------------------------------- threads

// Runs each callable in its own thread and waits for all; the first
// exception thrown is rethrown.
CCXX_API void par_run(std::vector<std::function<void()>> &tasks);
template <class... F> void par(F &&...f) {
  std::vector<std::function<void()>> tasks{std::function<void()>(f)...};
  par_run(tasks);
}

// Runs body(i) for i in [begin, end) in parallel (on at most
// CCXX_PARFOR_THREADS threads, default the number of processors, each
// taking the next run of consecutive iterations, a sixteenth of its share)
// and waits for all; the first exception thrown is rethrown.
CCXX_API void parfor_run(long begin, long end,
                         const std::function<void(long)> &body);
template <class F> void parfor(long begin, long end, F &&body) {
  parfor_run(begin, end, std::function<void(long)>(std::forward<F>(body)));
}

// Iterations collected one by one (the translation of a general parfor
// header); run() executes them like par.
class CCXX_API parfor_group {
public:
  void add(std::function<void()> f) { tasks_.push_back(std::move(f)); }
  void run();

private:
  std::vector<std::function<void()>> tasks_;
};

// Runs `f` in a new thread without waiting; finalize waits for it.
CCXX_API void spawn_run(std::function<void()> f);
template <class F, class... A> void spawn(F &&f, A &&...a) {
  spawn_run([f = std::forward<F>(f),
             t = std::make_tuple(std::forward<A>(a)...)]() mutable {
    std::apply(f, t);
  });
}

// The lock an `atomic` method holds for its whole body: at most one atomic
// method of an object runs at a time (recursive: one may call another).
class atomic_guard {
public:
  explicit atomic_guard(const void *object) : m_(detail::atomic_lock(object)) {
    m_.lock();
  }
  ~atomic_guard() { m_.unlock(); }
  atomic_guard(const atomic_guard &) = delete;
  atomic_guard &operator=(const atomic_guard &) = delete;

private:
  detail::monitor &m_;
};

} // namespace ccxx

#endif // CCXX_CCXX_HPP
