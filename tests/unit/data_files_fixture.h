#pragma once
// A scratch directory per test for the data-file tests, and what they check messages with.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp_test {

namespace fs = std::filesystem;

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes on Debian
// 12's libstdc++ (docs/architecture.md, build notes).
inline void remove_tree(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_datafiles_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }

  fs::path dir_;
};

// The message of the fsdpp::ConfigError that `f` throws ("" when it throws none).
inline std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const fsdpp::ConfigError& e) {
    return e.what();
  }
  return "";
}

// Every part in `message`, which starts with "[data]".
inline void expect_message(const std::string& message, const std::vector<std::string>& parts) {
  EXPECT_TRUE(message.starts_with("[data]")) << message;
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

}  // namespace fsdpp_test
