#pragma once
// What every fsdpp fuzz target checks besides memory safety (ASan, UBSan): bad input ends in
// an fsdpp::Error whose message starts with its "[component]", never in another exception, a
// crash or a hang. Anything else aborts, and libFuzzer keeps the input that did it.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "fsdpp/common/error.h"

namespace fsdpp::fuzz {

[[noreturn]] inline void finding(const char* what, const std::string& message) {
  std::fprintf(stderr, "[fuzz] %s: %s\n", what, message.c_str());
  std::abort();
}

// Runs `fn`; an fsdpp::Error with a "[component] ..." message is the expected outcome for bad
// input, anything else is a finding.
template <typename F>
void expect_clear_error(F&& fn) {
  try {
    fn();
  } catch (const fsdpp::Error& e) {
    const std::string m = e.what();
    if (m.size() < 3 || m[0] != '[' || m.find(']') == std::string::npos) {
      finding("fsdpp::Error without a [component] prefix", m);
    }
  } catch (const std::exception& e) {
    finding("an exception that is not an fsdpp::Error escaped", e.what());
  }
}

}  // namespace fsdpp::fuzz
