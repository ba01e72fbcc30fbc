// SIGINT and SIGTERM as a request to stop, for the commands that end cleanly on one (generate
// ends its text, train saves): while a StopSignals lives, a signal is recorded, not fatal.
#pragma once

namespace app {

class StopSignals {
 public:
  StopSignals();   // installs the handlers; forgets any earlier signal
  ~StopSignals();  // restore(), if not done yet
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal that came (SIGINT or SIGTERM), or 0.
  int received() const;
  // Puts back the handlers that were there before: a later signal acts as it would have.
  void restore();

 private:
  void (*previous_int_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
  bool restored_ = false;
};

}  // namespace app
