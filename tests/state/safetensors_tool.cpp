// A helper for tests/state/safetensors_python.py, which checks fsdpp's safetensors against the
// Python package's:
//   fsdpp_safetensors_tool write <path>   writes the fixed tensors the script expects
//   fsdpp_safetensors_tool read <path>    prints every tensor (via get() and view()) as JSON
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/state/safetensors.h"

namespace {

// Keep in step with expected_from_cpp() in safetensors_python.py.
void write_fixed(const std::string& path) {
  const auto base = torch::arange(12, torch::kFloat).view({3, 4}) * 0.5 - 1;
  fsdpp::state::save_safetensors(
      path,
      {
          {"f32", base},
          {"f16", base.to(torch::kHalf)},
          {"bf16", (torch::arange(-8, 8, torch::kFloat) * 0.125).view({4, 4}).to(torch::kBFloat16)},
          {"f64", torch::arange(5, torch::kDouble) / 3.0},
          {"i64", torch::tensor({int64_t{1} << 62, int64_t{-7}, int64_t{0}})},
          {"i32", torch::arange(-3, 3, torch::kInt)},
          {"i16", torch::tensor({-32768, 32767}, torch::kShort)},
          {"i8", torch::tensor({-128, 127, 0}, torch::kChar)},
          {"u8", torch::tensor({0, 255, 7}, torch::kByte)},
          {"bool", torch::tensor({true, false, true})},
          {"scalar", torch::tensor(2.5)},
          {"empty", torch::zeros({0, 3})},
          {"strided", torch::arange(6, torch::kFloat).view({2, 3}).t()},
      },
      {{"format", "pt"}, {"writer", "fsdpp"}});
}

nlohmann::json values(const at::Tensor& t) {
  const at::Tensor flat = t.reshape({-1});
  nlohmann::json out = nlohmann::json::array();
  if (t.is_floating_point()) {
    const at::Tensor d = flat.to(torch::kDouble).contiguous();
    for (int64_t i = 0; i < d.numel(); ++i) out.push_back(d.data_ptr<double>()[i]);
  } else if (t.scalar_type() == torch::kBool) {
    const at::Tensor b = flat.contiguous();
    for (int64_t i = 0; i < b.numel(); ++i) out.push_back(b.data_ptr<bool>()[i]);
  } else {
    const at::Tensor l = flat.to(torch::kLong).contiguous();
    for (int64_t i = 0; i < l.numel(); ++i) out.push_back(l.data_ptr<int64_t>()[i]);
  }
  return out;
}

void read_and_print(const std::string& path) {
  const auto f = fsdpp::state::SafetensorsFile::open(path);
  nlohmann::json out;
  out["metadata"] = f.metadata();
  out["tensors"] = nlohmann::json::object();
  for (const auto& name : f.names()) {
    const at::Tensor copy = f.get(name);
    const at::Tensor view = f.view(name);
    if (!torch::equal(copy, view)) {
      std::cerr << "get() and view() differ for '" << name << "'\n";
      std::exit(1);
    }
    out["tensors"][name] = {{"dtype", fsdpp::state::safetensors_dtype_name(copy.scalar_type())},
                            {"shape", copy.sizes().vec()},
                            {"checksum", fsdpp::state::checksum(copy)},
                            {"values", values(copy)}};
  }
  std::cout << out.dump() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "write" && std::string(argv[1]) != "read")) {
    std::cerr << "usage: fsdpp_safetensors_tool write|read <path>\n";
    return 2;
  }
  try {
    if (std::string(argv[1]) == "write") {
      write_fixed(argv[2]);
    } else {
      read_and_print(argv[2]);
    }
  } catch (const fsdpp::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
