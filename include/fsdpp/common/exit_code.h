#pragma once
// The exit status of a program built on fsdpp, from what its body threw: the convention
// fsdpp-train and the launcher share. fsdpp-run restarts a failed job (--max-restarts) unless a
// worker exits kExitConfigError: a bad configuration or argument meets the same refusal on every
// attempt, so restarting it only repeats the message.
//
//   int main(int argc, char** argv) {
//     return fsdpp::exit_code_of([&] {
//       auto cfg = fsdpp::train::custom_config(kYaml, {argv + 1, argv + argc});  // ConfigError: 2
//       ...
//       return 0;
//     });
//   }

#include <functional>

namespace fsdpp {

inline constexpr int kExitConfigError = 2;  // ConfigError: fix the input, do not retry
inline constexpr int kExitError = 1;        // any other failure: a restart may get past it

// Runs `body` and returns what it returns; when it throws, prints the message on stderr and
// returns kExitConfigError for a ConfigError, kExitError for any other exception.
int exit_code_of(const std::function<int()>& body);

}  // namespace fsdpp
