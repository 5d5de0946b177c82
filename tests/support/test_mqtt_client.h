// TestMqttClient: a small blocking MQTT client for tests (Paho MQTT C++): publish and wait
// for the broker's PUBACK; subscribe and collect what arrives. Thread-safe; Paho's threads
// append arrivals under a mutex.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace weir::ctest {

struct Arrival {
  std::string topic;
  std::string payload;
  bool dup = false;
};

class TestMqttClient {
 public:
  // clean = false keeps the session (and QoS 1 messages queued for it) on the broker.
  TestMqttClient(const std::string& url, const std::string& client_id, bool clean = true);
  ~TestMqttClient();
  // Publishes and waits for the broker's confirmation (QoS 1: PUBACK); throws on failure.
  void publish(const std::string& topic, const std::string& payload, int qos = 1, bool retain = false);
  void subscribe(const std::string& filter, int qos = 1);
  std::vector<Arrival> arrivals() const;
  size_t count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::ctest
