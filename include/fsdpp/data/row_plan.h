#pragma once
// How documents become the rows of training batches (seq_len positions each): one document per
// row, padded; or packed several to a row (TRL's packing). Decided once from the documents'
// lengths, so every rank and every resume computes the same rows; the sampler then shuffles the
// rows by epoch (document_batches.h).
//
//   data::RowPlan plan(store.lengths(), {.seq_len = 512, .packing = true});
//   for (const data::RowPiece& p : plan.row(0)) ...   // document p.doc, its tokens [p.begin, p.end)
//
// A piece's inputs are its document's tokens [begin, end); its targets are the next tokens
// [begin + 1, end + 1). A document of L tokens has L - 1 targets, so its pieces' inputs cover
// tokens [0, L - 1): the same predictions as running it alone, whose last token predicts
// nothing. A document split over two pieces loses no target (the first piece's last input
// predicts the second piece's first token). The strategies:
//   no packing     each document is a row, padded to seq_len; a longer one is split into pieces
//                  of seq_len (long_documents SPLIT, every token kept) or keeps its first seq_len
//                  tokens (TRUNCATE, the rest counted as dropped).
//   packing, BFD   TRL's best-fit decreasing: documents (split or truncated to seq_len first) go,
//                  longest first, into the row with the least room that fits them; no document is
//                  cut at a row's end. Rows are filled but for what no document fits.
//   packing, WRAPPED
//                  the documents back to back in their order, cut every seq_len tokens (TRL's
//                  "wrapped"): every row full but the last; documents run across rows. Without
//                  padding_free it is a stream, as plain text windows are: every token is an
//                  input, a document's last one predicting the next document's first, and a row's
//                  last input the next row's first token (stream()).
// Under padding_free (document masking) each piece is attended to alone, its positions starting
// at 0 (the models' positions input); without it the pieces of a row see each other causally
// (TRL's packing without padding-free), though no target crosses from one document to another
// but in the wrapped stream.

#include <cstdint>
#include <span>
#include <vector>

namespace fsdpp::data {

enum class PackingStrategy { BFD, WRAPPED };
enum class LongDocuments { SPLIT, TRUNCATE };

struct RowPlanOptions {
  int64_t seq_len = 128;
  bool packing = false;
  PackingStrategy strategy = PackingStrategy::BFD;
  LongDocuments long_documents = LongDocuments::SPLIT;
  bool padding_free = false;  // each piece attended to alone (document masking)
};

struct RowPiece {
  int64_t doc = 0;    // index into the lengths the plan was made from
  int64_t begin = 0;  // first input token
  int64_t end = 0;    // one past the last input token
  bool operator==(const RowPiece&) const = default;
};

class RowPlan {
 public:
  // `lengths`: tokens of each document (0-length documents are left out). Throws ConfigError
  // for seq_len < 1.
  RowPlan(std::span<const int64_t> lengths, const RowPlanOptions& options);

  int64_t num_rows() const { return static_cast<int64_t>(row_starts_.size()) - 1; }
  std::span<const RowPiece> row(int64_t r) const;
  // WRAPPED without padding_free: every token of a document is an input, its last predicting
  // the first token of the piece after it (in the row, or row r + 1's first for a row's last).
  bool stream() const;
  const RowPlanOptions& options() const { return options_; }

  // What the plan did to documents longer than seq_len (for the log).
  int64_t split_documents() const { return split_; }
  int64_t truncated_documents() const { return truncated_; }
  int64_t dropped_tokens() const { return dropped_; }
  // Input positions holding tokens, over all rows (the rest is padding).
  int64_t filled_positions() const { return filled_; }

 private:
  void plan_rows(std::span<const int64_t> lengths);   // no packing
  void plan_bfd(std::span<const int64_t> lengths);
  void plan_wrapped(std::span<const int64_t> lengths);
  // The pieces a document becomes before packing (split or truncated to seq_len).
  std::vector<RowPiece> pieces_of(int64_t doc, int64_t length);
  void close_row();

  RowPlanOptions options_;
  std::vector<RowPiece> pieces_;
  std::vector<int64_t> row_starts_{0};  // row r is pieces_[row_starts_[r] .. row_starts_[r+1])
  int64_t split_ = 0, truncated_ = 0, dropped_ = 0, filled_ = 0;
};

}  // namespace fsdpp::data
