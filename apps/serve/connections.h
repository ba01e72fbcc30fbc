// `gpt2vk serve`'s connections: a thread for each (up to a bound) so that slow or idle clients
// never leave /health and running requests waiting for a worker, and a guard that closes a
// connection whose request headers have not arrived within a deadline, or that sits idle while
// the server drains. cpp-httplib (Debian's 0.11) reads each request on its connection's thread
// with a per-read timeout only, and hides the socket from handlers; the guard finds sockets by
// their addresses (getsockname / getpeername over the process's descriptors).
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace app {

// httplib's task queue: each accepted connection runs on a thread of its own, up to
// max_threads at once; beyond that connections wait here (the guard still closes the slow ones,
// which frees threads). shutdown() waits for every connection's task.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void run(std::function<void()> fn);
  const size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::deque<std::function<void()>> waiting_;
  size_t running_ = 0;
  bool stopping_ = false;
};

// The server's connections as the guard sees them, keyed by descriptor and both addresses
// (a descriptor number is reused by later connections).
class ConnectionGuard {
 public:
  // port: the listening port (the guard's sockets are those with it as their local port).
  // header_deadline: how long a connection may take to send a request's headers, from its
  // first sight or the end of its last response.
  ConnectionGuard(int port, std::chrono::milliseconds header_deadline);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // The socket of a request being handled (its peer's address and port); -1 if not found.
  // Marks it busy: the guard leaves it alone until finished().
  int started(const std::string& peer_addr, int peer_port);
  // Its response is written: idle (a keep-alive wait for the next request's headers) from now.
  // close: shut it down instead (after a 413 the rest of the body is still on the wire).
  void finished(const std::string& peer_addr, int peer_port, bool close);
  // Whether the client of a socket found by started() has gone (a FIN or a reset, seen without
  // reading its data).
  static bool peer_closed(int fd);
  // From now on every connection not handling a request is closed at once (the server drains).
  void drain();
  uint64_t closed() const { return closed_; }  // connections the guard has cut

 private:
  using Key = std::tuple<int, std::string, int>;  // descriptor, peer address, peer port
  void watch();
  void sweep();
  const int port_;
  const std::chrono::milliseconds deadline_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<Key, std::chrono::steady_clock::time_point> since_;  // header wait began
  std::map<Key, int> busy_;  // handling a request (requests on it: pipelined or nested)
  bool draining_ = false, stopping_ = false;
  std::atomic<uint64_t> closed_{0};
  std::thread thread_;  // last: started once the rest exists
};

// The sockets of this process bound to local port `port` with a peer: (descriptor, peer address,
// peer port). Linux: /proc/self/fd; elsewhere the descriptors below the open-file limit.
std::vector<std::tuple<int, std::string, int>> server_sockets(int port);

}  // namespace app
