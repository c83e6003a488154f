// See records/tensorboard.h.
#include "records/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ppo {

namespace {

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// ---- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ----
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as x86 and ARM store it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_tag(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time, double
  put_fixed(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);  // step, int64 varint
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

bool read_varint(const std::string& s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < s.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(s[i++]);
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// The step and whether it is the file_version event; false when `data` is not a well-formed Event.
bool parse_event(const std::string& data, EventRecord& record) {
  size_t i = 0;
  while (i < data.size()) {
    uint64_t key = 0, v = 0;
    if (!read_varint(data, i, key)) return false;
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (wire == 0) {
      if (!read_varint(data, i, v)) return false;
      if (field == 2) record.step = static_cast<int64_t>(v);
    } else if (wire == 1 || wire == 5) {
      i += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      if (!read_varint(data, i, v) || v > data.size() - i) return false;
      if (field == 3) record.file_version = true;
      i += v;
    } else {
      return false;
    }
  }
  return i == data.size();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = crc32c_table()[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string event_file_version(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::map<std::string, double>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);  // Summary.Value.tag
    put_tag(v, 2, 5);      // Summary.Value.simple_value, float
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

std::string tf_record(const std::string& data) {
  std::string r;
  const uint64_t length = data.size();
  put_fixed(r, length);
  put_fixed(r, masked_crc32c(&length, sizeof(length)));
  r += data;
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::vector<EventRecord> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<EventRecord> records;
  for (size_t i = 0; i + 12 <= bytes.size();) {
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + i, 8);
    std::memcpy(&length_crc, bytes.data() + i + 8, 4);
    if (length_crc != masked_crc32c(&length, 8) || length > bytes.size() - i - 16) break;
    const std::string data = bytes.substr(i + 12, length);
    std::memcpy(&data_crc, bytes.data() + i + 12 + length, 4);
    EventRecord record;
    if (data_crc != masked_crc32c(data.data(), data.size()) || !parse_event(data, record)) break;
    record.data = data;
    records.push_back(std::move(record));
    i += 16 + length;
  }
  return records;
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

EventFileWriter::EventFileWriter(const std::string& path) : path_(path) {
  // Cut a record torn by a crash off the end first: readers stop at the first bad record and would miss what follows.
  const std::vector<EventRecord> records = read_event_file(path);
  uintmax_t valid = 0;
  for (const EventRecord& r : records) valid += 16 + r.data.size();
  std::error_code ec;
  if (std::filesystem::exists(path) && std::filesystem::file_size(path) > valid)
    std::filesystem::resize_file(path, valid, ec);
  const bool fresh = records.empty();
  out_.open(path, std::ios::binary | (fresh ? std::ios::trunc : std::ios::app));
  if (!out_) throw std::runtime_error("cannot open " + path + " for writing");
  if (fresh) out_ << tf_record(event_file_version(now_seconds())) << std::flush;
}

void EventFileWriter::add(int64_t step, const std::map<std::string, double>& scalars) {
  out_ << tf_record(event_scalars(now_seconds(), step, scalars)) << std::flush;
  if (!out_) throw std::runtime_error("cannot write " + path_);
}

std::string new_event_file_name() {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  return "events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host + ".ppo";
}

}  // namespace ppo
