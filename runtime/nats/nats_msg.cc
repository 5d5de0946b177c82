#include "runtime/nats/nats_msg.h"

#include <cstddef>
#include <cstring>

#include <nats/nats.h>

// Exported by libnats 3.x (msg.c) but not declared in its public headers: the free callback
// natsMsg_create stores in every message's GC header.
extern "C" void natsMsg_free(void* object);  // NOLINT(readability-identifier-naming): cnats' name

namespace weir {

namespace {

// cnats' natsGCItem (src/gc.h): the first member of every garbage-collected object,
// natsMsg included ("This structure should be included as the first field of any object
// that needs to be garbage collected").
struct GcItem {
  void* next;
  void (*free_cb)(void*);
};

}  // namespace

bool free_nats_msg(natsMsg* msg) {
  if (msg == nullptr) return false;
  void (*cb)(void*) = nullptr;
  char* at = reinterpret_cast<char*>(msg) + offsetof(GcItem, free_cb);
  std::memcpy(&cb, at, sizeof cb);
  // Only what is recognisably cnats' own callback is cleared: a layout this code does not
  // know leaves the message to natsMsg_Destroy's collector path.
  const bool inline_free = cb == &natsMsg_free;
  if (inline_free) {
    cb = nullptr;
    std::memcpy(at, &cb, sizeof cb);
  }
  natsMsg_Destroy(msg);  // with no free callback: natsMsg_free here, on this thread
  return inline_free;
}

}  // namespace weir
