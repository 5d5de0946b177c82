#include "runtime/base/trace.h"

#include <random>

namespace weir::trace {
namespace {

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool hex_field(std::string_view v, size_t from, size_t n) {
  bool nonzero = false;
  for (size_t i = from; i < from + n; ++i) {
    if (!is_lower_hex(v[i])) return false;
    nonzero |= v[i] != '0';
  }
  return nonzero;
}

// splitmix64 seeded once per thread: ids need to be unique, not secret, and cheap.
uint64_t next_random() {
  thread_local uint64_t state = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void put_hex(char* out, uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) {
    out[i] = kDigits[v & 0xf];
    v >>= 4;
  }
}

uint64_t nonzero_random() {
  uint64_t v = 0;
  while (v == 0) v = next_random();
  return v;
}

}  // namespace

bool valid_traceparent(std::string_view v) {
  if (v.size() != kTraceparentSize) return false;
  if (v[0] != '0' || v[1] != '0' || v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  if (!hex_field(v, 3, 32) || !hex_field(v, 36, 16)) return false;
  return is_lower_hex(v[53]) && is_lower_hex(v[54]);
}

bool valid_tracestate(std::string_view v) {
  if (v.size() > kMaxTracestate) return false;
  for (char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void random_span_id(char out[16]) { put_hex(out, nonzero_random()); }

std::string new_traceparent() {
  std::string tp(kTraceparentSize, '-');
  tp[0] = '0';
  tp[1] = '0';
  put_hex(&tp[3], nonzero_random());
  put_hex(&tp[19], next_random());
  random_span_id(&tp[36]);
  tp[53] = '0';
  tp[54] = '1';
  return tp;
}

std::string child_traceparent(std::string_view parent) {
  if (!valid_traceparent(parent)) return new_traceparent();
  std::string tp(parent);
  random_span_id(&tp[36]);
  return tp;
}

}  // namespace weir::trace
