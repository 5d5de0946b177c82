// The starvation watch of a pull consumer (docs/adr/0235-starved-consumer-recovery.md):
// a durable that holds messages for waiting requests but delivers none is deleted and
// created again from its ack floor. State: PullConsumer::Impl (pull_consumer_impl.h).
#include <nats/nats.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/base/log.h"
#include "runtime/nats/nats_msg.h"
#include "runtime/nats/nats_status.h"
#include "runtime/nats/pull_consumer_impl.h"

namespace weir {

bool PullConsumer::Impl::watch_tick(Clock::time_point now) {
  if (starve_check.count() <= 0 || !link_up()) return false;
  if (watch != Watch::kIdle) {
    if (now - watch_sent < kWatchTimeout) return false;
    // Unanswered (a lost answer, a restarting server): an info is asked for later; a
    // step of a recovery is idempotent and sent again — a deleted durable must come back.
    if (watch == Watch::kInfo) {
      watch = Watch::kIdle;
      next_check = now + check_every;
      return false;
    }
    return true;
  }
  if (verify_at && now >= *verify_at) {
    watch = Watch::kInfo;
    return true;
  }
  if (requests.empty() || now - last_message < starve_check) {
    suspect.reset();
    return false;
  }
  if (now < next_check) return false;
  watch = Watch::kInfo;
  return true;
}

void PullConsumer::Impl::send_watch() {
  std::string subject, body, reply;
  {
    MutexLock lock(mu);
    if (stopped || watch == Watch::kIdle) return;
    watch_sent = Clock::now();
    reply = inbox_prefix + "w" + std::to_string(++watch_gen);
    const std::string name = stream_name + "." + durable;
    switch (watch) {
      case Watch::kInfo: subject = "$JS.API.CONSUMER.INFO." + name; break;
      case Watch::kDelete: subject = "$JS.API.CONSUMER.DELETE." + name; break;
      case Watch::kPurge:
        subject = "$JS.API.STREAM.PURGE." + stream_name;
        body = nlohmann::json{{"filter", filter}, {"seq", purge_below}}.dump();
        break;
      case Watch::kCreate:
        subject = "$JS.API.CONSUMER.DURABLE.CREATE." + name;
        body = create_body;
        break;
      case Watch::kIdle: return;
    }
  }
  natsStatus s = natsConnection_PublishRequest(nc, subject.c_str(), reply.c_str(), body.data(),
                                               static_cast<int>(body.size()));
  (void)s;  // not sent: the step times out and goes again (kWatchTimeout)
}

void PullConsumer::Impl::watch_answer(std::string_view gen, natsMsg* msg) {
  auto j = nlohmann::json::parse(natsMsg_GetData(msg), natsMsg_GetData(msg) + natsMsg_GetDataLength(msg), nullptr,
                                 false);
  const bool no_answer = natsMsg_IsNoResponders(msg) || !j.is_object();
  const int err_code = (!no_answer && j.contains("error") && j["error"].is_object()) ? j["error"].value("err_code", 0)
                                                                                     : (no_answer ? -1 : 0);
  bool send = false;
  {
    MutexLock lock(mu);
    if (stopped || watch == Watch::kIdle || gen != std::to_string(watch_gen)) return;
    const auto now = Clock::now();
    switch (watch) {
      case Watch::kInfo: send = on_info(j, err_code, now); break;
      case Watch::kDelete:
        // Gone already (a peer sharing the durable recovered it a moment ago) counts as deleted.
        if (err_code != 0 && err_code != 10014) {
          log::warn("starved consumer not deleted, watching on", {{"consumer", durable}, {"error", j.dump()}});
          watch = Watch::kIdle;
          suspect.reset();
          next_check = now + check_every;
          break;
        }
        watch = purge_below > 1 ? Watch::kPurge : Watch::kCreate;
        send = true;
        break;
      case Watch::kPurge:
        // Not purged: what the stream holds below the floor is delivered again (duplicates).
        if (err_code != 0) log::warn("acked messages not purged", {{"consumer", durable}, {"error", j.dump()}});
        watch = Watch::kCreate;
        send = true;
        break;
      case Watch::kCreate:
        if (err_code != 0) {
          // Sent again after kWatchTimeout: the durable must exist again.
          log::warn("consumer not created again yet, retrying", {{"consumer", durable}, {"error", j.dump()}});
          break;
        }
        watch = Watch::kIdle;
        suspect.reset();
        next_check = now + check_every;
        recoveries.fetch_add(1);
        if (recreated_metric) recreated_metric->fetch_add(1);
        log::info(forgotten ? "consumer created again; it delivers what its stream holds"
                            : "starved consumer created again from its ack floor",
                  {{"consumer", durable}});
        forgotten = false;
        // Its waiting requests went with the old durable.
        requests.clear();
        outstanding = 0;
        retry_at = {};
        break;
      case Watch::kIdle: break;
    }
  }
  if (send) send_watch();
  request();
}

bool PullConsumer::Impl::recreate_forgotten() {
  if (!memory_state || starve_check.count() <= 0 || watch != Watch::kIdle) return false;
  watch = Watch::kCreate;
  forgotten = true;
  log::warn("consumer gone from the server (restarted: its state was in memory), creating it again",
            {{"consumer", durable}});
  return true;
}

bool PullConsumer::Impl::on_info(const nlohmann::json& j, int err_code, Clock::time_point now) {
  watch = Watch::kIdle;
  next_check = now + check_every;
  if (err_code == 10014) {  // consumer not found
    verify_at.reset();
    return recreate_forgotten();
  }
  if (err_code != 0) {
    if (verify_at) verify_at = now + kVerifyRetry;  // not an answer to whether it is there
    return false;
  }
  verify_at.reset();
  auto num = [&](const nlohmann::json& o, const char* key) -> uint64_t {
    auto it = o.find(key);
    return it != o.end() && it->is_number_unsigned()  ? it->get<uint64_t>()
           : it != o.end() && it->is_number_integer() ? static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()))
                                                      : 0;
  };
  const uint64_t pending = num(j, "num_pending"), waiting = num(j, "num_waiting"),
                 ack_pending = num(j, "num_ack_pending");
  const auto& cfg = j.contains("config") && j["config"].is_object() ? j["config"] : nlohmann::json::object();
  const uint64_t max_ack_pending = num(cfg, "max_ack_pending");
  const auto& delivered = j.contains("delivered") && j["delivered"].is_object() ? j["delivered"]
                                                                                : nlohmann::json::object();
  const auto& floor = j.contains("ack_floor") && j["ack_floor"].is_object() ? j["ack_floor"] : nlohmann::json::object();
  const std::string created = j.value("created", std::string());
  const uint64_t dseq = num(delivered, "consumer_seq"), floor_seq = num(floor, "stream_seq");
  // Starved: requests wait, and either new messages are not handed out although the
  // window is open, or entries due for redelivery are not redelivered — this process
  // holds none, none of its naks delays them, and AckWait has long passed. (Entries
  // that another process sharing the durable holds or delays look the same: recreating
  // it then redelivers early, duplicates, never a loss.)
  last_info = "pending=" + std::to_string(pending) + " ack_pending=" + std::to_string(ack_pending) +
              " waiting=" + std::to_string(waiting) + " max_ack_pending=" + std::to_string(max_ack_pending);
  last_info_at = now;
  const bool window_open = max_ack_pending == 0 || ack_pending < max_ack_pending;
  const bool tail_starved = pending > 0 && window_open;
  const bool redeliveries_starved = ack_pending > 0 && in_hand == 0 && now >= defer_until &&
                                    now - last_message >= ack_wait + starve_check;
  if (waiting == 0 || (!tail_starved && !redeliveries_starved)) {
    // Nothing to deliver, or what is pending is held: look less often while nothing is
    // waiting at all; a message received resets it.
    suspect.reset();
    if (pending == 0 && ack_pending == 0)
      check_every = std::min(check_every * 2, std::max(starve_check, std::chrono::milliseconds(60000)));
    next_check = now + check_every;
    if (waiting > 0 && ack_pending > 0 && in_hand == 0) {
      // Entries due for redelivery that only the silence so far keeps from counting as
      // starved: the first sample is taken when it can count, not a whole check later (the
      // second, which confirms it, comes starve_check after).
      const Clock::time_point due = std::max(defer_until, last_message + ack_wait + starve_check);
      next_check = std::max(now, std::min(next_check, due));
    }
    return false;
  }
  if (!suspect || suspect->created != created || suspect->delivered != dseq || suspect->ack_floor != floor_seq) {
    suspect = Suspect{created, dseq, floor_seq, now};
    return false;
  }
  if (now - suspect->at < starve_check) return false;
  // The same durable delivered nothing in that time although messages and requests were
  // waiting: starved.
  purge_below = floor_seq + 1;
  log::warn(
      "consumer starved: the server holds messages for waiting requests but delivers none; creating it "
      "again from its ack floor",
      {{"consumer", durable},
       {"num_pending", std::to_string(pending)},
       {"num_ack_pending", std::to_string(ack_pending)},
       {"ack_floor_stream_seq", std::to_string(purge_below - 1)},
       {"delivered_stream_seq", std::to_string(num(delivered, "stream_seq"))},
       {"silent_ms",
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_message).count())}});
  watch = Watch::kDelete;
  return true;
}

}  // namespace weir
