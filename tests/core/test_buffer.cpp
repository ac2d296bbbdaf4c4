// Tests of nexus/src/buffers/buffer.c through stand-alone buffers: put/get of
// every type, lengths, errors that leave the buffer usable, formats (receiver
// makes right), retain/release and the nx_sizeof_* bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "nexus.h"
#include "runtime_guard.h"

namespace {

// Owns one reference to a buffer; declared after the runtime_guard so the
// buffer is released before nx_finalize.
struct buffer_ref {
  nx_buffer_t *b = nullptr;
  explicit buffer_ref(size_t hint = 64, int format = 0) {
    int rc = nx_buffer_create(hint, &b);
    REQUIRE(rc == 0);
    REQUIRE(b != nullptr);
    if (format != 0)
      REQUIRE(nx_buffer_set_format(b, format) == 0);
  }
  ~buffer_ref() {
    if (b != nullptr)
      nx_buffer_release(b);
  }
  buffer_ref(const buffer_ref &) = delete;
  buffer_ref &operator=(const buffer_ref &) = delete;
  operator nx_buffer_t *() const { return b; }
};

int other_format(int format) {
  return format == NX_FORMAT_LITTLE ? NX_FORMAT_BIG : NX_FORMAT_LITTLE;
}

int real_native_format() {
  uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1 ? NX_FORMAT_LITTLE : NX_FORMAT_BIG;
}

// Per-type access to the put/get/sizeof functions.
template <class T> struct ops;

#define NX_TEST_OPS(T, NAME, SIZEOF)                                           \
  template <> struct ops<T> {                                                  \
    static const char *name() { return #NAME; }                                \
    static int put(nx_buffer_t *b, T v) { return nx_put_##NAME(b, v); }        \
    static int get(nx_buffer_t *b, T *v) { return nx_get_##NAME(b, v); }       \
    static int put_array(nx_buffer_t *b, const T *v, size_t n) {               \
      return nx_put_##NAME##_array(b, v, n);                                   \
    }                                                                          \
    static int get_array(nx_buffer_t *b, T *v, size_t n) {                     \
      return nx_get_##NAME##_array(b, v, n);                                   \
    }                                                                          \
    static size_t size(size_t n) { return nx_sizeof_##SIZEOF(n); }             \
  };

NX_TEST_OPS(int8_t, int8, int8)
NX_TEST_OPS(uint8_t, uint8, int8)
NX_TEST_OPS(int16_t, int16, int16)
NX_TEST_OPS(uint16_t, uint16, int16)
NX_TEST_OPS(int32_t, int32, int32)
NX_TEST_OPS(uint32_t, uint32, int32)
NX_TEST_OPS(int64_t, int64, int64)
NX_TEST_OPS(uint64_t, uint64, int64)
NX_TEST_OPS(float, float, float)
NX_TEST_OPS(double, double, double)
NX_TEST_OPS(char, char, char)
#undef NX_TEST_OPS

// Interesting values of each type: extremes, zero, sign patterns, and for
// floating point -0.0, denormals, infinities and NaN.
template <class T> std::vector<T> values() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {L::min(), L::max(),        T(0),
                      T(1),     T(L::max() - 1), T(L::min() + 1)};
  if (L::is_signed)
    v.push_back(T(-1));
  // A value whose bytes all differ, so any byte-order mix-up shows.
  uint64_t pattern = 0x0123456789abcdefULL;
  T p;
  std::memcpy(&p, &pattern, sizeof p);
  v.push_back(p);
  return v;
}

template <class T> std::vector<T> float_values() {
  using L = std::numeric_limits<T>;
  return {T(0),
          T(-0.0),
          T(1),
          T(-1),
          T(1.5),
          T(3.14159265358979323846),
          L::min(),
          L::max(),
          L::lowest(),
          L::epsilon(),
          L::denorm_min(),
          -L::denorm_min(),
          T(L::min() / 4),
          L::infinity(),
          -L::infinity(),
          L::quiet_NaN(),
          T(123456.789)};
}

template <> std::vector<float> values<float>() { return float_values<float>(); }
template <> std::vector<double> values<double>() {
  return float_values<double>();
}
template <> std::vector<char> values<char>() {
  return {'\0',
          'a',
          'Z',
          '\n',
          CHAR_MIN,
          CHAR_MAX,
          static_cast<char>(0x80),
          static_cast<char>(0x7f)};
}

template <class T> bool same(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    if (std::isnan(a) || std::isnan(b))
      return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
  } else {
    return a == b;
  }
}

template <class T> std::string show(T v) {
  if constexpr (std::is_same<T, char>::value ||
                std::is_same<T, int8_t>::value ||
                std::is_same<T, uint8_t>::value)
    return std::to_string(static_cast<int>(v));
  else
    return Catch::StringMaker<T>::convert(v);
}

template <class T> void put_values(nx_buffer_t *b, const std::vector<T> &vals) {
  for (T v : vals) {
    INFO("put_" << ops<T>::name() << "(" << show(v) << ")");
    REQUIRE(ops<T>::put(b, v) == 0);
  }
}

template <class T> void get_values(nx_buffer_t *b, const std::vector<T> &vals) {
  for (T v : vals) {
    T got;
    INFO("get_" << ops<T>::name() << " expecting " << show(v));
    REQUIRE(ops<T>::get(b, &got) == 0);
    INFO("got " << show(got));
    CHECK(same(got, v));
  }
}

// Puts every value of values<T>(), rewinds and reads them back.
template <class T> void scalar_roundtrip(nx_buffer_t *b) {
  put_values(b, values<T>());
  REQUIRE(nx_buffer_rewind(b) == 0);
  get_values(b, values<T>());
}

// `count` values cycling through values<T>().
template <class T> std::vector<T> array_of(size_t count) {
  std::vector<T> base = values<T>();
  std::vector<T> out(count);
  out.reserve(count + 1); // data() is never NULL, even for count 0
  for (size_t i = 0; i < count; i++)
    out[i] = base[(i * 7 + i / 3) % base.size()];
  return out;
}

const size_t ARRAY_COUNTS[] = {0, 1, 2, 7, 100000};

template <class T> void put_arrays(nx_buffer_t *b) {
  for (size_t n : ARRAY_COUNTS) {
    std::vector<T> a = array_of<T>(n);
    INFO("put_" << ops<T>::name() << "_array count " << n);
    REQUIRE(ops<T>::put_array(b, a.data(), n) == 0);
  }
}

template <class T> void get_arrays(nx_buffer_t *b) {
  for (size_t n : ARRAY_COUNTS) {
    std::vector<T> want = array_of<T>(n);
    std::vector<T> got(n + 1);
    INFO("get_" << ops<T>::name() << "_array count " << n);
    REQUIRE(ops<T>::get_array(b, got.data(), n) == 0);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
      if (!same(got[i], want[i]))
        wrong++;
    CHECK(wrong == 0);
  }
}

std::vector<unsigned char> byte_pattern(size_t n) {
  std::vector<unsigned char> v(n);
  v.reserve(n + 1); // data() is never NULL, even for n == 0
  for (size_t i = 0; i < n; i++)
    v[i] = static_cast<unsigned char>(i * 131 + 7);
  return v;
}

const size_t BYTE_COUNTS[] = {0, 1, 3, 8, 100000};

// Puts every scalar value, every array and byte blobs; each type in turn.
void put_everything(nx_buffer_t *b) {
  put_values(b, values<int8_t>());
  put_values(b, values<uint8_t>());
  put_values(b, values<int16_t>());
  put_values(b, values<uint16_t>());
  put_values(b, values<int32_t>());
  put_values(b, values<uint32_t>());
  put_values(b, values<int64_t>());
  put_values(b, values<uint64_t>());
  put_values(b, values<float>());
  put_values(b, values<double>());
  put_values(b, values<char>());
  put_arrays<int8_t>(b);
  put_arrays<uint8_t>(b);
  put_arrays<int16_t>(b);
  put_arrays<uint16_t>(b);
  put_arrays<int32_t>(b);
  put_arrays<uint32_t>(b);
  put_arrays<int64_t>(b);
  put_arrays<uint64_t>(b);
  put_arrays<float>(b);
  put_arrays<double>(b);
  put_arrays<char>(b);
  for (size_t n : BYTE_COUNTS) {
    std::vector<unsigned char> v = byte_pattern(n);
    INFO("put_bytes count " << n);
    REQUIRE(nx_put_bytes(b, v.data(), n) == 0);
  }
}

void get_everything(nx_buffer_t *b) {
  get_values(b, values<int8_t>());
  get_values(b, values<uint8_t>());
  get_values(b, values<int16_t>());
  get_values(b, values<uint16_t>());
  get_values(b, values<int32_t>());
  get_values(b, values<uint32_t>());
  get_values(b, values<int64_t>());
  get_values(b, values<uint64_t>());
  get_values(b, values<float>());
  get_values(b, values<double>());
  get_values(b, values<char>());
  get_arrays<int8_t>(b);
  get_arrays<uint8_t>(b);
  get_arrays<int16_t>(b);
  get_arrays<uint16_t>(b);
  get_arrays<int32_t>(b);
  get_arrays<uint32_t>(b);
  get_arrays<int64_t>(b);
  get_arrays<uint64_t>(b);
  get_arrays<float>(b);
  get_arrays<double>(b);
  get_arrays<char>(b);
  for (size_t n : BYTE_COUNTS) {
    std::vector<unsigned char> want = byte_pattern(n);
    std::vector<unsigned char> got(n + 1, 0);
    INFO("get_bytes count " << n);
    REQUIRE(nx_get_bytes(b, got.data(), n) == 0);
    CHECK(std::memcmp(got.data(), want.data(), n) == 0);
  }
}

// A type-erased scalar kind, for the type-mismatch matrix.
struct kind {
  const char *name;
  std::function<int(nx_buffer_t *)> put; // puts one value
  std::function<int(nx_buffer_t *)> get; // gets one value, discards it
  std::function<int(nx_buffer_t *, size_t)> put_array; // `n` values
  std::function<int(nx_buffer_t *, size_t)> get_array;
};

template <class T> kind make_kind() {
  kind k;
  k.name = ops<T>::name();
  k.put = [](nx_buffer_t *b) { return ops<T>::put(b, values<T>()[1]); };
  k.get = [](nx_buffer_t *b) {
    T v;
    return ops<T>::get(b, &v);
  };
  k.put_array = [](nx_buffer_t *b, size_t n) {
    std::vector<T> a = array_of<T>(n);
    return ops<T>::put_array(b, a.data(), n);
  };
  k.get_array = [](nx_buffer_t *b, size_t n) {
    std::vector<T> a(n + 1);
    return ops<T>::get_array(b, a.data(), n);
  };
  return k;
}

std::vector<kind> all_kinds() {
  return {make_kind<int8_t>(),   make_kind<uint8_t>(),  make_kind<int16_t>(),
          make_kind<uint16_t>(), make_kind<int32_t>(),  make_kind<uint32_t>(),
          make_kind<int64_t>(),  make_kind<uint64_t>(), make_kind<float>(),
          make_kind<double>(),   make_kind<char>()};
}

// Enough trailing bytes that a get of any scalar finds enough data, so the
// only thing wrong with a mismatched get is the type.
const unsigned char PADDING[64] = {0};

} // namespace

TEST_CASE("nx_format_native matches this machine", "[buffer]") {
  CHECK(nx_format_native() == real_native_format());
}

TEST_CASE("a fresh buffer is empty, in the native format", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b(0);
    CHECK(nx_buffer_length(b) == 0);
    CHECK(nx_buffer_remaining(b) == 0);
    CHECK(nx_buffer_format(b) == nx_format_native());
    CHECK(nx_buffer_source(b) == 0); // not delivered to a handler
    CHECK(nx_buffer_rewind(b) == 0);
    CHECK(nx_buffer_length(b) == 0);
  }
  CHECK(nx_buffer_source(nullptr) == 0);
  CHECK(rt.finalize() == 0);
}

TEST_CASE("every scalar type round-trips, extremes included", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b(16);
    SECTION("int8") { scalar_roundtrip<int8_t>(b); }
    SECTION("uint8") { scalar_roundtrip<uint8_t>(b); }
    SECTION("int16") { scalar_roundtrip<int16_t>(b); }
    SECTION("uint16") { scalar_roundtrip<uint16_t>(b); }
    SECTION("int32") { scalar_roundtrip<int32_t>(b); }
    SECTION("uint32") { scalar_roundtrip<uint32_t>(b); }
    SECTION("int64") { scalar_roundtrip<int64_t>(b); }
    SECTION("uint64") { scalar_roundtrip<uint64_t>(b); }
    SECTION("float") { scalar_roundtrip<float>(b); }
    SECTION("double") { scalar_roundtrip<double>(b); }
    SECTION("char") { scalar_roundtrip<char>(b); }
    CHECK(nx_buffer_remaining(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("the special values are really in the value lists", "[buffer]") {
  // Guards the test data itself: the lists above must hold what we claim.
  auto d = values<double>();
  auto f = values<float>();
  bool nan = false, negzero = false, denorm = false;
  for (double v : d) {
    nan |= std::isnan(v);
    negzero |= (v == 0.0 && std::signbit(v));
    denorm |= (std::fpclassify(v) == FP_SUBNORMAL);
  }
  CHECK(nan);
  CHECK(negzero);
  CHECK(denorm);
  nan = negzero = denorm = false;
  for (float v : f) {
    nan |= std::isnan(v);
    negzero |= (v == 0.0f && std::signbit(v));
    denorm |= (std::fpclassify(v) == FP_SUBNORMAL);
  }
  CHECK(nan);
  CHECK(negzero);
  CHECK(denorm);
  auto i64 = values<int64_t>();
  auto u64 = values<uint64_t>();
  CHECK(std::find(i64.begin(), i64.end(), INT64_MIN) != i64.end());
  CHECK(std::find(u64.begin(), u64.end(), UINT64_MAX) != u64.end());
}

TEST_CASE("every type, array and byte blob round-trips in one buffer",
          "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b(1); // tiny hint: the buffer must grow
    put_everything(b);
    size_t len = nx_buffer_length(b);
    CHECK(len > 0);
    REQUIRE(nx_buffer_rewind(b) == 0);
    CHECK(nx_buffer_remaining(b) == len);
    get_everything(b);
    CHECK(nx_buffer_remaining(b) == 0);
    CHECK(nx_buffer_length(b) == len);
    // Rewinding reads it all again.
    REQUIRE(nx_buffer_rewind(b) == 0);
    get_everything(b);
    CHECK(nx_buffer_remaining(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("interleaved puts of many types read back in order", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b(8);
    const int N = 2000;
    for (int i = 0; i < N; i++) {
      REQUIRE(nx_put_int8(b, static_cast<int8_t>(i)) == 0);
      REQUIRE(nx_put_double(b, i * 0.5) == 0);
      std::vector<int32_t> a(static_cast<size_t>(i % 5), i);
      REQUIRE(nx_put_int32_array(b, a.data(), a.size()) == 0);
      REQUIRE(nx_put_char(b, static_cast<char>('a' + i % 26)) == 0);
      REQUIRE(nx_put_uint64(b, static_cast<uint64_t>(i) << 40) == 0);
    }
    REQUIRE(nx_buffer_rewind(b) == 0);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
      int8_t i8;
      double d;
      char c;
      uint64_t u64;
      std::vector<int32_t> a(static_cast<size_t>(i % 5) + 1, -1);
      REQUIRE(nx_get_int8(b, &i8) == 0);
      REQUIRE(nx_get_double(b, &d) == 0);
      REQUIRE(nx_get_int32_array(b, a.data(), static_cast<size_t>(i % 5)) == 0);
      REQUIRE(nx_get_char(b, &c) == 0);
      REQUIRE(nx_get_uint64(b, &u64) == 0);
      wrong += i8 != static_cast<int8_t>(i);
      wrong += d != i * 0.5;
      for (int k = 0; k < i % 5; k++)
        wrong += a[static_cast<size_t>(k)] != i;
      wrong += c != static_cast<char>('a' + i % 26);
      wrong += u64 != static_cast<uint64_t>(i) << 40;
    }
    CHECK(wrong == 0);
    CHECK(nx_buffer_remaining(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("100,000 single puts grow the buffer and read back", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b(0);
    const int32_t N = 100000;
    for (int32_t i = 0; i < N; i++)
      REQUIRE(nx_put_int32(b, i * 3 - 7) == 0);
    REQUIRE(nx_buffer_rewind(b) == 0);
    int wrong = 0;
    for (int32_t i = 0; i < N; i++) {
      int32_t v;
      REQUIRE(nx_get_int32(b, &v) == 0);
      wrong += v != i * 3 - 7;
    }
    CHECK(wrong == 0);
    CHECK(nx_buffer_remaining(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("length and remaining track puts and gets", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b;
    REQUIRE(nx_put_int32(b, 1) == 0);
    size_t l1 = nx_buffer_length(b);
    CHECK(l1 >= sizeof(int32_t));
    REQUIRE(nx_put_double(b, 2.0) == 0);
    size_t l2 = nx_buffer_length(b);
    CHECK(l2 - l1 >= sizeof(double));
    int64_t arr[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    REQUIRE(nx_put_int64_array(b, arr, 10) == 0);
    size_t l3 = nx_buffer_length(b);
    CHECK(l3 - l2 >= sizeof arr);

    REQUIRE(nx_buffer_rewind(b) == 0);
    CHECK(nx_buffer_remaining(b) == l3);
    int32_t i;
    double d;
    int64_t got[10];
    // Each get consumes exactly what its put added; length stays.
    REQUIRE(nx_get_int32(b, &i) == 0);
    CHECK(nx_buffer_remaining(b) == l3 - l1);
    REQUIRE(nx_get_double(b, &d) == 0);
    CHECK(nx_buffer_remaining(b) == l3 - l2);
    REQUIRE(nx_get_int64_array(b, got, 10) == 0);
    CHECK(nx_buffer_remaining(b) == 0);
    CHECK(nx_buffer_length(b) == l3);
    CHECK(std::memcmp(got, arr, sizeof arr) == 0);

    REQUIRE(nx_buffer_rewind(b) == 0);
    CHECK(nx_buffer_remaining(b) == l3);
    CHECK(nx_buffer_length(b) == l3);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("reading past the end returns NX_ERANGE and leaves the buffer usable",
          "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    SECTION("every get on an empty buffer") {
      buffer_ref b;
      for (const kind &k : all_kinds()) {
        INFO(k.name);
        CHECK(k.get(b) == NX_ERANGE);
        CHECK(k.get_array(b, 1) == NX_ERANGE);
        CHECK(k.get_array(b, 100) == NX_ERANGE);
      }
      unsigned char bytes[4];
      CHECK(nx_get_bytes(b, bytes, 1) == NX_ERANGE);
      CHECK(nx_get_bytes(b, bytes, 4) == NX_ERANGE);
      CHECK(nx_buffer_remaining(b) == 0);
      CHECK(nx_buffer_length(b) == 0);
    }

    SECTION("after the last value, then more data arrives") {
      buffer_ref b;
      REQUIRE(nx_put_int32(b, 11) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      int32_t v = 0;
      REQUIRE(nx_get_int32(b, &v) == 0);
      CHECK(v == 11);
      size_t len = nx_buffer_length(b);
      v = 99;
      CHECK(nx_get_int32(b, &v) == NX_ERANGE);
      CHECK(v == 99);                          // not written on error
      CHECK(nx_get_int32(b, &v) == NX_ERANGE); // still at the end
      CHECK(nx_buffer_remaining(b) == 0);
      CHECK(nx_buffer_length(b) == len);

      // The position did not move: a value appended now is the next read.
      REQUIRE(nx_put_int32(b, 22) == 0);
      CHECK(nx_buffer_remaining(b) == nx_buffer_length(b) - len);
      REQUIRE(nx_get_int32(b, &v) == 0);
      CHECK(v == 22);
      CHECK(nx_buffer_remaining(b) == 0);
    }

    SECTION("after the last value, rewind reads from the start") {
      buffer_ref b;
      REQUIRE(nx_put_uint16(b, 0xbeef) == 0);
      REQUIRE(nx_put_int8(b, -5) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      uint16_t u = 0;
      int8_t i = 0;
      REQUIRE(nx_get_uint16(b, &u) == 0);
      REQUIRE(nx_get_int8(b, &i) == 0);
      CHECK(nx_get_int8(b, &i) == NX_ERANGE);
      CHECK(nx_get_uint16(b, &u) == NX_ERANGE);
      double d[3];
      CHECK(nx_get_double_array(b, d, 3) == NX_ERANGE);
      REQUIRE(nx_buffer_rewind(b) == 0);
      u = 0;
      i = 0;
      REQUIRE(nx_get_uint16(b, &u) == 0);
      CHECK(u == 0xbeef);
      REQUIRE(nx_get_int8(b, &i) == 0);
      CHECK(i == -5);
    }
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("a get of the wrong type returns NX_ETYPE and consumes nothing",
          "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    SECTION("the examples: int32 after int16, uint32 after int32") {
      buffer_ref b;
      REQUIRE(nx_put_int16(b, -1234) == 0);
      REQUIRE(nx_put_int32(b, -5) == 0);
      REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      size_t rem = nx_buffer_remaining(b);
      int32_t i32 = 77;
      CHECK(nx_get_int32(b, &i32) == NX_ETYPE);
      CHECK(i32 == 77);
      CHECK(nx_buffer_remaining(b) == rem);
      int16_t i16 = 0;
      REQUIRE(nx_get_int16(b, &i16) == 0);
      CHECK(i16 == -1234);

      rem = nx_buffer_remaining(b);
      uint32_t u32 = 77;
      CHECK(nx_get_uint32(b, &u32) == NX_ETYPE);
      CHECK(u32 == 77);
      CHECK(nx_buffer_remaining(b) == rem);
      REQUIRE(nx_get_int32(b, &i32) == 0);
      CHECK(i32 == -5);
    }

    SECTION("every pair of distinct scalar types") {
      std::vector<kind> kinds = all_kinds();
      for (const kind &put : kinds) {
        for (const kind &get : kinds) {
          if (&put == &get)
            continue;
          INFO("put_" << put.name << " then get_" << get.name);
          buffer_ref b;
          REQUIRE(put.put(b) == 0);
          REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
          REQUIRE(nx_buffer_rewind(b) == 0);
          size_t rem = nx_buffer_remaining(b);
          CHECK(get.get(b) == NX_ETYPE);
          CHECK(nx_buffer_remaining(b) == rem);
          CHECK(put.get(b) == 0); // the right get still works
        }
      }
    }

    SECTION("every pair of distinct array types, same count") {
      std::vector<kind> kinds = all_kinds();
      for (const kind &put : kinds) {
        for (const kind &get : kinds) {
          if (&put == &get)
            continue;
          INFO("put_" << put.name << "_array then get_" << get.name
                      << "_array");
          buffer_ref b;
          REQUIRE(put.put_array(b, 4) == 0);
          REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
          REQUIRE(nx_buffer_rewind(b) == 0);
          size_t rem = nx_buffer_remaining(b);
          CHECK(get.get_array(b, 4) == NX_ETYPE);
          CHECK(nx_buffer_remaining(b) == rem);
          CHECK(put.get_array(b, 4) == 0);
        }
      }
    }

    SECTION("an array get with a different count") {
      buffer_ref b;
      int32_t a[5] = {1, 2, 3, 4, 5};
      REQUIRE(nx_put_int32_array(b, a, 5) == 0);
      REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      size_t rem = nx_buffer_remaining(b);
      int32_t got[8] = {0};
      CHECK(nx_get_int32_array(b, got, 4) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      CHECK(nx_get_int32_array(b, got, 6) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      CHECK(nx_get_int32_array(b, got, 0) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      CHECK(nx_get_int32(b, got) == NX_ETYPE); // a scalar is not an array of 5
      CHECK(nx_buffer_remaining(b) == rem);
      REQUIRE(nx_get_int32_array(b, got, 5) == 0);
      CHECK(std::memcmp(got, a, sizeof a) == 0);
    }

    SECTION("an empty array is not an array of one") {
      buffer_ref b;
      double none[1] = {0};
      REQUIRE(nx_put_double_array(b, none, 0) == 0);
      REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      size_t rem = nx_buffer_remaining(b);
      double d[2];
      CHECK(nx_get_double_array(b, d, 1) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      CHECK(nx_get_double_array(b, d, 0) == 0);
    }

    SECTION("bytes are their own type") {
      buffer_ref b;
      uint8_t u8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      REQUIRE(nx_put_bytes(b, u8, 8) == 0);
      REQUIRE(nx_put_uint8_array(b, u8, 8) == 0);
      REQUIRE(nx_put_int64(b, 42) == 0);
      REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      uint8_t got[8];
      size_t rem = nx_buffer_remaining(b);
      CHECK(nx_get_uint8_array(b, got, 8) == NX_ETYPE);
      CHECK(nx_get_char_array(b, reinterpret_cast<char *>(got), 8) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      REQUIRE(nx_get_bytes(b, got, 8) == 0);
      CHECK(std::memcmp(got, u8, 8) == 0);
      rem = nx_buffer_remaining(b);
      CHECK(nx_get_bytes(b, got, 8) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      REQUIRE(nx_get_uint8_array(b, got, 8) == 0);
      rem = nx_buffer_remaining(b);
      CHECK(nx_get_bytes(b, got, 8) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      int64_t v;
      REQUIRE(nx_get_int64(b, &v) == 0);
      CHECK(v == 42);
    }
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("nx_buffer_set_format", "[buffer][format]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b;
    const int native = nx_format_native();
    const int foreign = other_format(native);

    SECTION("works on an empty buffer, both ways") {
      REQUIRE(nx_buffer_set_format(b, NX_FORMAT_BIG) == 0);
      CHECK(nx_buffer_format(b) == NX_FORMAT_BIG);
      REQUIRE(nx_buffer_set_format(b, NX_FORMAT_LITTLE) == 0);
      CHECK(nx_buffer_format(b) == NX_FORMAT_LITTLE);
      REQUIRE(nx_buffer_set_format(b, foreign) == 0);
      CHECK(nx_buffer_format(b) == foreign);
    }

    SECTION("returns NX_EBUSY on a non-empty buffer") {
      REQUIRE(nx_put_int8(b, 1) == 0);
      CHECK(nx_buffer_set_format(b, foreign) == NX_EBUSY);
      CHECK(nx_buffer_format(b) == native);
      // Still non-empty after it has been read.
      REQUIRE(nx_buffer_rewind(b) == 0);
      int8_t v;
      REQUIRE(nx_get_int8(b, &v) == 0);
      CHECK(nx_buffer_set_format(b, foreign) == NX_EBUSY);
      CHECK(nx_buffer_format(b) == native);
      // The refused call changed nothing.
      REQUIRE(nx_buffer_rewind(b) == 0);
      REQUIRE(nx_get_int8(b, &v) == 0);
      CHECK(v == 1);
    }

    SECTION("a foreign buffer cannot change format once written either") {
      REQUIRE(nx_buffer_set_format(b, foreign) == 0);
      REQUIRE(nx_put_int32(b, 5) == 0);
      CHECK(nx_buffer_set_format(b, native) == NX_EBUSY);
      CHECK(nx_buffer_format(b) == foreign);
    }

    SECTION("a bad format returns NX_EINVAL") {
      for (int bad : {0, 3, -1, 255, INT_MAX, INT_MIN}) {
        INFO("format " << bad);
        CHECK(nx_buffer_set_format(b, bad) == NX_EINVAL);
        CHECK(nx_buffer_format(b) == native);
      }
      CHECK(nx_buffer_set_format(nullptr, NX_FORMAT_BIG) == NX_EINVAL);
    }
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("foreign format: every type round-trips (receiver makes right)",
          "[buffer][format]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    const int native = nx_format_native();
    const int format = GENERATE(as<int>{}, NX_FORMAT_BIG, NX_FORMAT_LITTLE);
    INFO("format " << format << " (native " << native << ")");

    buffer_ref b(1, format);
    REQUIRE(nx_buffer_format(b) == format);
    put_everything(b);
    CHECK(nx_buffer_format(b) == format);
    REQUIRE(nx_buffer_rewind(b) == 0);
    get_everything(b);
    CHECK(nx_buffer_remaining(b) == 0);

    // The same values take the same room in either format.
    buffer_ref n(1);
    REQUIRE(nx_buffer_format(n) == native);
    put_everything(n);
    CHECK(nx_buffer_length(n) == nx_buffer_length(b));
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("foreign format: multi-byte values and type checks",
          "[buffer][format]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    const int foreign = other_format(nx_format_native());
    buffer_ref b(0, foreign);
    REQUIRE(nx_buffer_format(b) == foreign);
    REQUIRE(nx_put_uint16(b, 0x0102) == 0);
    REQUIRE(nx_put_uint32(b, 0x01020304u) == 0);
    REQUIRE(nx_put_uint64(b, 0x0102030405060708ULL) == 0);
    REQUIRE(nx_put_int32(b, -2) == 0);
    REQUIRE(nx_put_double(b, -0.0) == 0);
    REQUIRE(nx_put_float(b, std::numeric_limits<float>::quiet_NaN()) == 0);
    REQUIRE(nx_put_bytes(b, "\x01\x02\x03\x04", 4) == 0);
    REQUIRE(nx_put_bytes(b, PADDING, sizeof PADDING) == 0);
    REQUIRE(nx_buffer_rewind(b) == 0);

    uint16_t u16 = 0;
    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int32_t i32 = 0;
    double d = 1;
    float f = 0;
    unsigned char raw[4] = {0};
    // A type mismatch is still detected in a foreign buffer.
    CHECK(nx_get_int16(b, reinterpret_cast<int16_t *>(&u16)) == NX_ETYPE);
    REQUIRE(nx_get_uint16(b, &u16) == 0);
    CHECK(u16 == 0x0102);
    REQUIRE(nx_get_uint32(b, &u32) == 0);
    CHECK(u32 == 0x01020304u);
    REQUIRE(nx_get_uint64(b, &u64) == 0);
    CHECK(u64 == 0x0102030405060708ULL);
    REQUIRE(nx_get_int32(b, &i32) == 0);
    CHECK(i32 == -2);
    REQUIRE(nx_get_double(b, &d) == 0);
    CHECK(d == 0.0);
    CHECK(std::signbit(d));
    REQUIRE(nx_get_float(b, &f) == 0);
    CHECK(std::isnan(f));
    // Bytes are never converted.
    REQUIRE(nx_get_bytes(b, raw, 4) == 0);
    CHECK(std::memcmp(raw, "\x01\x02\x03\x04", 4) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("retain and release", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);

  SECTION("release of a stand-alone buffer frees it") {
    nx_buffer_t *b = nullptr;
    REQUIRE(nx_buffer_create(1024, &b) == 0);
    REQUIRE(b != nullptr);
    int64_t big[1000] = {0};
    REQUIRE(nx_put_int64_array(b, big, 1000) == 0);
    CHECK(nx_buffer_release(b) == 0); // leak checkers see it freed
  }

  SECTION("each retain needs one release") {
    nx_buffer_t *b = nullptr;
    REQUIRE(nx_buffer_create(0, &b) == 0);
    CHECK(nx_buffer_retain(b) == 0);
    CHECK(nx_buffer_retain(b) == 0);
    CHECK(nx_buffer_release(b) == 0);
    CHECK(nx_buffer_release(b) == 0);
    // One reference left: still usable.
    REQUIRE(nx_put_int32(b, 5) == 0);
    REQUIRE(nx_buffer_rewind(b) == 0);
    int32_t v = 0;
    REQUIRE(nx_get_int32(b, &v) == 0);
    CHECK(v == 5);
    CHECK(nx_buffer_release(b) == 0);
  }

  SECTION("NULL arguments") {
    CHECK(nx_buffer_retain(nullptr) == NX_EINVAL);
    CHECK(nx_buffer_release(nullptr) == NX_EINVAL);
    CHECK(nx_buffer_create(16, nullptr) == NX_EINVAL);
    CHECK(nx_buffer_rewind(nullptr) == NX_EINVAL);
  }

  SECTION("many buffers") {
    std::vector<nx_buffer_t *> bufs(1000, nullptr);
    for (auto &b : bufs) {
      REQUIRE(nx_buffer_create(32, &b) == 0);
      REQUIRE(nx_put_double(b, 1.0) == 0);
    }
    int failures = 0;
    for (auto &b : bufs)
      failures += nx_buffer_release(b) != 0;
    CHECK(failures == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("puts and gets reject NULL arguments", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    buffer_ref b;
    int32_t a[4] = {1, 2, 3, 4};
    CHECK(nx_put_int8(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_uint8(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_int16(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_uint16(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_int32(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_uint32(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_int64(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_uint64(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_float(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_double(nullptr, 1) == NX_EINVAL);
    CHECK(nx_put_char(nullptr, 'x') == NX_EINVAL);
    CHECK(nx_put_int32_array(nullptr, a, 4) == NX_EINVAL);
    CHECK(nx_put_int32_array(b, nullptr, 4) == NX_EINVAL);
    CHECK(nx_put_double_array(b, nullptr, 4) == NX_EINVAL);
    CHECK(nx_put_bytes(nullptr, a, 4) == NX_EINVAL);
    CHECK(nx_put_bytes(b, nullptr, 4) == NX_EINVAL);
    CHECK(nx_buffer_length(b) == 0); // refused puts wrote nothing

    REQUIRE(nx_put_int32(b, 9) == 0);
    REQUIRE(nx_put_int32_array(b, a, 4) == 0);
    REQUIRE(nx_buffer_rewind(b) == 0);
    size_t rem = nx_buffer_remaining(b);
    int32_t v;
    CHECK(nx_get_int32(nullptr, &v) == NX_EINVAL);
    CHECK(nx_get_int32(b, nullptr) == NX_EINVAL);
    CHECK(nx_buffer_remaining(b) == rem);
    REQUIRE(nx_get_int32(b, &v) == 0);
    CHECK(v == 9);
    CHECK(nx_get_int32_array(b, nullptr, 4) == NX_EINVAL);
    CHECK(nx_get_int32_array(nullptr, a, 4) == NX_EINVAL);
    int32_t got[4];
    REQUIRE(nx_get_int32_array(b, got, 4) == 0);
    CHECK(std::memcmp(got, a, sizeof a) == 0);
    CHECK(nx_get_bytes(nullptr, got, 1) == NX_EINVAL);
  }
  CHECK(rt.finalize() == 0);
}

namespace {

// nx_sizeof_<T>(n) bounds the growth of one put of n values (an array put,
// or a scalar put for n == 1), and the values themselves fit in that growth.
template <class T> void check_sizeof(int format) {
  INFO(ops<T>::name() << ", format " << format);
  {
    buffer_ref b(0, format);
    REQUIRE(ops<T>::put(b, values<T>()[1]) == 0);
    size_t grew = nx_buffer_length(b);
    CHECK(grew >= sizeof(T));
    CHECK(ops<T>::size(1) >= grew);
  }
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{3}, size_t{1000}, size_t{100000}}) {
    INFO("array of " << n);
    buffer_ref b(0, format);
    REQUIRE(ops<T>::put(b, values<T>()[0]) == 0); // something before it
    size_t before = nx_buffer_length(b);
    std::vector<T> a = array_of<T>(n);
    REQUIRE(ops<T>::put_array(b, a.data(), n) == 0);
    size_t grew = nx_buffer_length(b) - before;
    CHECK(grew >= n * sizeof(T));
    CHECK(ops<T>::size(n) >= grew);
  }
  // n single puts fit in n times the size of one.
  buffer_ref b(0, format);
  for (int i = 0; i < 100; i++)
    REQUIRE(ops<T>::put(
                b, values<T>()[static_cast<size_t>(i) % values<T>().size()]) ==
            0);
  CHECK(100 * ops<T>::size(1) >= nx_buffer_length(b));
}

} // namespace

TEST_CASE("nx_sizeof_* bound the real growth of a buffer", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    const int format = GENERATE(as<int>{}, NX_FORMAT_LITTLE, NX_FORMAT_BIG);
    check_sizeof<int8_t>(format);
    check_sizeof<uint8_t>(format);
    check_sizeof<int16_t>(format);
    check_sizeof<uint16_t>(format);
    check_sizeof<int32_t>(format);
    check_sizeof<uint32_t>(format);
    check_sizeof<int64_t>(format);
    check_sizeof<uint64_t>(format);
    check_sizeof<float>(format);
    check_sizeof<double>(format);
    check_sizeof<char>(format);

    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{4096}}) {
      INFO("bytes " << n << ", format " << format);
      buffer_ref b(0, format);
      std::vector<unsigned char> v = byte_pattern(n);
      REQUIRE(nx_put_bytes(b, v.data(), n) == 0);
      CHECK(nx_buffer_length(b) >= n);
      CHECK(nx_sizeof_bytes(n) >= nx_buffer_length(b));
    }
  }
  CHECK(rt.finalize() == 0);
}

// Above 64 KiB a payload has a page-aligned block of its own, so a
// page-aligned array put there lands 5 bytes past a page boundary (the tag
// and the count come first): the copy nexus/src/buffers/buf.h's nxi_copy makes
// with vector moves, from 4 KiB to just under 1 MiB. Sizes around its
// bounds come back unchanged, read into a page-aligned array.
TEST_CASE("page-aligned byte arrays around the vector copy's bounds",
          "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  const size_t max = (size_t{1} << 20) + 4096;
  auto *in = static_cast<unsigned char *>(aligned_alloc(4096, max));
  auto *out = static_cast<unsigned char *>(aligned_alloc(4096, max));
  REQUIRE(in != nullptr);
  REQUIRE(out != nullptr);
  std::vector<unsigned char> pattern = byte_pattern(max);
  std::memcpy(in, pattern.data(), max);
  for (size_t n :
       {size_t{4095}, size_t{4096}, size_t{4097}, size_t{65539},
        (size_t{1} << 20) - 1, size_t{1} << 20, (size_t{1} << 20) + 1}) {
    INFO("bytes " << n);
    buffer_ref b(nx_sizeof_bytes(n));
    REQUIRE(nx_put_bytes(b, in, n) == 0);
    std::memset(out, 0, max);
    REQUIRE(nx_get_bytes(b, out, n) == 0);
    CHECK(std::memcmp(out, in, n) == 0);
    CHECK(out[n] == 0);
  }
  free(in);
  free(out);
  CHECK(rt.finalize() == 0);
}

TEST_CASE("nx_sizeof_* grow with the count", "[buffer]") {
  CHECK(nx_sizeof_int8(10) >= 10);
  CHECK(nx_sizeof_int16(10) >= 20);
  CHECK(nx_sizeof_int32(10) >= 40);
  CHECK(nx_sizeof_int64(10) >= 80);
  CHECK(nx_sizeof_float(10) >= 40);
  CHECK(nx_sizeof_double(10) >= 80);
  CHECK(nx_sizeof_char(10) >= 10);
  CHECK(nx_sizeof_bytes(10) >= 10);
  CHECK(nx_sizeof_int32(1000) > nx_sizeof_int32(10));
}

TEST_CASE("a buffer's bytes make an equal buffer elsewhere", "[buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  for (int format : {NX_FORMAT_LITTLE, NX_FORMAT_BIG}) {
    nx_buffer_t *a;
    REQUIRE(nx_buffer_create(16, &a) == 0);
    REQUIRE(nx_buffer_set_format(a, format) == 0);
    nx_gp_t gp;
    int x = 0;
    REQUIRE(nx_gp_make(&x, &gp) == 0);
    const double d[3] = {1.5, -2.25, 1e300};
    REQUIRE(nx_put_uint64(a, 0x0102030405060708ull) == 0);
    REQUIRE(nx_put_double_array(a, d, 3) == 0);
    REQUIRE(nx_put_gp(a, &gp) == 0);
    const void *bytes;
    size_t len;
    REQUIRE(nx_buffer_bytes(a, &bytes, &len) == 0);
    CHECK(len == nx_buffer_length(a));
    nx_buffer_t *b;
    REQUIRE(nx_buffer_from_bytes(bytes, len, nx_buffer_format(a), &b) == 0);
    REQUIRE(nx_buffer_release(a) == 0); // b holds a copy
    uint64_t u;
    double e[3];
    nx_gp_t back = NX_GP_NULL;
    CHECK(nx_get_uint64(b, &u) == 0);
    CHECK(u == 0x0102030405060708ull);
    CHECK(nx_get_double_array(b, e, 3) == 0);
    CHECK(std::memcmp(d, e, sizeof(d)) == 0);
    CHECK(nx_get_gp(b, &back) == 0);
    CHECK(nx_gp_equal(&gp, &back));
    CHECK(nx_buffer_remaining(b) == 0);
    nx_gp_release(&back);
    nx_gp_release(&gp);
    REQUIRE(nx_buffer_release(b) == 0);
  }
  nx_buffer_t *b = nullptr;
  CHECK(nx_buffer_from_bytes(nullptr, 4, NX_FORMAT_LITTLE, &b) == NX_EINVAL);
  CHECK(nx_buffer_from_bytes("x", 1, 9, &b) == NX_EINVAL);
  CHECK(nx_buffer_bytes(nullptr, nullptr, nullptr) == NX_EINVAL);
  // Garbage bytes are a buffer like any other: the gets refuse them.
  const unsigned char junk[] = {13, 1, 2, 3};
  REQUIRE(nx_buffer_from_bytes(junk, sizeof(junk), NX_FORMAT_LITTLE, &b) == 0);
  nx_gp_t g = NX_GP_NULL;
  CHECK(nx_get_gp(b, &g) == NX_ERANGE);
  REQUIRE(nx_buffer_release(b) == 0);
}

namespace {

// The bytes nx_put_T_array writes in the native format (docs/design.md,
// "Values"): tag | 0x80, the count as a native u32, the elements.
template <class T>
std::vector<unsigned char> array_bytes(unsigned char tag,
                                       const std::vector<T> &a) {
  std::vector<unsigned char> out(5 + a.size() * sizeof(T));
  uint32_t n = static_cast<uint32_t>(a.size());
  out[0] = static_cast<unsigned char>(tag | 0x80);
  std::memcpy(&out[1], &n, 4);
  if (!a.empty())
    std::memcpy(&out[5], a.data(), a.size() * sizeof(T));
  return out;
}

// Puts and gets of `T` arrays of every small count (the inline path copies
// up to 16 bytes without memcpy) and around NX_PLACE_MIN bytes (from where
// an array is a tail and takes the general path): the bytes are the
// documented ones, and a get copies exactly the elements.
template <class T> void inline_arrays(unsigned char tag) {
  std::vector<size_t> counts;
  for (size_t n = 0; n <= 40; n++)
    counts.push_back(n);
  for (size_t n :
       {NX_PLACE_MIN / sizeof(T) - 1, size_t{NX_PLACE_MIN / sizeof(T)},
        NX_PLACE_MIN / sizeof(T) + 1})
    counts.push_back(n);
  for (size_t n : counts) {
    INFO(ops<T>::name() << " array count " << n);
    std::vector<T> a = array_of<T>(n);
    buffer_ref b(ops<T>::size(n));
    REQUIRE(ops<T>::put_array(b, a.data(), n) == 0);
    const void *bytes;
    size_t len;
    REQUIRE(nx_buffer_bytes(b, &bytes, &len) == 0);
    std::vector<unsigned char> want = array_bytes(tag, a);
    REQUIRE(len == want.size());
    CHECK(std::memcmp(bytes, want.data(), len) == 0);
    // One element more than asked for, which the get must leave alone.
    std::vector<T> got(n + 1, values<T>()[1]);
    REQUIRE(ops<T>::get_array(b, got.data(), n) == 0);
    CHECK(std::memcmp(got.data(), a.data(), n * sizeof(T)) == 0);
    CHECK(same(got[n], values<T>()[1]));
    CHECK(nx_buffer_remaining(b) == 0);
  }
}

// A native buffer holding `bytes`, read from the start.
nx_buffer_t *native_from(const std::vector<unsigned char> &bytes) {
  nx_buffer_t *b = nullptr;
  REQUIRE(nx_buffer_from_bytes(bytes.data(), bytes.size(), nx_format_native(),
                               &b) == 0);
  return b;
}

} // namespace

TEST_CASE("arrays put and got inline are the documented bytes",
          "[buffer][inline]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  SECTION("int8") { inline_arrays<int8_t>(0x01); }
  SECTION("int16") { inline_arrays<int16_t>(0x03); }
  SECTION("int32") { inline_arrays<int32_t>(0x05); }
  SECTION("double") { inline_arrays<double>(0x0A); }
  SECTION("bytes") {
    for (size_t n : {size_t{0}, size_t{3}, size_t{4}, size_t{8}, size_t{16},
                     size_t{17}, size_t{NX_PLACE_MIN}}) {
      INFO("bytes " << n);
      std::vector<unsigned char> v = byte_pattern(n);
      buffer_ref b(nx_sizeof_bytes(n));
      REQUIRE(nx_put_bytes(b, v.data(), n) == 0);
      const void *bytes;
      size_t len;
      REQUIRE(nx_buffer_bytes(b, &bytes, &len) == 0);
      std::vector<unsigned char> want = array_bytes<unsigned char>(0x0C, v);
      REQUIRE(len == want.size());
      CHECK(std::memcmp(bytes, want.data(), len) == 0);
    }
  }
  SECTION("a buffer that grows between arrays") {
    // From the smallest capacity: some puts find no room and grow the
    // buffer on the general path, the others are written inline.
    buffer_ref b(0);
    const double d[3] = {1.5, -2.25, 1e300};
    for (int i = 0; i < 2000; i++)
      REQUIRE(nx_put_double_array(b, d, 3) == 0);
    CHECK(nx_buffer_length(b) == 2000 * nx_sizeof_double(3));
    for (int i = 0; i < 2000; i++) {
      double e[3] = {0, 0, 0};
      REQUIRE(nx_get_double_array(b, e, 3) == 0);
      REQUIRE(std::memcmp(d, e, sizeof(d)) == 0);
    }
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("a get into the array's own elements copies nothing",
          "[buffer][inline]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  // The int16 takes 3 bytes, so that the elements start 8 bytes in and a
  // get in place points at them rather than at an aligned copy.
  for (size_t n : {size_t{2}, size_t{3}}) {
    INFO("count " << n);
    const double d[3] = {1.5, -2.25, 1e300};
    buffer_ref b(64);
    REQUIRE(nx_put_int16(b, 7) == 0);
    REQUIRE(nx_put_double_array(b, d, n) == 0);
    int16_t s;
    const double *p;
    REQUIRE(nx_get_int16(b, &s) == 0);
    REQUIRE(nx_get_double_array_ptr(b, &p, n) == 0);
    const void *bytes;
    size_t len;
    REQUIRE(nx_buffer_bytes(b, &bytes, &len) == 0);
    REQUIRE(reinterpret_cast<const unsigned char *>(p) ==
            static_cast<const unsigned char *>(bytes) + 8);
    REQUIRE(nx_buffer_rewind(b) == 0);
    REQUIRE(nx_get_int16(b, &s) == 0);
    CHECK(nx_get_double_array(b, const_cast<double *>(p), n) == 0);
    CHECK(std::memcmp(p, d, n * sizeof(double)) == 0);
    CHECK(nx_buffer_remaining(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("arrays the inline path leaves to the general one read as before",
          "[buffer][inline]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  const double x = 1.5;
  unsigned char le[8], rev[8];
  std::memcpy(le, &x, 8);
  for (int i = 0; i < 8; i++)
    rev[i] = le[7 - i];
  uint32_t one = 1;
  unsigned char count[4];
  std::memcpy(count, &one, 4);
  SECTION("an array marked flipped in a native buffer is reversed") {
    std::vector<unsigned char> bytes = {0x8A | 0x20};
    bytes.insert(bytes.end(), count, count + 4);
    bytes.insert(bytes.end(), rev, rev + 8);
    nx_buffer_t *b = native_from(bytes);
    double v = 0;
    CHECK(nx_get_double_array(b, &v, 1) == 0);
    CHECK(v == x);
    // In place: converted where it is, once, and read again as converted.
    REQUIRE(nx_buffer_rewind(b) == 0);
    const double *p;
    CHECK(nx_get_double_array_ptr(b, &p, 1) == 0);
    CHECK(*p == x);
    REQUIRE(nx_buffer_rewind(b) == 0);
    v = 0;
    CHECK(nx_get_double_array(b, &v, 1) == 0);
    CHECK(v == x);
    REQUIRE(nx_buffer_release(b) == 0);
  }
  SECTION("a padded array in a native buffer") {
    std::vector<unsigned char> bytes = {0x8A | 0x40};
    bytes.insert(bytes.end(), count, count + 4);
    bytes.insert(bytes.end(), {3, 0, 0, 0});
    bytes.insert(bytes.end(), le, le + 8);
    nx_buffer_t *b = native_from(bytes);
    double v = 0;
    CHECK(nx_get_double_array(b, &v, 1) == 0);
    CHECK(v == x);
    REQUIRE(nx_buffer_release(b) == 0);
    bytes[5] = 8; // more pad than the format allows
    b = native_from(bytes);
    CHECK(nx_get_double_array(b, &v, 1) == NX_EPROTO);
    CHECK(nx_buffer_remaining(b) == bytes.size());
    REQUIRE(nx_buffer_release(b) == 0);
  }
  SECTION("an array whose elements are cut short") {
    std::vector<unsigned char> bytes = {0x8A};
    bytes.insert(bytes.end(), count, count + 4);
    bytes.insert(bytes.end(), le, le + 7);
    nx_buffer_t *b = native_from(bytes);
    double v = 0;
    const double *p = nullptr;
    CHECK(nx_get_double_array(b, &v, 1) == NX_ERANGE);
    CHECK(nx_get_double_array_ptr(b, &p, 1) == NX_ERANGE);
    CHECK(nx_buffer_remaining(b) == bytes.size());
    REQUIRE(nx_buffer_release(b) == 0);
  }
  SECTION("a scalar whose value is cut short") {
    std::vector<unsigned char> bytes = {0x0A};
    bytes.insert(bytes.end(), le, le + 7);
    nx_buffer_t *b = native_from(bytes);
    double v = 0;
    CHECK(nx_get_double(b, &v) == NX_ERANGE);
    CHECK(nx_buffer_remaining(b) == bytes.size());
    bytes.push_back(le[7]);
    REQUIRE(nx_buffer_release(b) == 0);
    b = native_from(bytes);
    CHECK(nx_get_double(b, &v) == 0);
    CHECK(v == x);
    REQUIRE(nx_buffer_release(b) == 0);
  }
  CHECK(rt.finalize() == 0);
}
