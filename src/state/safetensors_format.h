#pragma once
// The safetensors layout shared by the writer (safetensors_writer.cpp) and the reader
// (safetensors_reader.cpp); private to src/state/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fsdpp::state::safetensors_detail {

// The Rust reader refuses headers above 100 MB; so do we, before trusting the length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

std::string shape_string(c10::IntArrayRef shape);
// numel * item size, or nullopt on overflow.
std::optional<uint64_t> byte_size(c10::IntArrayRef shape, at::ScalarType dtype);
// Relayout on the tensor's own device first, so host memory holds one copy at most (none when
// already CPU-contiguous).
at::Tensor cpu_contiguous(const at::Tensor& t);

}  // namespace fsdpp::state::safetensors_detail
