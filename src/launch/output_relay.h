#pragma once
// Relays one worker stream (its stdout or its stderr) line by line to the launcher's own stream,
// each line prefixed with "[rank R] " and also written to the rank's log file if there is one.

#include <string>
#include <string_view>

#include "pipe.h"

namespace fsdpp::launch {

class OutputRelay {
 public:
  // `source` is the read end of the worker's pipe; `sink` (our stdout or stderr) and `log`
  // (-1: none) are borrowed and must outlive the relay.
  OutputRelay(UniqueFd source, int sink, std::string prefix, int log);

  // -1 once the worker's end is closed and everything was relayed.
  int fd() const { return source_.get(); }
  bool is_open() const { return static_cast<bool>(source_); }

  // One read of whatever the pipe holds; relays the complete lines. At EOF relays the partial last
  // line (with a newline added) and closes. Never blocks: the source is non-blocking.
  void read_some();

  // Relays a partial line and closes, for a stream we stop waiting on.
  void close();

 private:
  void emit(std::string_view line);

  UniqueFd source_;
  int sink_;
  std::string prefix_;
  int log_;
  std::string pending_;  // bytes after the last newline seen
};

}  // namespace fsdpp::launch
