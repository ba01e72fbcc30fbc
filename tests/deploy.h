// What the deploy/ tests share: the programs they run (HAProxy, Prometheus), free loopback ports,
// and HTTP requests made in the test's own process, timed.
#pragma once
#include <string>
#include <vector>

namespace test {

// Whether `program` is on PATH; if not, a skip with a message, or a failure where CI=true
// (setup.sh --tests installs it).
bool have_program(const std::string& program);

// A port nothing listens on now, on 127.0.0.1 (the kernel's pick; free until someone takes it).
int free_port();

// One HTTP request on loopback: the status, the body, and the seconds until its first byte of
// body and its end (a stream's first event through a proxy comes well before its end). `path`
// is sent as it is: a query is percent-encoded by the caller.
struct Timed {
  int status = 0;  // 0: no response (the connection failed)
  std::string body;
  double first_s = 0, total_s = 0;
};
Timed timed_request(int port, const std::string& method, const std::string& path,
                    const std::string& body = "");

// The value of `column` in the CSV of HAProxy's stats page (`stats uri` ;csv) for the row of
// proxy `px` and server `sv`; "" where there is none.
std::string haproxy_stat(const std::string& csv, const std::string& px, const std::string& sv,
                         const std::string& column);

}  // namespace test
