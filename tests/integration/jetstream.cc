#include "tests/integration/jetstream.h"

#include <nats/nats.h>

#include <stdexcept>

namespace weir::itest {
namespace {

// One connection + JetStream context for the length of a call.
struct Js {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  explicit Js(const std::string& url) {
    natsStatus s = natsConnection_ConnectTo(&nc, url.c_str());
    if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, nullptr);
    if (s != NATS_OK) {
      close();
      throw std::runtime_error("connect to " + url + ": " + natsStatus_GetText(s));
    }
  }
  ~Js() { close(); }
  void close() {
    if (js) jsCtx_Destroy(js);
    if (nc) natsConnection_Destroy(nc);
    js = nullptr;
    nc = nullptr;
  }
};

void check(natsStatus s, jsErrCode jerr, const std::string& what) {
  if (s == NATS_OK) return;
  throw std::runtime_error(what + ": " + natsStatus_GetText(s) + " (JetStream error " +
                           std::to_string(static_cast<int>(jerr)) + ")");
}

}  // namespace

namespace {
void publish_on(Js& c, const std::string& subject, const std::string& id, const std::string& body) {
  natsMsg* msg = nullptr;
  jsPubAck* ack = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, "Weir-Id", id.c_str());
  if (s == NATS_OK) s = js_PublishMsg(&ack, c.js, msg, nullptr, &jerr);
  if (ack) jsPubAck_Destroy(ack);
  if (msg) natsMsg_Destroy(msg);
  check(s, jerr, "publish to " + subject);
}
}  // namespace

void js_publish(const std::string& url, const std::string& subject, const std::string& id, const std::string& body) {
  Js c(url);
  publish_on(c, subject, id, body);
}

void js_publish_all(const std::string& url, const std::string& subject,
                    const std::vector<std::pair<std::string, std::string>>& events) {
  Js c(url);
  for (const auto& [id, body] : events) publish_on(c, subject, id, body);
}

void js_delete_consumer(const std::string& url, const std::string& stream, const std::string& consumer) {
  Js c(url);
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check(js_DeleteConsumer(c.js, stream.c_str(), consumer.c_str(), nullptr, &jerr), jerr,
        "delete consumer " + stream + "/" + consumer);
}

JsConsumerConfig js_consumer_config(const std::string& url, const std::string& stream, const std::string& consumer) {
  Js c(url);
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check(js_GetConsumerInfo(&ci, c.js, stream.c_str(), consumer.c_str(), nullptr, &jerr), jerr,
        "consumer info " + stream + "/" + consumer);
  JsConsumerConfig out{
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(ci->Config->AckWait)),
      ci->Config->MaxAckPending};
  jsConsumerInfo_Destroy(ci);
  return out;
}

void js_set_consumer_ack_wait(const std::string& url, const std::string& stream, const std::string& consumer,
                              std::chrono::milliseconds ack_wait) {
  Js c(url);
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check(js_GetConsumerInfo(&ci, c.js, stream.c_str(), consumer.c_str(), nullptr, &jerr), jerr,
        "consumer info " + stream + "/" + consumer);
  ci->Config->AckWait = std::chrono::duration_cast<std::chrono::nanoseconds>(ack_wait).count();
  jsConsumerInfo* updated = nullptr;
  natsStatus s = js_UpdateConsumer(&updated, c.js, stream.c_str(), ci->Config, nullptr, &jerr);
  if (updated) jsConsumerInfo_Destroy(updated);
  jsConsumerInfo_Destroy(ci);
  check(s, jerr, "update consumer " + stream + "/" + consumer);
}

std::vector<std::string> js_set_stream_subjects(const std::string& url, const std::string& stream,
                                                const std::vector<std::string>& subjects) {
  Js c(url);
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check(js_GetStreamInfo(&si, c.js, stream.c_str(), nullptr, &jerr), jerr, "stream info " + stream);
  std::vector<std::string> old;
  for (int i = 0; i < si->Config->SubjectsLen; ++i) old.emplace_back(si->Config->Subjects[i]);
  std::vector<const char*> subs;
  for (const auto& s : subjects) subs.push_back(s.c_str());
  const char** was = si->Config->Subjects;
  const int was_len = si->Config->SubjectsLen;
  si->Config->Subjects = subs.data();
  si->Config->SubjectsLen = static_cast<int>(subs.size());
  jsStreamInfo* updated = nullptr;
  natsStatus s = js_UpdateStream(&updated, c.js, si->Config, nullptr, &jerr);
  si->Config->Subjects = was;  // the info owns and frees its own array
  si->Config->SubjectsLen = was_len;
  if (updated) jsStreamInfo_Destroy(updated);
  jsStreamInfo_Destroy(si);
  check(s, jerr, "update stream " + stream);
  return old;
}

JsStreamState js_stream_state(const std::string& url, const std::string& stream) {
  Js c(url);
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  check(js_GetStreamInfo(&si, c.js, stream.c_str(), nullptr, &jerr), jerr, "stream info " + stream);
  JsStreamState out{static_cast<int64_t>(si->State.Bytes), static_cast<int64_t>(si->State.Msgs),
                    si->Config ? si->Config->MaxBytes : 0};
  jsStreamInfo_Destroy(si);
  return out;
}

}  // namespace weir::itest
