// safetensors: bit-exact round trips, sharding, and one test per header check (each must name the file).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.h"
#include "model/safetensors.h"

#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using ppo::load_safetensors;

using TempDir = ppo_test::TempDir;

std::map<std::string, torch::Tensor> random_tensors() {
  torch::manual_seed(7);
  return {
      {"model.embed_tokens.weight", torch::randn({7, 5})},
      {"model.layers.0.mlp.up_proj.weight", torch::randn({3, 4, 2}).to(torch::kFloat16)},
      {"model.layers.0.self_attn.q_proj.bias", torch::randn({9}).to(torch::kBFloat16)},
      {"scalar", torch::randn({})},
      {"empty", torch::zeros({0, 3})},
      {"steps", torch::randint(-1000, 1000, {4}, torch::kInt64)},
      {"strided", torch::randn({6, 4}).t()},  // not contiguous: saved as a contiguous copy
  };
}

// Same dtype, shape and bytes.
void require_bit_identical(const std::map<std::string, torch::Tensor>& expected,
                           const std::map<std::string, torch::Tensor>& actual) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, e] : expected) {
    INFO("tensor " << name);
    REQUIRE(actual.count(name) == 1);
    const torch::Tensor& a = actual.at(name);
    REQUIRE(a.scalar_type() == e.scalar_type());
    REQUIRE(a.sizes() == e.sizes());
    const torch::Tensor ec = e.contiguous();
    REQUIRE(std::memcmp(a.data_ptr(), ec.data_ptr(), ec.numel() * ec.element_size()) == 0);
  }
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with the given header text and data area size (zero bytes), and the error its load gives ("" if none).
std::string load_error(const TempDir& dir, const std::string& header, size_t data_bytes) {
  const std::string path = dir.sub("bad.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    out << u64_le(header.size()) << header << std::string(data_bytes, '\0');
  }
  try {
    load_safetensors(path);
  } catch (const ppo::UsageError& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

}  // namespace

TEST_CASE("safetensors save/load round trip is bit-identical", "[cpu][hf]") {
  TempDir dir;
  const auto tensors = random_tensors();
  const std::string path = dir.sub("model.safetensors");
  ppo::save_safetensors(path, tensors, {{"format", "pt"}});
  require_bit_identical(tensors, load_safetensors(path));

  // Layout: 8-byte length, header padded with spaces to a multiple of 8, names sorted, offsets packed in that order.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const ppo::SafetensorsHeader header = ppo::parse_safetensors_header(data, bytes.size(), path);
  CHECK(header.data_start % 8 == 0);
  CHECK(header.metadata == nlohmann::json({{"format", "pt"}}));
  REQUIRE(header.entries.size() == tensors.size());
  uint64_t offset = 0;
  std::string previous;
  for (const auto& e : header.entries) {
    CHECK(e.name > previous);
    CHECK(e.begin == offset);
    offset = e.end;
    previous = e.name;
  }
  CHECK(header.data_start + offset == bytes.size());
  // F16 [3, 4, 2]: 24 elements * 2 bytes; BF16 [9]: 18 bytes; F32 [7, 5]: 140 bytes (hand count).
  for (const auto& e : header.entries) {
    if (e.name == "model.layers.0.mlp.up_proj.weight") CHECK((e.dtype == "F16" && e.end - e.begin == 48));
    if (e.name == "model.layers.0.self_attn.q_proj.bias") CHECK((e.dtype == "BF16" && e.end - e.begin == 18));
    if (e.name == "model.embed_tokens.weight") CHECK((e.dtype == "F32" && e.end - e.begin == 140));
  }
  CHECK_FALSE(ppo_test::temporary_left_beside(path));
}

TEST_CASE("safetensors reads a file written by hand", "[cpu][hf]") {
  // {"a": F32 [2] at [0, 8], "b": U8 [3] at [8, 11]}: a = {1.0f, -2.0f}, b = {1, 2, 255}.
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  const float a[2] = {1.0f, -2.0f};
  std::string data(reinterpret_cast<const char*>(a), 8);
  data += std::string("\x01\x02\xff", 3);
  const std::string path = dir.sub("hand.safetensors");
  write_bytes(path, u64_le(header.size()) + header + data);
  const auto t = load_safetensors(path);
  CHECK(t.at("a").scalar_type() == torch::kFloat32);
  CHECK(t.at("a")[0].item<float>() == 1.0f);
  CHECK(t.at("a")[1].item<float>() == -2.0f);
  CHECK(t.at("b").scalar_type() == torch::kUInt8);
  CHECK(t.at("b")[2].item<int64_t>() == 255);
}

// load_error's message names the file and says `problem`.
void check_load_error(const TempDir& dir, const std::string& header, size_t data_bytes, const std::string& problem) {
  const std::string error = load_error(dir, header, data_bytes);
  INFO("header " << header << "\nerror: " << error << "\nexpected: " << problem);
  CHECK(error.find(dir.sub("bad.safetensors")) != std::string::npos);
  CHECK(error.find(problem) != std::string::npos);
}

TEST_CASE("safetensors refuses shapes whose sizes multiply past int64 or past the data area", "[cpu][hf]") {
  TempDir dir;
  check_load_error(dir, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8,
                   "tensor 'a': shape [4294967296,4294967296,16] has more elements than int64 counts");
  // A 0 among the sizes makes no element, but LibTorch refuses the numel all the same.
  check_load_error(dir, R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", 8,
                   "tensor 'a': shape [0,4611686018427387904,4] has more elements than int64 counts");
  check_load_error(dir, R"({"a":{"dtype":"F32","shape":[4294967296,16],"data_offsets":[0,8]}})", 8, "needs more");
}

TEST_CASE("safetensors rejects malformed files with the file name", "[cpu][hf]") {
  TempDir dir;
  const std::string name = dir.sub("bad.safetensors");
  const auto expect = [&](const std::string& header, size_t data_bytes, const std::string& problem) {
    check_load_error(dir, header, data_bytes, problem);
  };
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(load_error(dir, good, 8).empty());

  SECTION("data area shorter than the offsets") {
    expect(good, 7, "data_offsets end");
  }
  SECTION("offsets outside the data area") {
    expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", 8, "data_offsets begin = 16 exceeds");
  }
  SECTION("begin > end") {
    expect(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, "begin > end");
  }
  SECTION("negative offset") {
    expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8, "non-negative");
  }
  SECTION("overlapping tensors") {
    expect(
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
        8, "overlap");
  }
  SECTION("byte length does not match dtype and shape") {
    expect(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8, "needs 4");
  }
  SECTION("negative shape") {
    expect(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "shape entry");
  }
  SECTION("unknown dtype") {
    expect(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8, "unsupported dtype \"F8_E4M3\"");
  }
  SECTION("missing field") {
    expect(R"({"a":{"dtype":"F32","shape":[2]}})", 8, "no \"data_offsets\"");
  }
  SECTION("non-JSON header") {
    expect(R"({"a": nonsense})", 8, "not valid JSON");
  }
  SECTION("header is not an object") {
    expect("[1, 2]   ", 8, "does not start with '{'");
  }
  SECTION("metadata with a non-string") {
    expect(R"({"__metadata__":{"step":3}})", 0, "must be a string");
  }
  SECTION("deeply nested header") {
    expect("{\"a\":" + std::string(150, '[') + std::string(150, ']') + "}", 0, "nested deeper than 100 levels");
  }
  SECTION("truncated file") {
    write_bytes(name, "\x10\x00\x00");
    try {
      load_safetensors(name);
      FAIL("no exception");
    } catch (const ppo::UsageError& e) {
      CHECK(std::string(e.what()).find(name) != std::string::npos);
      CHECK(std::string(e.what()).find("shorter than the 8-byte header length") != std::string::npos);
    }
  }
  SECTION("header length past the end of the file") {
    write_bytes(name, u64_le(1000) + good);
    CHECK_THROWS_WITH(load_safetensors(name), Catch::Contains(name) && Catch::Contains("runs past the end"));
  }
  SECTION("huge header length") {
    write_bytes(name, u64_le(~uint64_t{0}) + good);
    CHECK_THROWS_WITH(load_safetensors(name), Catch::Contains(name) && Catch::Contains("runs past the end"));
  }
  SECTION("missing file") {
    CHECK_THROWS_AS(load_safetensors(dir.sub("nope.safetensors")), ppo::UsageError);
  }
}

