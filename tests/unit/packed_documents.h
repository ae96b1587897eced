#pragma once
// Packed rows of documents and each document run alone, for the document-masking tests
// (tests/unit/test_document_mask.cpp, tests/dist/test_document_mask.cpp): a row of several
// documents with their positions restarting at 0 and their next-token targets (-100 on each
// document's last token, which has no next token of its own), and the reference every layout
// must reproduce: each document through the model alone.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace fsdpp::test {

// Row b of a batch: the documents' lengths, adding up to the row's length.
struct PackedBatch {
  at::Tensor tokens, targets, positions;  // (B,T) int64 each
  std::vector<std::vector<int64_t>> lengths;
};

// Documents of `lengths` (per row) drawn from `seed`: their tokens, positions 0 .. L-1 each, and
// targets = the next token inside the document, -100 on its last one.
inline PackedBatch packed_batch(const std::vector<std::vector<int64_t>>& lengths, int64_t vocab,
                                uint64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> tokens, targets, positions;
  for (const auto& row : lengths) {
    std::vector<at::Tensor> x, y, p;
    for (int64_t len : row) {
      auto doc = torch::randint(0, vocab, {len + 1}, g);
      x.push_back(doc.narrow(0, 0, len));
      auto t = doc.narrow(0, 1, len).clone();
      t[len - 1] = -100;
      y.push_back(t);
      p.push_back(torch::arange(len, torch::kLong));
    }
    tokens.push_back(at::cat(x));
    targets.push_back(at::cat(y));
    positions.push_back(at::cat(p));
  }
  return {at::stack(tokens), at::stack(targets), at::stack(positions), lengths};
}

// Each document of `batch` alone through `run` (its tokens (1,L), its targets (1,L)), in row
// order: `run` returns what the caller compares, e.g. the logits or a loss to back-propagate.
inline void for_each_document(
    const PackedBatch& batch,
    const std::function<void(int64_t row, int64_t start, const at::Tensor& tokens,
                             const at::Tensor& targets)>& run) {
  for (size_t b = 0; b < batch.lengths.size(); ++b) {
    int64_t start = 0;
    for (int64_t len : batch.lengths[b]) {
      const auto row = static_cast<int64_t>(b);
      run(row, start, batch.tokens[row].narrow(0, start, len).unsqueeze(0),
          batch.targets[row].narrow(0, start, len).unsqueeze(0));
      start += len;
    }
  }
}

}  // namespace fsdpp::test
