// A model held in parts across the ranks: merged records and names. See parts.h.
#include "parts.h"

#include <set>
#include <sstream>

#include "fsdpp/common/error.h"

namespace fsdpp::state::detail {
namespace {

// One line per record, tab-separated; names hold neither tabs nor newlines.
std::string encode(const std::vector<RecordMeta>& metas) {
  std::ostringstream out;
  for (const auto& m : metas) {
    out << m.fqn << '\t' << m.state << '\t' << m.name << '\t' << m.shape.size();
    for (auto d : m.shape) out << '\t' << d;
    out << '\t' << m.rows.dim0 << '\t' << m.rows.row_numel << '\t' << m.rows.chunk_rows << '\t'
        << m.rows.own_begin << '\t' << m.rows.own_rows << '\t' << static_cast<int>(m.dtype) << '\t'
        << m.step << '\t' << (m.defined ? 1 : 0) << '\n';
  }
  return out.str();
}

std::vector<RecordMeta> decode(const std::string& text) {
  std::vector<RecordMeta> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    RecordMeta m;
    std::getline(f, m.fqn, '\t');
    std::getline(f, m.state, '\t');
    std::getline(f, m.name, '\t');
    size_t dims = 0;
    f >> dims;
    m.shape.resize(dims);
    for (auto& d : m.shape) f >> d;
    int dtype = 0, defined = 0;
    f >> m.rows.dim0 >> m.rows.row_numel >> m.rows.chunk_rows >> m.rows.own_begin >>
        m.rows.own_rows >> dtype >> m.step >> defined;
    FSDPP_CHECK_AS(CheckpointError, !f.fail(), "[state] a rank's record list does not parse: '{}'", line);
    m.dtype = static_cast<at::ScalarType>(dtype);
    m.defined = defined != 0;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::vector<ShardedParam> parts_params(const std::vector<torch::nn::Module*>& parts) {
  std::vector<ShardedParam> out;
  for (auto* part : parts) {
    auto params = model_params(*part);
    for (auto& p : params) out.push_back(std::move(p));
  }
  return out;
}

NamedTensors parts_buffers(const std::vector<torch::nn::Module*>& parts,
                           const std::function<bool(const std::string&)>& skip) {
  NamedTensors out;
  std::set<std::string> seen;
  for (auto* part : parts) {
    for (auto& [name, t] : model_buffers(*part, skip)) {
      if (seen.insert(name).second) out.emplace_back(name, t);
    }
  }
  return out;
}

MergedRecords merge_records(const Comm& c, const std::vector<RecordMeta>& mine) {
  MergedRecords m;
  const auto all = all_gather_strings(c, encode(mine));
  for (size_t q = 0; q < all.size(); ++q) {
    const auto metas = static_cast<int>(q) == c.rank() ? mine : decode(all[q]);
    for (const auto& r : metas) {
      if (m.index.count(r.name)) continue;
      m.index[r.name] = m.metas.size();
      m.metas.push_back(r);
      m.holder.push_back(static_cast<int>(q));
    }
  }
  for (const auto& r : mine) m.local.push_back(m.index.at(r.name));
  return m;
}

std::set<std::string> all_names(const Comm& c, const std::vector<std::string>& mine) {
  std::string joined;
  for (const auto& n : mine) joined += n + '\n';
  std::set<std::string> out;
  for (const auto& text : all_gather_strings(c, joined)) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.insert(line);
  }
  return out;
}

void check_buffers_on_rank0(const Comm& c, const NamedTensors& buffers) {
  std::vector<std::string> names;
  for (const auto& b : buffers) names.push_back(b.first);
  const auto every = all_names(c, names);
  agreed(c, [&] {
    if (c.rank() != 0) return;
    std::set<std::string> mine(names.begin(), names.end());
    for (const auto& n : every) {
      FSDPP_CHECK_AS(CheckpointError, mine.count(n),
                     "[state] buffer '{}' is held by another rank than rank 0, which writes the "
                     "buffers; a model in parts must keep its saved buffers on rank 0 too", n);
    }
  });
}

}  // namespace fsdpp::state::detail