TEST_CASE("safetensors parse_safetensors_header checks in-memory buffers", "[cpu][hf]") {
  const std::string header = R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  std::string file = u64_le(header.size()) + header + std::string(8, '\0');
  const auto* data = reinterpret_cast<const uint8_t*>(file.data());
  const ppo::SafetensorsHeader h = ppo::parse_safetensors_header(data, file.size(), "mem");
  REQUIRE(h.entries.size() == 1);
  CHECK(h.entries[0].shape == std::vector<int64_t>{2, 2});
  CHECK(h.data_start == 8 + header.size());
  CHECK(h.metadata.is_null());
  // One byte short of the data area: end 8 > data size 7.
  CHECK_THROWS_WITH(ppo::parse_safetensors_header(data, file.size() - 1, "mem"), Catch::StartsWith("mem: "));
  CHECK_THROWS_AS(ppo::parse_safetensors_header(data, 5, "mem"), ppo::UsageError);
}

TEST_CASE("safetensors sharded save/load round trip", "[cpu][hf]") {
  TempDir dir;
  const auto tensors = random_tensors();
  uint64_t total = 0, largest = 0;
  for (const auto& [name, t] : tensors) {
    total += t.numel() * t.element_size();
    largest = std::max<uint64_t>(largest, t.numel() * t.element_size());
  }
  SECTION("fits: one model.safetensors") {
    ppo::save_safetensors_sharded(dir.path.string(), tensors, total);
    CHECK(fs::exists(dir.path / "model.safetensors"));
    CHECK_FALSE(fs::exists(dir.path / "model.safetensors.index.json"));
    require_bit_identical(tensors, ppo::load_safetensors_dir(dir.path.string()));
  }
  SECTION("sharded: several files and an index") {
    ppo::save_safetensors_sharded(dir.path.string(), tensors, largest);
    const fs::path index_path = dir.path / "model.safetensors.index.json";
    REQUIRE(fs::exists(index_path));
    std::ifstream in(index_path);
    const nlohmann::json index = nlohmann::json::parse(in);
    CHECK(index["metadata"]["total_size"].get<uint64_t>() == total);
    CHECK(index["weight_map"].size() == tensors.size());
    std::set<std::string> files;
    for (const auto& item : index["weight_map"].items()) files.insert(item.value().get<std::string>());
    CHECK(files.size() > 1);
    const std::string last = "model-0000" + std::to_string(files.size()) + "-of-0000" + std::to_string(files.size());
    CHECK(files.count(last + ".safetensors") == 1);
    for (const std::string& f : files) {  // no shard over the limit
      uint64_t bytes = 0;
      for (const auto& [n, t] : load_safetensors((dir.path / f).string())) bytes += t.numel() * t.element_size();
      CHECK(bytes <= largest);
    }
    require_bit_identical(tensors, ppo::load_safetensors_dir(dir.path.string()));

    // An index naming a shard that does not hold the tensor is an error naming the index.
    nlohmann::json broken = index;
    broken["weight_map"]["scalar"] = *files.begin() == index["weight_map"]["scalar"] ? *files.rbegin() : *files.begin();
    std::ofstream(index_path) << broken.dump();
    CHECK_THROWS_WITH(ppo::load_safetensors_dir(dir.path.string()),
                      Catch::Contains(index_path.string()) && Catch::Contains("'scalar'"));
  }
  SECTION("empty folder") {
    CHECK_THROWS_AS(ppo::load_safetensors_dir(dir.path.string()), ppo::UsageError);
  }
}
