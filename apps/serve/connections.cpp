#include "apps/serve/connections.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace app {

// ---------------------------------------------------------------- the pool

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard lock(mutex_);
  if (running_ >= max_threads_) {
    waiting_.push_back(std::move(fn));
    return;
  }
  running_++;
  // Detached: each thread ends by taking the queue's next task or by counting itself out under
  // the lock, and shutdown() waits for that count, so none touches the pool after it is gone.
  std::thread([this, f = std::move(fn)]() mutable { run(std::move(f)); }).detach();
}

void ConnectionPool::run(std::function<void()> fn) {
  while (true) {
    fn();
    std::lock_guard lock(mutex_);
    if (waiting_.empty()) {
      running_--;
      done_.notify_all();
      return;
    }
    fn = std::move(waiting_.front());
    waiting_.pop_front();
  }
}

void ConnectionPool::shutdown() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  done_.wait(lock, [&] { return running_ == 0 && waiting_.empty(); });
}

// ---------------------------------------------------------------- finding sockets

namespace {

// The numeric host and port of a socket address; false for families other than IP.
bool numeric(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(s);
  return true;
}

void consider(int fd, int port, std::vector<std::tuple<int, std::string, int>>& out) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  std::string host, peer_host;
  int local_port = 0, peer_port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      !numeric(local, ll, host, local_port) || local_port != port)
    return;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
      !numeric(peer, pl, peer_host, peer_port))
    return;  // the listening socket has no peer
  out.emplace_back(fd, peer_host, peer_port);
}

}  // namespace

std::vector<std::tuple<int, std::string, int>> server_sockets(int port) {
  std::vector<std::tuple<int, std::string, int>> out;
  if (DIR* d = opendir("/proc/self/fd")) {
    std::vector<int> fds;
    while (const dirent* e = readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') fds.push_back(std::atoi(e->d_name));
    closedir(d);
    for (int fd : fds) consider(fd, port, out);
    return out;
  }
  rlimit r{};
  const long top = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY
                       ? static_cast<long>(std::min<rlim_t>(r.rlim_cur, 65536))
                       : 4096;
  for (int fd = 0; fd < top; fd++) consider(fd, port, out);
  return out;
}

// ---------------------------------------------------------------- the guard

ConnectionGuard::ConnectionGuard(int port, std::chrono::milliseconds header_deadline)
    : port_(port), deadline_(header_deadline), thread_([this] { watch(); }) {}

ConnectionGuard::~ConnectionGuard() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int ConnectionGuard::started(const std::string& peer_addr, int peer_port) {
  for (const auto& k : server_sockets(port_))
    if (std::get<1>(k) == peer_addr && std::get<2>(k) == peer_port) {
      std::lock_guard lock(mutex_);
      busy_[k]++;
      since_.erase(k);
      return std::get<0>(k);
    }
  return -1;
}

void ConnectionGuard::finished(const std::string& peer_addr, int peer_port, bool close) {
  int fd = -1;
  {
    std::lock_guard lock(mutex_);
    for (auto it = busy_.begin(); it != busy_.end(); ++it)
      if (std::get<1>(it->first) == peer_addr && std::get<2>(it->first) == peer_port) {
        fd = std::get<0>(it->first);
        if (--it->second == 0) {
          since_[it->first] = std::chrono::steady_clock::now();
          busy_.erase(it);
        }
        break;
      }
  }
  if (!close || fd < 0) return;
  // A lingering close: our FIN first, then what the client still sends read and dropped for up
  // to a second (closing with unread data would send a reset, which can destroy the response
  // before the client reads it), then the reading side shut so httplib sees the end.
  ::shutdown(fd, SHUT_WR);
  char buffer[16384];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (size_t total = 0; total < (64u << 20) && std::chrono::steady_clock::now() < until;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) break;
    if (n > 0) total += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_RD);
  closed_++;
}

bool ConnectionGuard::peer_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // more from the client: it is there
  if (n == 0) return true;  // its FIN
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // a reset
}

void ConnectionGuard::drain() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  wake_.notify_all();
}

void ConnectionGuard::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (stopping_) break;
    lock.unlock();
    sweep();
    lock.lock();
  }
}

// Every socket of the port not handling a request: its header wait timed from when it was first
// seen (or its last response ended); past the deadline, or while draining, shut down, which
// ends httplib's read on it and frees its thread.
void ConnectionGuard::sweep() {
  const auto now = std::chrono::steady_clock::now();
  const auto sockets = server_sockets(port_);
  std::lock_guard lock(mutex_);
  std::map<Key, std::chrono::steady_clock::time_point> seen;
  for (const Key& k : sockets) {
    if (busy_.count(k)) continue;
    const auto it = since_.find(k);
    const auto start = it == since_.end() ? now : it->second;
    if (draining_ || now - start > deadline_) {
      ::shutdown(std::get<0>(k), SHUT_RDWR);
      closed_++;
      continue;
    }
    seen[k] = start;
  }
  since_ = std::move(seen);  // sockets gone since are forgotten
}

}  // namespace app
