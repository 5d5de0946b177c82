// Self-test of tests/support: the helpers every integration test relies on.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/support.h"

using namespace weir::testing;
using namespace std::chrono_literals;

TEST_CASE("free_port returns a bindable loopback port", "[support]") {
  int a = free_port();
  int b = free_port();
  CHECK(a > 0);
  CHECK(a < 65536);
  CHECK(b > 0);
  // The port is free again once returned: a TCP client cannot connect to it.
  CHECK_THROWS(TcpClient(a));
}

TEST_CASE("wait_until polls until the condition holds or the deadline passes", "[support]") {
  int calls = 0;
  CHECK(wait_until([&] { return ++calls >= 3; }, 1s, 1ms));
  CHECK(calls == 3);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(wait_until([] { return false; }, 50ms, 5ms));
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
}

TEST_CASE("TempDir is created and removed", "[support]") {
  std::string path;
  {
    TempDir dir;
    path = dir.path();
    CHECK(std::filesystem::is_directory(path));
    write_file(dir.file("a/b/c.txt"), "hello");
    CHECK(read_file(dir.file("a/b/c.txt")) == "hello");
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("Process reports exit codes, logs and kills", "[support]") {
  TempDir dir;
  SECTION("exit code and log") {
    auto p = Process::spawn({"sh", "-c", "echo out-$WEIR_X; echo err >&2; exit 7"}, {{"WEIR_X", "yes"}},
                            dir.file("log"));
    auto code = p.wait_exit(5s);
    REQUIRE(code.has_value());
    CHECK(*code == 7);
    CHECK_FALSE(p.running());
    CHECK(p.read_log().find("out-yes") != std::string::npos);
    CHECK(p.read_log().find("err") != std::string::npos);
  }
  SECTION("signal and wait_exit timeout") {
    auto p = Process::spawn({"sleep", "30"});
    CHECK(p.running());
    CHECK_FALSE(p.wait_exit(50ms).has_value());
    p.signal(SIGTERM);
    auto code = p.wait_exit(5s);
    REQUIRE(code.has_value());
    CHECK(*code == 128 + SIGTERM);
  }
  SECTION("destructor kills a running child") {
    pid_t pid;
    {
      auto p = Process::spawn({"sleep", "30"});
      pid = p.pid();
      CHECK(::kill(pid, 0) == 0);
    }
    CHECK(::kill(pid, 0) != 0);  // reaped: the PID no longer exists
  }
  SECTION("wait_log sees a line written later") {
    auto p = Process::spawn({"sh", "-c", "sleep 0.1; echo ready; sleep 30"}, {}, dir.file("log2"));
    CHECK(p.wait_log("ready", 5s));
    CHECK(p.running());
  }
  SECTION("a missing binary throws") { CHECK_THROWS(Process::spawn({"/nonexistent/weir-no-such-binary"})); }
}

TEST_CASE("NatsServer starts, answers, stops and restarts on the same store", "[support][integration]") {
  NatsServer nats;
  CHECK(nats.url() == "nats://127.0.0.1:" + std::to_string(nats.port()));
  std::string varz = "http://127.0.0.1:" + std::to_string(nats.monitor_port()) + "/jsz";
  auto r = http_request("GET", varz);
  REQUIRE(r.status == 200);
  CHECK(r.body.find("\"store_dir\"") != std::string::npos);
  CHECK(r.body.find(nats.store_dir()) != std::string::npos);
  {
    TcpClient c(nats.port());  // the client port accepts connections
    CHECK(c.recv(2s, "\r\n").rfind("INFO ", 0) == 0);
  }

  nats.stop();
  CHECK_FALSE(nats.running());
  CHECK(http_request("GET", varz, "", {}, 500ms).status == 0);

  nats.start();
  CHECK(nats.running());
  r = http_request("GET", varz);
  CHECK(r.status == 200);
  CHECK(r.body.find(nats.store_dir()) != std::string::npos);

  nats.kill();
  CHECK_FALSE(nats.running());
  nats.start();
  CHECK(http_request("GET", varz).status == 200);
}

TEST_CASE("ResettingListener accepts and resets, then frees the port", "[support]") {
  int port = free_port();
  {
    ResettingListener l(port);
    auto r = http_request("GET", "http://127.0.0.1:" + std::to_string(port) + "/", "", {}, 2s);
    CHECK(r.status == 0);
    CHECK(wait_until([&] { return l.accepted() >= 1; }, 2s));
    l.close();
    CHECK_THROWS(TcpClient(port));  // refused once closed
  }
  ResettingListener again(port);  // the port is free to bind again
}

TEST_CASE("http_request and HttpClient talk to a server, TcpClient sees closes", "[support][integration]") {
  NatsServer nats;
  std::string base = "http://127.0.0.1:" + std::to_string(nats.monitor_port());
  auto r = http_request("GET", base + "/healthz");
  CHECK(r.status == 200);
  CHECK(r.header("content-type").find("application/json") != std::string::npos);

  HttpClient client;
  for (int i = 0; i < 5; ++i) CHECK(client.request("GET", base + "/varz").status == 200);
  CHECK(client.connects() == 1);  // keep-alive held

  auto refused = http_request("GET", "http://127.0.0.1:" + std::to_string(free_port()) + "/", "", {}, 500ms);
  CHECK(refused.status == 0);
  CHECK_FALSE(refused.error.empty());

  TcpClient raw(nats.monitor_port());
  REQUIRE(raw.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string got;
  CHECK(raw.wait_closed(5s, &got));
  CHECK(parse_status_line(got) == 200);
}
