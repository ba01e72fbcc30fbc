#include "apps/signals.h"

#include <atomic>
#include <csignal>

namespace app {
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int signal) { g_signal = signal; }

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() { restore(); }

int StopSignals::received() const { return g_signal; }

void StopSignals::restore() {
  if (restored_) return;
  restored_ = true;
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

}  // namespace app
