// The safetensors format: dtype names, sizes, the checksum fsdpp's checkpoint indexes record.
#include "fsdpp/state/safetensors.h"

#include <xxhash.h>

#include <array>
#include <bit>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "safetensors_format.h"

namespace fsdpp::state {

// The format is little-endian and data is written straight from tensor memory.
static_assert(std::endian::native == std::endian::little,
              "fsdpp's safetensors IO assumes a little-endian host");

namespace {

struct DtypeName {
  at::ScalarType dtype;
  std::string_view name;
};
constexpr std::array<DtypeName, 10> kDtypes = {{
    {at::kFloat, "F32"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kDouble, "F64"},
    {at::kLong, "I64"},
    {at::kInt, "I32"},
    {at::kShort, "I16"},
    {at::kChar, "I8"},
    {at::kByte, "U8"},
    {at::kBool, "BOOL"},
}};

}  // namespace

namespace safetensors_detail {

std::string shape_string(c10::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// numel * item size, or nullopt on overflow.
std::optional<uint64_t> byte_size(c10::IntArrayRef shape, at::ScalarType dtype) {
  uint64_t n = c10::elementSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

at::Tensor cpu_contiguous(const at::Tensor& t) {
  // Not to(kCPU, ..., MemoryFormat::Contiguous): it returns a non-contiguous CPU tensor unchanged.
  return t.is_cpu() ? t.contiguous() : t.contiguous().to(at::kCPU);
}

}  // namespace safetensors_detail

std::string_view safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  FSDPP_THROW(CheckpointError,
              "[state] dtype {} has no safetensors name here; expected one of float32, float16, "
              "bfloat16, float64, int64, int32, int16, int8, uint8, bool",
              c10::toString(dtype));
}

std::optional<at::ScalarType> safetensors_dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

uint64_t checksum(const at::Tensor& tensor) {
  FSDPP_CHECK_AS(CheckpointError, tensor.defined() && tensor.layout() == at::kStrided,
                 "[state] checksum of an undefined or non-dense tensor");
  const at::Tensor cpu = safetensors_detail::cpu_contiguous(tensor);
  const size_t nbytes = cpu.numel() * cpu.element_size();
  return XXH3_64bits(nbytes > 0 ? cpu.data_ptr() : nullptr, nbytes);
}

}  // namespace fsdpp::state
