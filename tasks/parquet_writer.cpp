// write_parquet (tasks/parquet.h) with Parquet on; tasks/parquet.cpp holds the reader, and the refusals of a build
// without Arrow.
#ifdef PPO_WITH_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <memory>

#include "common/error.h"
#include "common/json.h"
#include "tasks/arrow_call.h"
#include "tasks/parquet.h"

namespace ppo {
namespace {

// The type of one field across all records.
struct Shape {
  enum Kind { kNull, kBool, kInt, kDouble, kString, kList, kStruct } kind = kNull;
  std::vector<std::string> keys;  // kStruct: in order of first appearance
  std::vector<Shape> children;    // kStruct: one per key; kList: the element
};

const char* kind_name(Shape::Kind kind) {
  switch (kind) {
    case Shape::kBool:
      return "a boolean";
    case Shape::kInt:
    case Shape::kDouble:
      return "a number";
    case Shape::kString:
      return "a string";
    case Shape::kList:
      return "a list";
    case Shape::kStruct:
      return "an object";
    default:
      return "null";
  }
}

Shape::Kind kind_of(const nlohmann::json& value, const std::string& field) {
  if (value.is_boolean()) return Shape::kBool;
  if (value.is_number_unsigned())
    usage_check(value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                "field '" + field + "': " + value.dump() + " does not fit a 64-bit whole number");
  if (value.is_number_integer()) return Shape::kInt;
  if (value.is_number_float()) return Shape::kDouble;
  if (value.is_string()) return Shape::kString;
  if (value.is_array()) return Shape::kList;
  if (value.is_object()) return Shape::kStruct;
  return Shape::kNull;
}

void merge(Shape& shape, const nlohmann::json& value, const std::string& field, int depth = 0) {
  usage_check(depth <= kMaxJsonDepth, "field '" + field.substr(0, 200) + "': nested deeper than " +
                                          std::to_string(kMaxJsonDepth) + " levels (the limit)");
  const Shape::Kind kind = kind_of(value, field);
  if (kind == Shape::kNull) return;
  const bool numbers =
      (kind == Shape::kInt || kind == Shape::kDouble) && (shape.kind == Shape::kInt || shape.kind == Shape::kDouble);
  if (shape.kind == Shape::kNull) {
    shape.kind = kind;
  } else if (numbers) {
    if (kind == Shape::kDouble) shape.kind = Shape::kDouble;  // whole numbers beside fractional ones: doubles
  } else {
    usage_check(shape.kind == kind, "field '" + field + "' holds " + kind_name(shape.kind) + " in one record and " +
                                        kind_name(kind) + " in another; a Parquet column has one type");
  }
  if (kind == Shape::kList) {
    if (shape.children.empty()) shape.children.emplace_back();
    for (const nlohmann::json& element : value) merge(shape.children[0], element, field + "[]", depth + 1);
  } else if (kind == Shape::kStruct) {
    usage_check(!value.empty(), "field '" + field + "' is an empty object (Parquet has no struct without fields)");
    for (const auto& [key, child] : value.items()) {
      size_t j = 0;
      while (j < shape.keys.size() && shape.keys[j] != key) ++j;
      if (j == shape.keys.size()) {
        shape.keys.push_back(key);
        shape.children.emplace_back();
      }
      merge(shape.children[j], child, field.empty() ? key : field + "." + key, depth + 1);
    }
  }
}

std::shared_ptr<arrow::DataType> arrow_type(const Shape& shape) {
  switch (shape.kind) {
    case Shape::kBool:
      return arrow::boolean();
    case Shape::kInt:
      return arrow::int64();
    case Shape::kDouble:
      return arrow::float64();
    case Shape::kString:
      return arrow::utf8();
    case Shape::kList:
      return arrow::list(arrow_type(shape.children[0]));
    case Shape::kStruct: {
      arrow::FieldVector fields;
      for (size_t j = 0; j < shape.keys.size(); ++j)
        fields.push_back(arrow::field(shape.keys[j], arrow_type(shape.children[j])));
      return arrow::struct_(fields);
    }
    default:
      return arrow::null();
  }
}

arrow::Status append(arrow::ArrayBuilder& builder, const Shape& shape, const nlohmann::json* value) {
  if (value == nullptr || value->is_null()) return builder.AppendNull();
  switch (shape.kind) {
    case Shape::kBool:
      return static_cast<arrow::BooleanBuilder&>(builder).Append(value->get<bool>());
    case Shape::kInt:
      return static_cast<arrow::Int64Builder&>(builder).Append(value->get<int64_t>());
    case Shape::kDouble:
      return static_cast<arrow::DoubleBuilder&>(builder).Append(value->get<double>());
    case Shape::kString:
      return static_cast<arrow::StringBuilder&>(builder).Append(value->get_ref<const std::string&>());
    case Shape::kList: {
      auto& list = static_cast<arrow::ListBuilder&>(builder);
      ARROW_RETURN_NOT_OK(list.Append());
      for (const nlohmann::json& element : *value)
        ARROW_RETURN_NOT_OK(append(*list.value_builder(), shape.children[0], &element));
      return arrow::Status::OK();
    }
    case Shape::kStruct: {
      auto& object = static_cast<arrow::StructBuilder&>(builder);
      ARROW_RETURN_NOT_OK(object.Append());
      for (size_t j = 0; j < shape.keys.size(); ++j) {
        auto it = value->find(shape.keys[j]);
        ARROW_RETURN_NOT_OK(
            append(*object.field_builder(static_cast<int>(j)), shape.children[j], it == value->end() ? nullptr : &*it));
      }
      return arrow::Status::OK();
    }
    default:
      return builder.AppendNull();
  }
}

}  // namespace

void write_parquet(const std::vector<nlohmann::json>& records, const std::string& path) {
  Shape shape;
  shape.kind = Shape::kStruct;
  for (size_t r = 0; r < records.size(); ++r) {
    usage_check(records[r].is_object(), path + ": record " + std::to_string(r) + " is not a JSON object");
    try {
      merge(shape, records[r], "");
    } catch (const UsageError& e) {
      throw UsageError(path + ": record " + std::to_string(r) + ": " + e.what());
    }
  }
  usage_check(!shape.keys.empty(), path + ": no records with fields to write");
  const std::string where = path + ": cannot write Parquet: ";
  const std::shared_ptr<arrow::DataType> type = arrow_type(shape);
  std::unique_ptr<arrow::ArrayBuilder> builder =
      arrow_call(where, [&] { return arrow::MakeBuilder(type, arrow::default_memory_pool()); });
  for (const nlohmann::json& record : records) arrow_call(where, [&] { return append(*builder, shape, &record); });
  std::shared_ptr<arrow::Array> rows = arrow_call(where, [&] { return builder->Finish(); });
  std::shared_ptr<arrow::RecordBatch> batch =
      arrow_call(where, [&] { return arrow::RecordBatch::FromStructArray(rows); });
  std::shared_ptr<arrow::Table> table = arrow_call(where, [&] { return arrow::Table::FromRecordBatches({batch}); });
  std::shared_ptr<arrow::io::FileOutputStream> out =
      arrow_call(path + ": cannot open for writing: ", [&] { return arrow::io::FileOutputStream::Open(path); });
  const auto properties =
      parquet::WriterProperties::Builder().compression(parquet::Compression::SNAPPY)->enable_page_checksum()->build();
  arrow_call(where,
             [&] { return parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), out, 65536, properties); });
  arrow_call(where, [&] { return out->Close(); });
}

}  // namespace ppo

#endif
