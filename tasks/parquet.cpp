// See tasks/parquet.h: the reader (the writer is tasks/parquet_writer.cpp), and the refusals of a build without Arrow.
#include "tasks/parquet.h"

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

#ifdef PPO_WITH_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>
#include <parquet/schema.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string_view>

#include "tasks/arrow_call.h"
#endif

namespace ppo {

bool is_parquet_path(const std::string& path) {
  const std::string suffix = ".parquet";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

#ifndef PPO_WITH_PARQUET

namespace {

[[noreturn]] void no_parquet(const std::string& path) {
  throw UsageError(path +
                   ": this build of ppo reads and writes no Parquet; it needs pyarrow==22.0.0 in the reference "
                   "environment (bash scripts/install-deps.sh installs it in .venv-ref), then configure the build "
                   "again (CMake prints \"Parquet data files: ON\"); or give the data as JSONL");
}

}  // namespace

bool parquet_supported() {
  return false;
}

void for_each_parquet_record(const std::string& path, const std::function<void(const nlohmann::json&, int64_t)>&) {
  no_parquet(path);
}

void write_parquet(const std::vector<nlohmann::json>&, const std::string& path) {
  no_parquet(path);
}

#else

namespace {

constexpr int64_t kBatchRows = 8192;

// UsageError unless `type` maps to JSON (tasks/parquet.h); `column` is the dotted path of the field.
void check_type(const arrow::DataType& type, const std::string& column, const std::string& path, int depth = 0) {
  usage_check(depth <= kMaxJsonDepth, path + ": column '" + column.substr(0, 200) + "': nested deeper than " +
                                          std::to_string(kMaxJsonDepth) + " levels (the limit)");
  switch (type.id()) {
    case arrow::Type::NA:
    case arrow::Type::BOOL:
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
    case arrow::Type::UINT8:
    case arrow::Type::UINT16:
    case arrow::Type::UINT32:
    case arrow::Type::UINT64:
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
      return;
    case arrow::Type::DICTIONARY:
      check_type(*static_cast<const arrow::DictionaryType&>(type).value_type(), column, path, depth + 1);
      return;
    case arrow::Type::STRUCT:
      for (const auto& field : type.fields()) check_type(*field->type(), column + "." + field->name(), path, depth + 1);
      return;
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST:
      check_type(*type.field(0)->type(), column + "[]", path, depth + 1);
      return;
    default:
      throw UsageError(path + ": column '" + column + "': type " + type.ToString() +
                       " is not read (data files hold strings, whole numbers, floats, booleans, structs, lists and "
                       "dictionary-encoded strings)");
  }
}

// A record decodes to at most this many bytes, counted as 16 per value (nlohmann::json's size) plus each string's
// bytes: Parquet's run-length encoding lets a 2 KB file declare a list of hundreds of millions of nulls.
constexpr int64_t kMaxRecordBytes = int64_t{16} << 20;
constexpr int64_t kValueBytes = 16;

// What is left of one record's kMaxRecordBytes while it is decoded.
struct RecordBudget {
  int64_t left = kMaxRecordBytes;
  // Takes `bytes` for `what`; a RecordTooLarge when they are not there.
  void take(int64_t bytes, const std::string& what) {
    if (bytes > left) throw RecordTooLarge{what};
    left -= bytes;
  }
  struct RecordTooLarge {
    std::string what;  // "a list of 300000000 elements", "a string of ... bytes"
  };
};

// One array of a record batch, with its children (a struct's fields, a list's values, a dictionary) resolved once,
// so that reading a value allocates nothing but the JSON, and no more of it than the record's budget.
class Column {
 public:
  explicit Column(std::shared_ptr<arrow::Array> array) : array_(std::move(array)) {
    switch (array_->type_id()) {
      case arrow::Type::STRUCT: {
        const auto& s = static_cast<const arrow::StructArray&>(*array_);
        for (int j = 0; j < s.num_fields(); ++j) {
          names_.push_back(s.struct_type()->field(j)->name());
          children_.emplace_back(s.field(j));  // with the struct's offset applied
        }
        break;
      }
      case arrow::Type::LIST:
        children_.emplace_back(static_cast<const arrow::ListArray&>(*array_).values());
        break;
      case arrow::Type::LARGE_LIST:
        children_.emplace_back(static_cast<const arrow::LargeListArray&>(*array_).values());
        break;
      case arrow::Type::FIXED_SIZE_LIST:
        children_.emplace_back(static_cast<const arrow::FixedSizeListArray&>(*array_).values());
        break;
      case arrow::Type::DICTIONARY:
        children_.emplace_back(static_cast<const arrow::DictionaryArray&>(*array_).dictionary());
        break;
      default:
        break;
    }
  }

  nlohmann::json at(int64_t i, RecordBudget& budget) const {
    const arrow::Array& a = *array_;
    if (a.IsNull(i)) return nullptr;
    switch (a.type_id()) {
      case arrow::Type::BOOL:
        return static_cast<const arrow::BooleanArray&>(a).Value(i);
      case arrow::Type::INT8:
        return static_cast<const arrow::Int8Array&>(a).Value(i);
      case arrow::Type::INT16:
        return static_cast<const arrow::Int16Array&>(a).Value(i);
      case arrow::Type::INT32:
        return static_cast<const arrow::Int32Array&>(a).Value(i);
      case arrow::Type::INT64:
        return static_cast<const arrow::Int64Array&>(a).Value(i);
      case arrow::Type::UINT8:
        return static_cast<const arrow::UInt8Array&>(a).Value(i);
      case arrow::Type::UINT16:
        return static_cast<const arrow::UInt16Array&>(a).Value(i);
      case arrow::Type::UINT32:
        return static_cast<const arrow::UInt32Array&>(a).Value(i);
      case arrow::Type::UINT64:
        return static_cast<const arrow::UInt64Array&>(a).Value(i);
      case arrow::Type::FLOAT:
        return number(static_cast<const arrow::FloatArray&>(a).Value(i));
      case arrow::Type::DOUBLE:
        return number(static_cast<const arrow::DoubleArray&>(a).Value(i));
      case arrow::Type::STRING:
        return text(static_cast<const arrow::StringArray&>(a).GetView(i), budget);
      case arrow::Type::LARGE_STRING:
        return text(static_cast<const arrow::LargeStringArray&>(a).GetView(i), budget);
      case arrow::Type::DICTIONARY:
        return children_[0].at(static_cast<const arrow::DictionaryArray&>(a).GetValueIndex(i), budget);
      case arrow::Type::STRUCT: {
        budget.take(kValueBytes * static_cast<int64_t>(children_.size()),
                    "a struct of " + std::to_string(children_.size()) + " fields");
        nlohmann::json object = nlohmann::json::object();
        for (size_t j = 0; j < children_.size(); ++j) object[names_[j]] = children_[j].at(i, budget);
        return object;
      }
      case arrow::Type::LIST: {
        const auto& list = static_cast<const arrow::ListArray&>(a);
        return elements(list.value_offset(i), list.value_length(i), budget);
      }
      case arrow::Type::LARGE_LIST: {
        const auto& list = static_cast<const arrow::LargeListArray&>(a);
        return elements(list.value_offset(i), list.value_length(i), budget);
      }
      case arrow::Type::FIXED_SIZE_LIST: {
        const auto& list = static_cast<const arrow::FixedSizeListArray&>(a);
        return elements(list.value_offset(i), list.value_length(i), budget);
      }
      default:  // arrow::Type::NA; check_type admitted no other type
        return nullptr;
    }
  }

 private:
  // NaN and the infinities have no JSON form: null, as pandas' to_json writes them.
  static nlohmann::json number(double value) { return std::isfinite(value) ? nlohmann::json(value) : nullptr; }

  // Taken from the budget before anything is allocated.
  nlohmann::json elements(int64_t offset, int64_t length, RecordBudget& budget) const {
    budget.take(length > budget.left / kValueBytes ? budget.left + 1 : kValueBytes * length,
                "a list of " + std::to_string(length) + " elements");
    nlohmann::json array = nlohmann::json::array();
    for (int64_t k = 0; k < length; ++k) array.push_back(children_[0].at(offset + k, budget));
    return array;
  }
  static nlohmann::json text(std::string_view value, RecordBudget& budget) {
    budget.take(static_cast<int64_t>(value.size()), "a string of " + std::to_string(value.size()) + " bytes");
    return std::string(value);
  }

  std::shared_ptr<arrow::Array> array_;
  std::vector<std::string> names_;  // a struct's field names
  std::vector<Column> children_;
};

// No single allocation of the reader may exceed 64 MiB + 16 bytes per byte of the file: a page header can declare a
// page of gigabytes in a file of kilobytes, and Arrow's buffered stream allocates what it declares before it reads
// (BufferedInputStream::Read). The decoded arrays of a batch of real data stay far below.
constexpr int64_t kPoolSlackBytes = int64_t{64} << 20;
constexpr int64_t kPoolBytesPerFileByte = 16;

// Arrow's default memory pool, with each allocation bounded by `limit` (an OutOfMemory status beyond: the read that
// asked for it fails, and arrow_call names the file).
class BoundedPool final : public arrow::MemoryPool {
 public:
  BoundedPool(int64_t limit, int64_t file_bytes) : limit_(limit), file_bytes_(file_bytes) {}
  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override {
    ARROW_RETURN_NOT_OK(check(size));
    return base_->Allocate(size, alignment, out);
  }
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) override {
    ARROW_RETURN_NOT_OK(check(new_size));
    return base_->Reallocate(old_size, new_size, alignment, ptr);
  }
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override { base_->Free(buffer, size, alignment); }
  int64_t bytes_allocated() const override { return base_->bytes_allocated(); }
  int64_t max_memory() const override { return base_->max_memory(); }
  int64_t total_bytes_allocated() const override { return base_->total_bytes_allocated(); }
  int64_t num_allocations() const override { return base_->num_allocations(); }
  std::string backend_name() const override { return base_->backend_name(); }

 private:
  arrow::Status check(int64_t size) const {
    if (size <= limit_) return arrow::Status::OK();
    return arrow::Status::OutOfMemory("a buffer of ", size, " bytes asked for, more than a file of ", file_bytes_,
                                      " bytes decodes to (at most ", limit_, " bytes a buffer)");
  }
  arrow::MemoryPool* base_ = arrow::default_memory_pool();
  int64_t limit_, file_bytes_;
};

// Before a row group is decoded: a column chunk that declares more values (nulls included) than its rows could hold
// within kMaxRecordBytes each would make Arrow allocate them all, whatever the file's size.
void check_declared_values(const parquet::FileMetaData& metadata, int group, int64_t first_row,
                           const std::string& path) {
  const std::string where =
      path + ": row group " + std::to_string(group) + " (from row " + std::to_string(first_row) + ")";
  int64_t rows = 0;
  std::vector<std::pair<std::string, int64_t> > declared;  // column, values
  try {
    const std::unique_ptr<parquet::RowGroupMetaData> row_group = metadata.RowGroup(group);
    rows = row_group->num_rows();
    for (int c = 0; c < row_group->num_columns(); ++c)
      declared.emplace_back(metadata.schema()->Column(c)->path()->ToDotString(),
                            row_group->ColumnChunk(c)->num_values());
  } catch (const std::exception& e) {  // parquet::ParquetException: damaged metadata
    throw UsageError(where + ": damaged metadata: " + e.what());
  }
  const double most =
      static_cast<double>(std::max<int64_t>(rows, 1)) * static_cast<double>(kMaxRecordBytes / kValueBytes);
  for (const auto& [column, values] : declared)
    usage_check(static_cast<double>(values) <= most,
                where + ", column '" + column + "': declares " + std::to_string(values) + " values for " +
                    std::to_string(rows) + " rows, more than " + std::to_string(kMaxRecordBytes >> 20) +
                    " MiB a record when decoded, the most a record may hold");
}

}  // namespace

bool parquet_supported() {
  return true;
}

void for_each_parquet_record(const std::string& path,
                             const std::function<void(const nlohmann::json&, int64_t)>& on_record) {
  check_regular_file(path);
  std::shared_ptr<arrow::io::ReadableFile> file =
      arrow_call(path + ": cannot open for reading: ", [&] { return arrow::io::ReadableFile::Open(path); });
  const int64_t file_bytes = arrow_call(path + ": cannot open for reading: ", [&] { return file->GetSize(); });
  BoundedPool pool(kPoolSlackBytes + kPoolBytesPerFileByte * file_bytes, file_bytes);  // outlives every array
  parquet::arrow::FileReaderBuilder builder;
  builder.memory_pool(&pool);
  parquet::ReaderProperties properties(&pool);
  properties.set_page_checksum_verification(true);  // pages that carry a CRC (ppo's own) are checked against it
  properties.enable_buffered_stream();  // a column chunk is read as its pages are decoded, not whole at once
  arrow_call(path + ": not a Parquet file, or a damaged one: ", [&] { return builder.Open(file, properties); });
  // Batches of kBatchRows rows, without first reading a row group's whole column chunks: memory holds one batch's
  // arrays and the pages being decoded, however large the row groups (8,192 rows read as fast as 65,536 here).
  parquet::ArrowReaderProperties arrow_properties;
  arrow_properties.set_batch_size(kBatchRows);
  arrow_properties.set_pre_buffer(false);
  std::unique_ptr<parquet::arrow::FileReader> reader = arrow_call(
      path + ": not a Parquet file, or a damaged one: ", [&] { return builder.properties(arrow_properties)->Build(); });
  std::shared_ptr<arrow::Schema> schema;
  arrow_call(path + ": unreadable schema: ", [&] { return reader->GetSchema(&schema); });
  for (const auto& field : schema->fields()) check_type(*field->type(), field->name(), path);

  int64_t row = 0;
  const int row_groups = reader->num_row_groups();
  for (int group = 0; group < row_groups; ++group) {
    check_declared_values(*reader->parquet_reader()->metadata(), group, row, path);
    const std::string where =
        path + ": row group " + std::to_string(group) + " (from row " + std::to_string(row) + "): damaged data: ";
    std::unique_ptr<arrow::RecordBatchReader> batches =
        arrow_call(where, [&] { return reader->GetRecordBatchReader({group}); });
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      arrow_call(where, [&] { return batches->ReadNext(&batch); });
      if (!batch) break;
      // Offsets inside their buffers, valid UTF-8, dictionary indices in range: checked before any value is read.
      arrow_call(where, [&] { return batch->ValidateFull(); });
      std::vector<Column> columns;
      for (int c = 0; c < batch->num_columns(); ++c) columns.emplace_back(batch->column(c));
      for (int64_t i = 0; i < batch->num_rows(); ++i, ++row) {
        nlohmann::json record = nlohmann::json::object();
        RecordBudget budget;
        for (int c = 0; c < batch->num_columns(); ++c) {
          try {
            record[batch->column_name(c)] = columns[c].at(i, budget);
          } catch (const RecordBudget::RecordTooLarge& e) {
            throw UsageError(path + ": row " + std::to_string(row) + ", column '" + batch->column_name(c) +
                             "': the record decodes to more than " + std::to_string(kMaxRecordBytes >> 20) + " MiB (" +
                             e.what + "), the most a record may hold");
          }
        }
        try {
          on_record(record, row);
        } catch (const UsageError& e) {
          throw UsageError(path + ": row " + std::to_string(row) + ": " + e.what());
        } catch (const nlohmann::json::exception& e) {
          throw UsageError(path + ": row " + std::to_string(row) + ": " + e.what());
        }
      }
    }
  }
}

#endif

}  // namespace ppo
