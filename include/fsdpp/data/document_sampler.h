#pragma once
// Batches of a document store's rows (row_plan.h), split across data-parallel ranks like the
// token windows' DistributedSampler: each epoch shuffles the rows with a permutation drawn from
// (seed, epoch) alone, so with one document a row (no packing) the documents are shuffled, and a
// resume at (epoch, position) continues at the row where the run stopped.
//
//   auto store = std::make_shared<data::DocumentStore>(data::DocumentStore::open(dir, shards));
//   data::DocumentSampler sampler(store, {0, n_train}, {.seq_len = 512, .packing = true},
//                                 {.share = {.rank = r, .world_size = n, .seed = 42}, .pad_id = 0});
//   data::TokenBatch b = sampler.load_batch(sampler.plan_batch(8));  // (8,512) each
//
// A row's inputs are its pieces' tokens back to back, then pad_id; its targets are each input's
// next token where the loss counts it (the store's mask of the target token), else -100:
// padding, masked tokens (prompts, the user's turns), a document's last token. Positions, under
// padding_free only: 0, 1, ... within each piece, and within the padding, which is thus a
// document of its own that no real token attends to.

#include <cstdint>
#include <memory>
#include <utility>

#include "fsdpp/data/document_store.h"
#include "fsdpp/data/row_plan.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/share.h"

namespace fsdpp::data {

struct DocumentSamplerOptions {
  ShareOptions share;
  int64_t pad_id = 0;  // inputs at padded positions (they carry no loss)
};

class DocumentSampler final : public PlannedSampler {
 public:
  // The store's documents [docs.first, docs.second) planned into rows. Throws ConfigError when
  // they make fewer rows than the ranks.
  DocumentSampler(std::shared_ptr<const DocumentStore> store, std::pair<int64_t, int64_t> docs,
                  const RowPlanOptions& plan, const DocumentSamplerOptions& options);

  std::vector<int64_t> plan_batch(int64_t batch_size) override;
  TokenBatch load_batch(const std::vector<int64_t>& rows) const override;
  SamplerState state() const override { return stream_.state(); }
  void load_state(const SamplerState& state) override { stream_.load_state(state); }
  int64_t items_per_rank() const override { return stream_.per_rank(); }

  const RowPlan& plan() const { return plan_; }
  // The rows this rank gets in `epoch`, in order.
  std::vector<int64_t> rows(int64_t epoch) const { return stream_.order(epoch); }

 private:
  // Row r into inputs/targets/positions (each seq_len values).
  void fill_row(int64_t r, int64_t* inputs, int64_t* targets, int64_t* positions) const;

  std::shared_ptr<const DocumentStore> store_;
  int64_t first_doc_;
  RowPlan plan_;
  DocumentSamplerOptions options_;
  SamplerStream stream_;
};

}  // namespace fsdpp::data
