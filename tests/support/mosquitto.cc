#include "tests/support/mosquitto.h"

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace weir::ctest {

using namespace std::chrono_literals;

Mosquitto::Mosquitto(MosquittoOptions options) : options_(options) {
  data_dir_ = dir_.file("data");
  std::filesystem::create_directories(data_dir_);
  if (::geteuid() == 0) {
    // mosquitto started as root switches to the `mosquitto` user before it opens its
    // persistence file and log: that user needs the directory (and a way into it).
    if (passwd* pw = ::getpwnam("mosquitto")) {
      ::chmod(dir_.path().c_str(), 0755);
      if (::chown(data_dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        throw std::runtime_error("Mosquitto: cannot chown " + data_dir_ + " to the mosquitto user");
      }
    }
  }
  port_ = weir::testing::free_port();
  std::string auth = "allow_anonymous true\n";
  if (!options_.user.empty()) {
    const std::string file = dir_.file("passwd");
    auto p = weir::testing::Process::spawn({"mosquitto_passwd", "-b", "-c", file, options_.user, options_.password}, {},
                                           dir_.file("passwd.log"));
    if (p.wait_exit(10s) != std::optional<int>(0)) throw std::runtime_error("Mosquitto: mosquitto_passwd failed");
    ::chmod(file.c_str(), 0644);  // readable by the mosquitto user it drops to as root
    auth = "allow_anonymous false\npassword_file " + file + "\n";
  }
  std::string conf = "listener " + std::to_string(port_) + " 127.0.0.1\n" + auth +
                     "set_tcp_nodelay true\n"
                     "max_inflight_messages " +
                     std::to_string(options_.max_inflight) + "\n" +
                     // The default (1000) drops QoS 1 messages queued for a slow or absent client.
                     "max_queued_messages 0\n"
                     "persistence " +
                     std::string(options_.persistence ? "true" : "false") + "\n" + "persistence_location " + data_dir_ +
                     "/\n" +
                     "autosave_interval 1800\n"
                     "log_dest file " +
                     data_dir_ +
                     "/mosquitto.log\n"
                     "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
                     "connection_messages true\n";
  weir::testing::write_file(dir_.file("mosquitto.conf"), conf);
  start();
}

Mosquitto::~Mosquitto() { kill(); }

std::string Mosquitto::log() const {
  return weir::testing::read_file(dir_.file("stdout.log")) + weir::testing::read_file(data_dir_ + "/mosquitto.log");
}

void Mosquitto::start() {
  if (proc_.running()) return;
  proc_ = weir::testing::Process::spawn({"mosquitto", "-c", dir_.file("mosquitto.conf")}, {}, dir_.file("stdout.log"));
  bool up = weir::testing::wait_until(
      [&] {
        if (!proc_.running()) return true;
        try {
          weir::testing::TcpClient probe(port_);
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      15s, 20ms);
  if (!up || !proc_.running()) {
    std::string l = log();
    proc_.kill_and_wait();
    throw std::runtime_error("Mosquitto: did not come up on port " + std::to_string(port_) + "; log:\n" + l);
  }
}

void Mosquitto::stop() {
  if (!proc_.running()) return;
  proc_.signal(SIGTERM);
  if (!proc_.wait_exit(10s)) proc_.kill_and_wait();
}

void Mosquitto::kill() {
  if (proc_.running()) proc_.kill_and_wait();
}

}  // namespace weir::ctest
