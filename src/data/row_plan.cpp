// Documents into rows. See include/fsdpp/data/row_plan.h.
#include "fsdpp/data/row_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

RowPlan::RowPlan(std::span<const int64_t> lengths, const RowPlanOptions& options)
    : options_(options) {
  FSDPP_CHECK_AS(ConfigError, options.seq_len >= 1,
                 "[data] seq_len={} is not positive; expected >= 1", options.seq_len);
  if (!options.packing) {
    plan_rows(lengths);
  } else if (options.strategy == PackingStrategy::BFD) {
    plan_bfd(lengths);
  } else {
    plan_wrapped(lengths);
  }
}

std::span<const RowPiece> RowPlan::row(int64_t r) const {
  FSDPP_CHECK(r >= 0 && r < num_rows(), "[data] row {} is out of range [0, {})", r, num_rows());
  return {pieces_.data() + row_starts_[r], static_cast<size_t>(row_starts_[r + 1] - row_starts_[r])};
}

bool RowPlan::stream() const {
  return options_.packing && options_.strategy == PackingStrategy::WRAPPED && !options_.padding_free;
}

// A document of L tokens has L - 1 targets: its inputs are tokens [0, L - 1), each predicting
// the next (running it alone gives the same predictions; its last token predicts nothing). In the
// wrapped stream without padding_free every token is an input, the last predicting the next
// document's first (as plain text windows do).
std::vector<RowPiece> RowPlan::pieces_of(int64_t doc, int64_t length) {
  const int64_t T = options_.seq_len;
  const int64_t inputs = stream() ? length : length - 1;
  if (inputs <= 0) return {};
  if (inputs <= T) return {{doc, 0, inputs}};
  if (options_.long_documents == LongDocuments::TRUNCATE) {
    ++truncated_;
    dropped_ += inputs - T;  // targets past the first seq_len
    return {{doc, 0, T}};
  }
  ++split_;
  std::vector<RowPiece> out;
  for (int64_t b = 0; b < inputs; b += T) out.push_back({doc, b, std::min(inputs, b + T)});
  return out;
}

void RowPlan::close_row() { row_starts_.push_back(static_cast<int64_t>(pieces_.size())); }

void RowPlan::plan_rows(std::span<const int64_t> lengths) {
  for (int64_t d = 0; d < static_cast<int64_t>(lengths.size()); ++d) {
    for (const auto& p : pieces_of(d, lengths[d])) {
      pieces_.push_back(p);
      filled_ += p.end - p.begin;
      close_row();
    }
  }
}

// Best-fit decreasing: the pieces longest first (ties by document order, so the plan depends on
// the lengths alone), each into the open row with the least room left that still holds it,
// else a new row. Rows are then listed in the order they were opened.
void RowPlan::plan_bfd(std::span<const int64_t> lengths) {
  std::vector<RowPiece> all;
  for (int64_t d = 0; d < static_cast<int64_t>(lengths.size()); ++d) {
    for (const auto& p : pieces_of(d, lengths[d])) all.push_back(p);
  }
  std::stable_sort(all.begin(), all.end(), [](const RowPiece& a, const RowPiece& b) {
    return a.end - a.begin > b.end - b.begin;
  });
  const int64_t T = options_.seq_len;
  std::vector<std::vector<RowPiece>> rows;
  std::multimap<int64_t, size_t> room;  // room left -> row, for rows with any room
  for (const auto& p : all) {
    const int64_t n = p.end - p.begin;
    auto it = room.lower_bound(n);
    size_t r;
    int64_t left;
    if (it == room.end()) {
      r = rows.size();
      rows.emplace_back();
      left = T;
    } else {
      r = it->second;
      left = it->first;
      room.erase(it);
    }
    rows[r].push_back(p);
    filled_ += n;
    if (left - n > 0) room.emplace(left - n, r);
  }
  for (auto& row : rows) {
    // Within a row, the pieces in document order: the layout depends on nothing but the plan.
    std::sort(row.begin(), row.end(), [](const RowPiece& a, const RowPiece& b) {
      return a.doc != b.doc ? a.doc < b.doc : a.begin < b.begin;
    });
    pieces_.insert(pieces_.end(), row.begin(), row.end());
    close_row();
  }
}

// The documents back to back, cut every seq_len tokens: a document's pieces as pieces_of makes
// them (all its tokens in the stream, its targets without padding_free), cut where rows end.
void RowPlan::plan_wrapped(std::span<const int64_t> lengths) {
  const int64_t T = options_.seq_len;
  int64_t used = 0;  // positions filled in the current row
  for (int64_t d = 0; d < static_cast<int64_t>(lengths.size()); ++d) {
    const int64_t inputs = stream() ? lengths[d] : lengths[d] - 1;
    for (int64_t b = 0; b < inputs;) {
      const int64_t n = std::min(inputs - b, T - used);
      pieces_.push_back({d, b, b + n});
      filled_ += n;
      used += n;
      b += n;
      if (used == T) {
        close_row();
        used = 0;
      }
    }
  }
  if (used > 0) close_row();
}

}  // namespace fsdpp::data
