// Arrow IPC files, memory-mapped: the stream format (what datasets' save_to_disk writes, one
// data-0000k-of-0000n.arrow per shard) or the file format (Feather v2, "ARROW1" at both ends),
// told apart by the magic bytes. Batches are read one at a time, zero-copy from the mapping.
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <arrow/record_batch.h>

#include <cstring>

#include "batch_records.h"
#include "fsdpp/common/error.h"
#include "record_readers.h"

namespace fsdpp::data::detail {
namespace {

constexpr char kFileMagic[] = "ARROW1";

// Either IPC format behind one next(); `fields` empty: every column.
class IpcBatches {
 public:
  IpcBatches(const std::string& path, const std::vector<int>& fields) : path_(path) {
    auto mapped = arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ);
    check_arrow(mapped.status(), path, "cannot open");
    file_ = *mapped;
    auto head = file_->ReadAt(0, 6);
    check_arrow(head.status(), path, "cannot read");
    auto options = arrow::ipc::IpcReadOptions::Defaults();
    options.use_threads = false;
    options.included_fields = fields;
    const bool file_format = (*head)->size() == 6 && std::memcmp((*head)->data(), kFileMagic, 6) == 0;
    if (file_format) {
      auto reader = arrow::ipc::RecordBatchFileReader::Open(file_, options);
      check_opened(reader.status(), "a readable Arrow IPC file (it starts with ARROW1)");
      file_reader_ = *reader;
    } else {
      auto reader = arrow::ipc::RecordBatchStreamReader::Open(file_, options);
      check_opened(reader.status(), "an Arrow IPC stream or file");
      stream_reader_ = *reader;
    }
  }

  std::shared_ptr<arrow::Schema> schema() const {
    return file_reader_ ? file_reader_->schema() : stream_reader_->schema();
  }

  std::shared_ptr<arrow::RecordBatch> next() {
    if (file_reader_) {
      if (next_index_ >= file_reader_->num_record_batches()) return nullptr;
      auto batch = file_reader_->ReadRecordBatch(next_index_++);
      check_arrow(batch.status(), path_, "cannot read a record batch");
      return *batch;
    }
    std::shared_ptr<arrow::RecordBatch> batch;
    check_arrow(stream_reader_->ReadNext(&batch), path_, "cannot read a record batch");
    return batch;
  }

 private:
  void check_opened(const arrow::Status& st, const char* what) {
    FSDPP_CHECK_AS(ConfigError, st.ok(), "[data] '{}' is not {}, which its extension .arrow says it "
                   "is: {}", path_, what, st.ToString());
  }

  std::string path_;
  std::shared_ptr<arrow::io::MemoryMappedFile> file_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_reader_;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> stream_reader_;
  int next_index_ = 0;
};

class ArrowRecords : public BatchRecordReader {
 public:
  ArrowRecords(const std::string& path, const RecordReadOptions& options)
      : BatchRecordReader(path),
        // The schema first (a reader over every column), then the reader over the columns asked for.
        batches_(path, options.columns.empty()
                           ? std::vector<int>{}
                           : column_indices(*IpcBatches(path, {}).schema(), options.columns, path)) {}

 protected:
  std::shared_ptr<arrow::RecordBatch> next_batch() override { return batches_.next(); }

 private:
  IpcBatches batches_;
};

}  // namespace

std::unique_ptr<RecordReader> open_arrow_records(const DataFile& file, const RecordReadOptions& options) {
  return std::make_unique<ArrowRecords>(file.path.string(), options);
}

std::vector<std::string> arrow_columns(const DataFile& file) {
  return field_names(*IpcBatches(file.path.string(), {}).schema());
}

}  // namespace fsdpp::data::detail
