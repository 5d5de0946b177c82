#include "tests/support/test_mqtt_client.h"

#include <mqtt/async_client.h>

#include "runtime/base/thread_annotations.h"

#include <chrono>
#include <mutex>
#include <stdexcept>

namespace weir::ctest {

struct TestMqttClient::Impl {
  ::mqtt::async_client client;
  mutable Mutex mu;
  std::vector<Arrival> arrivals GUARDED_BY(mu);
  Impl(const std::string& url, const std::string& id) : client(url, id, nullptr) {}
};

TestMqttClient::TestMqttClient(const std::string& url, const std::string& client_id, bool clean)
    : impl_(std::make_unique<Impl>(url, client_id)) {
  Impl* m = impl_.get();
  m->client.set_message_callback([m](::mqtt::const_message_ptr msg) {
    MutexLock lock(m->mu);
    m->arrivals.push_back({msg->get_topic(), msg->get_payload_str(), msg->is_duplicate()});
  });
  auto opts = ::mqtt::connect_options_builder()
                  .clean_session(clean)
                  .automatic_reconnect(std::chrono::milliseconds(100), std::chrono::seconds(1))
                  .connect_timeout(std::chrono::seconds(5))
                  .finalize();
  try {
    m->client.connect(opts)->wait();
  } catch (const ::mqtt::exception& e) {
    throw std::runtime_error("TestMqttClient: cannot connect to " + url + ": " + e.what());
  }
}

TestMqttClient::~TestMqttClient() {
  try {
    if (impl_->client.is_connected()) impl_->client.disconnect()->wait_for(std::chrono::seconds(2));
  } catch (const ::mqtt::exception&) {
  }
}

void TestMqttClient::publish(const std::string& topic, const std::string& payload, int qos, bool retain) {
  try {
    if (!impl_->client.publish(topic, payload.data(), payload.size(), qos, retain)
             ->wait_for(std::chrono::seconds(10))) {
      throw std::runtime_error("TestMqttClient: no PUBACK for a publish to " + topic);
    }
  } catch (const ::mqtt::exception& e) {
    throw std::runtime_error("TestMqttClient: publish to " + topic + " failed: " + e.what());
  }
}

void TestMqttClient::subscribe(const std::string& filter, int qos) {
  try {
    impl_->client.subscribe(filter, qos)->wait();
  } catch (const ::mqtt::exception& e) {
    throw std::runtime_error("TestMqttClient: subscribe to " + filter + " failed: " + e.what());
  }
}

std::vector<Arrival> TestMqttClient::arrivals() const {
  MutexLock lock(impl_->mu);
  return impl_->arrivals;
}

size_t TestMqttClient::count() const {
  MutexLock lock(impl_->mu);
  return impl_->arrivals.size();
}

}  // namespace weir::ctest
