// TensorBoard event files, written without TensorFlow or protobuf: the logger `tensorboard` of trainer.logger.
//
// An event file is a sequence of TFRecords (tensorflow/core/lib/io/record_writer.cc):
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)     (little-endian)
// where masked_crc32c(x) = rotr15(crc32c(x)) + 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h). Each record is an
// `Event` protobuf (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64), and either
// file_version = 3 ("brain.Event:2", the first record) or summary = 5, a `Summary` with repeated `value = 1`, each
// {tag = 1 (string), simple_value = 2 (float)}. TensorBoard reads files named events.out.tfevents.* in a folder as
// one run.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ppo {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, and TFRecord's masked form of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// The serialized Event protobufs ppo.cpp writes.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::map<std::string, double>& scalars);

// One TFRecord around `data`.
std::string tf_record(const std::string& data);

// The events of a file, in order, up to the first incomplete or corrupt record (a write cut short by a crash).
struct EventRecord {
  std::string data;           // the serialized Event
  int64_t step = 0;           // its step field (0 when absent)
  bool file_version = false;  // the "brain.Event:2" header event
};
std::vector<EventRecord> read_event_file(const std::string& path);

// Appends events to one file; every add() is flushed, so a reader sees each step as it is logged.
class EventFileWriter {
 public:
  // Opens `path` for appending; writes the file_version event when the file is new or empty.
  explicit EventFileWriter(const std::string& path);
  // One Event with a scalar per entry (non-finite values are written as they are).
  void add(int64_t step, const std::map<std::string, double>& scalars);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// A new event file name: events.out.tfevents.<unix seconds>.<host>.ppo, as TensorFlow names them.
std::string new_event_file_name();

}  // namespace ppo
