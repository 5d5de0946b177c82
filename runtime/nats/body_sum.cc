// Body checksums: stamped on publish, checked on receipt (docs/adr/0286-body-checksums.md).
#include "runtime/nats/body_sum.h"

#include <cstdint>
#include <string>

#include "runtime/base/crc32c.h"

namespace weir {

natsStatus make_stamped_msg(natsMsg** out, const char* subject, const char* reply, std::string_view body,
                            const Headers& headers) {
  natsStatus s = natsMsg_Create(out, subject, reply, body.data(), static_cast<int>(body.size()));
  for (const auto& [k, v] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Set(*out, k.c_str(), v.c_str());
  }
  if (s == NATS_OK) s = natsMsgHeader_Set(*out, layout::kHeaderSum, crc32c_hex(body).c_str());
  return s;
}

BodySum check_body_sum(natsMsg* msg) {
  const char* v = nullptr;
  natsStatus s = natsMsgHeader_Get(msg, layout::kHeaderSum, &v);
  if (s == NATS_NOT_FOUND) return BodySum::kAbsent;
  // Any other failure: cnats could not parse the header block (a hybrid cut inside it).
  uint32_t want = 0;
  if (s != NATS_OK || v == nullptr || !parse_crc32c_hex(v, &want)) return BodySum::kBroken;
  const std::string_view body(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  return crc32c(body) == want ? BodySum::kIntact : BodySum::kBroken;
}

}  // namespace weir
