// A document store's rows as batches. See include/fsdpp/data/document_sampler.h.
#include "fsdpp/data/document_sampler.h"

#include <ATen/ops/empty.h>

#include <vector>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

constexpr int64_t kIgnore = -100;  // a target the loss does not count (cross_entropy's ignore_index)

std::vector<int64_t> lengths_of(const DocumentStore& store, std::pair<int64_t, int64_t> docs) {
  FSDPP_CHECK(0 <= docs.first && docs.first <= docs.second && docs.second <= store.num_documents(),
              "[data] documents [{}, {}) are out of range [0, {})", docs.first, docs.second,
              store.num_documents());
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(docs.second - docs.first));
  for (int64_t d = docs.first; d < docs.second; ++d) out.push_back(store.length(d));
  return out;
}

}  // namespace

DocumentSampler::DocumentSampler(std::shared_ptr<const DocumentStore> store,
                                 std::pair<int64_t, int64_t> docs, const RowPlanOptions& plan,
                                 const DocumentSamplerOptions& options)
    : store_(std::move(store)),
      first_doc_(docs.first),
      plan_(lengths_of(*store_, docs), plan),
      options_(options),
      stream_(plan_.num_rows(), options.share, "rows") {
  FSDPP_CHECK_AS(ConfigError, stream_.per_rank() >= 1,
                 "[data] {} documents make {} rows of seq_len={}, fewer than the {} ranks; "
                 "expected at least one row per rank (use more data, or fewer ranks)",
                 docs.second - docs.first, plan_.num_rows(), plan.seq_len,
                 options.share.world_size);
}

std::vector<int64_t> DocumentSampler::plan_batch(int64_t batch_size) {
  FSDPP_CHECK_AS(ConfigError, batch_size >= 1,
                 "[data] batch_size={} is not positive; expected >= 1", batch_size);
  std::vector<int64_t> rows(static_cast<size_t>(batch_size));
  for (auto& r : rows) r = stream_.next();
  return rows;
}

void DocumentSampler::fill_row(int64_t r, int64_t* inputs, int64_t* targets,
                               int64_t* positions) const {
  const int64_t T = plan_.options().seq_len;
  const auto pieces = plan_.row(r);
  std::vector<int64_t> tokens;
  std::vector<uint8_t> mask;
  int64_t at = 0;  // next position of the row
  for (size_t i = 0; i < pieces.size(); ++i) {
    const RowPiece& p = pieces[i];
    const int64_t doc = first_doc_ + p.doc, length = store_->length(doc);
    // Its inputs and, when the document goes on, the token after them (the last target).
    const int64_t end = std::min(length, p.end + 1), n = p.end - p.begin;
    tokens.resize(static_cast<size_t>(end - p.begin));
    mask.resize(tokens.size());
    store_->read(doc, p.begin, end, tokens.data(), mask.data());
    for (int64_t k = 0; k < n; ++k) {
      inputs[at + k] = tokens[k];
      const bool has_next = k + 1 < static_cast<int64_t>(tokens.size());
      targets[at + k] = has_next && mask[k + 1] ? tokens[k + 1] : kIgnore;
      if (positions) positions[at + k] = k;
    }
    // The wrapped stream: a document's last token predicts the next piece's first token.
    if (plan_.stream() && p.end == length) {
      const RowPiece* next = i + 1 < pieces.size() ? &pieces[i + 1]
                             : r + 1 < plan_.num_rows() ? &plan_.row(r + 1)[0]
                                                        : nullptr;
      if (next) {
        int64_t t;
        uint8_t m;
        store_->read(first_doc_ + next->doc, next->begin, next->begin + 1, &t, &m);
        targets[at + n - 1] = m ? t : kIgnore;
      }
    }
    at += n;
  }
  FSDPP_CHECK(at <= T, "[data] row {} holds {} tokens, more than seq_len={}", r, at, T);
  for (int64_t k = at; k < T; ++k) {
    inputs[k] = options_.pad_id;
    targets[k] = kIgnore;
    if (positions) positions[k] = k - at;
  }
}

TokenBatch DocumentSampler::load_batch(const std::vector<int64_t>& rows) const {
  const int64_t B = static_cast<int64_t>(rows.size()), T = plan_.options().seq_len;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  TokenBatch b{at::empty({B, T}, opts), at::empty({B, T}, opts), {}};
  if (plan_.options().padding_free) b.positions = at::empty({B, T}, opts);
  for (int64_t i = 0; i < B; ++i) {
    fill_row(rows[i], b.inputs.data_ptr<int64_t>() + i * T, b.targets.data_ptr<int64_t>() + i * T,
             b.positions.defined() ? b.positions.data_ptr<int64_t>() + i * T : nullptr);
  }
  return b;
}

}  // namespace fsdpp::data
