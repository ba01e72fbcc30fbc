// safetensors: the fp16/bf16 conversions against independent references, files written and read
// back, and every malformed header ending in an error that says what is wrong.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/formats/safetensors.h"
#include "tests/files.h"
#include "tests/tensor_files.h"
#include "model/formats/safetensors_writer.h"

using model::TensorDType;

namespace {

// Floats that exercise rounding: random bit patterns over the whole range, and the edges.
std::vector<float> tricky_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          -65520.0f,
                          1e6f,
                          std::ldexp(1.0f, -14),
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                          std::ldexp(3.0f, -26),
                          std::ldexp(1.0f, -26),
                          std::ldexp(1023.0f, -24),
                          std::ldexp(2047.0f, -25),
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + std::ldexp(3.0f, -11),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) v.push_back(f);
  }
  std::normal_distribution<float> normal(0.0f, 0.02f);  // weights as they really are
  for (int i = 0; i < 100000; ++i) v.push_back(normal(rng));
  return v;
}

model::TensorView view_of(const std::string& name, TensorDType dtype,
                          const std::vector<std::byte>& b, std::vector<uint64_t> shape) {
  return {name, dtype, std::move(shape), std::span<const std::byte>(b)};
}

std::unique_ptr<model::SafeTensors> open_bytes(const test::TempDir& dir, const std::string& bytes) {
  test::write_file(dir / "m.safetensors", bytes);
  return model::SafeTensors::open(dir / "m.safetensors");
}

}  // namespace

TEST_CASE("f16 decode matches the binary16 definition for all 65536 patterns") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = model::f16_to_f32(static_cast<uint16_t>(h));
    const double want = test::f16_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      continue;
    }
    REQUIRE(static_cast<double>(got) == want);
    CHECK(std::signbit(got) == ((h & 0x8000) != 0));
  }
}

TEST_CASE("f32 -> f16 and f32 -> bf16 round to nearest even, like the references") {
  size_t f16_bad = 0, bf16_bad = 0;
  for (float f : tricky_floats()) {
    if (model::f32_to_f16(f) != test::nearest_f16(f) && f16_bad++ < 5)
      FAIL_CHECK("f16 of " << f << ": " << model::f32_to_f16(f) << " != " << test::nearest_f16(f));
    if (model::f32_to_bf16(f) != test::nearest_bf16(f) && bf16_bad++ < 5)
      FAIL_CHECK("bf16 of " << f << ": " << model::f32_to_bf16(f)
                            << " != " << test::nearest_bf16(f));
  }
  CHECK(f16_bad == 0);
  CHECK(bf16_bad == 0);
  // Hand-checked anchors: overflow to inf, the smallest subnormal, ties.
  CHECK(model::f32_to_f16(65520.0f) == 0x7c00);
  CHECK(model::f32_to_f16(65519.996f) == 0x7bff);
  CHECK(model::f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(model::f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(model::f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);
  CHECK(model::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even (down)
  CHECK(model::f32_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie to even (up)
}

TEST_CASE("NaN stays NaN through every conversion") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::bit_cast<float>(0x7f800001u);  // payload only in the low bits
  for (float f : {nan, -nan, snan}) {
    CHECK(std::isnan(model::f16_to_f32(model::f32_to_f16(f))));
    CHECK(std::isnan(model::bf16_to_f32(model::f32_to_bf16(f))));
  }
  CHECK(std::isinf(model::f16_to_f32(0x7c00)));
  CHECK(std::isnan(model::f16_to_f32(0x7c01)));
  CHECK(model::bf16_to_f32(0x3f80) == 1.0f);
}

TEST_CASE("to_f32 / to_f16 convert any dtype, whole or in part") {
  const std::vector<float> values = {1.0f, -2.5f, 3.14159f, 1e-7f, 70000.0f, -0.0f};
  for (TensorDType dt : {TensorDType::F32, TensorDType::F16, TensorDType::BF16}) {
    CAPTURE(model::dtype_name(dt));
    const model::TensorData t = model::make_tensor("t", dt, {2, 3}, values);
    REQUIRE(t.bytes.size() == 6 * model::dtype_size(dt));
    const model::TensorView v = view_of("t", dt, t.bytes, {2, 3});
    const std::vector<float> all = model::to_f32(v);
    std::vector<uint16_t> halves(4);
    model::to_f16(v, halves.data(), 2, 4);
    for (size_t i = 0; i < values.size(); ++i) {
      const float want = dt == TensorDType::F32 ? values[i]
                         : dt == TensorDType::F16
                             ? static_cast<float>(test::f16_value(test::nearest_f16(values[i])))
                             : std::bit_cast<float>(uint32_t{test::nearest_bf16(values[i])} << 16);
      CHECK(all[i] == want);
      if (i >= 2) CHECK(halves[i - 2] == test::nearest_f16(want));  // f16 of the stored value
    }
    float one = 0;
    model::to_f32(v, &one, 5, 1);
    CHECK(one == all[5]);
    CHECK_THROWS_WITH_AS(model::to_f32(v, &one, 6, 1),
                         doctest::Contains("t: elements [6, +1) out of range"), std::out_of_range);
    CHECK_THROWS_AS(model::to_f16(v, halves.data(), 3, std::numeric_limits<uint64_t>::max()),
                    std::out_of_range);
  }
  CHECK_THROWS_WITH_AS(model::make_tensor("x", TensorDType::F32, {4}, values),
                       doctest::Contains("x: 6 values for shape [4]"), std::invalid_argument);
}

TEST_CASE("safetensors files written and read back: data, metadata, scalars, empties") {
  test::TempDir dir;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {0.5f, -0.25f, 8}, c = {42};
  model::write_safetensors(dir / "m.safetensors",
                           {model::make_tensor("a", TensorDType::F32, {2, 3}, a),
                            model::make_tensor("b.odd name", TensorDType::BF16, {3}, b),
                            model::make_tensor("c", TensorDType::F16, {}, c),
                            model::make_tensor("empty", TensorDType::F16, {0, 4}, {})},
                           {{"format", "pt"}});
  // The format itself, checked from the bytes: length, an 8-byte aligned JSON header.
  const std::string raw = test::read_file(dir / "m.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(raw.size() == 8 + n + 24 + 6 + 2);
  CHECK(raw.substr(8, 1) == "{");

  const auto st = model::SafeTensors::open(dir / "m.safetensors");
  CHECK(st->file_bytes() == raw.size());
  CHECK(st->metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(st->tensors().size() == 4);
  REQUIRE(st->find("a") != nullptr);
  CHECK(st->find("a")->shape == std::vector<uint64_t>{2, 3});
  CHECK(model::to_f32(*st->find("a")) == a);
  CHECK(model::to_f32(*st->find("b.odd name")) == b);  // exact in bf16
  CHECK(st->find("b.odd name")->dtype == TensorDType::BF16);
  CHECK(st->find("c")->shape.empty());
  CHECK(st->find("c")->elements() == 1);
  CHECK(model::to_f32(*st->find("c")) == c);
  CHECK(st->find("empty")->elements() == 0);
  CHECK(model::to_f32(*st->find("empty")).empty());
  CHECK(st->find("missing") == nullptr);
  CHECK(st->unsupported().empty());
}

TEST_CASE("safetensors: dtypes the engine does not read are set aside, unknown ones rejected") {
  test::TempDir dir;
  const auto st = open_bytes(
      dir, test::safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,4]},)"
                                   R"("i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]},)"
                                   R"("f":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                   std::string(16, '\0')));
  CHECK(st->tensors().size() == 1);
  REQUIRE(st->unsupported().size() == 2);
  CHECK(st->unsupported()[0].name == "m");
  CHECK(st->unsupported()[0].dtype == "BOOL");
  CHECK(st->unsupported()[1].dtype == "I64");
  CHECK(st->find("m") == nullptr);
  CHECK_THROWS_WITH_AS(
      open_bytes(dir, test::safetensors_bytes(
                          R"({"q":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", "ab")),
      doctest::Contains("m.safetensors: q: unsupported dtype Q4_K (supported: F32, F16, BF16)"),
      std::runtime_error);
}

TEST_CASE("safetensors rejects malformed files with a message saying what is wrong") {
  test::TempDir dir;
  auto rejects = [&](const std::string& bytes, const std::string& message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(open_bytes(dir, bytes), doctest::Contains(message.c_str()),
                         std::runtime_error);
  };
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');

  rejects("", "m.safetensors: truncated: 0 bytes, too short for the 8-byte header length");
  rejects(std::string("\x05\0\0", 3), "truncated: 3 bytes");
  rejects(test::le64(100) + "{}",
          "header length 100 runs past the end of the file (2 bytes follow it)");
  rejects(test::le64(uint64_t{1} << 40) + "{}", "header length 1099511627776 is absurd");
  rejects(test::le64(~uint64_t{0}) + "{}", "is absurd");
  rejects(test::safetensors_bytes(R"({"a": {"dtype": "F32",)", ""),
          "m.safetensors: header: invalid JSON at byte 23");
  rejects(test::safetensors_bytes("{\"a\": \xff}", data8), "header: invalid JSON at byte 7");
  rejects(test::safetensors_bytes("[1, 2]", ""),
          "m.safetensors: header: a JSON array, not an object");
  rejects(test::safetensors_bytes(R"({"a": 5})", ""),
          "m.safetensors: a: entry is a JSON number, not an object");
  rejects(test::safetensors_bytes(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", data8),
          "a: no \"dtype\" string");
  rejects(
      test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
      "a: \"shape\" is not an array of non-negative integers");
  rejects(
      test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8),
      "\"shape\" is not an array");
  rejects(test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data8),
          "\"shape\" is not an array");
  rejects(test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8),
          "a: \"data_offsets\" is not an array of two non-negative integers");
  rejects(
      test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data8),
      "m.safetensors: a: data_offsets [0, 16) out of range: the data area is 8 bytes");
  rejects(
      test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8),
      "a: data_offsets [8, 0) end before they begin");
  rejects(
      test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
      "a: data_offsets [0, 8) hold 8 bytes but shape [3] of F32 needs 12");
  rejects(
      test::safetensors_bytes(
          R"({"a":{"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data8),
      "a: shape [4294967296, 4294967296]... has more elements than fit in 64 bits");
  rejects(test::safetensors_bytes(
              R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", data8),
          "a: shape [4611686018427387904] is too large to address");
  rejects(test::safetensors_bytes(
              "{" + ok_entry + R"(,"b":{"dtype":"F16","shape":[2],"data_offsets":[6,10]}})",
              std::string(10, '\0')),
          "m.safetensors: b: data [6, 10) overlaps a [0, 8)");
  // Overlap with a tensor that is not the previous one in file order.
  rejects(test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]},)"
                                  R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                  std::string(16, '\0')),
          "overlaps a [0, 16)");
  rejects(test::safetensors_bytes("{" + ok_entry + R"(,"__metadata__":{"format":1}})", data8),
          "m.safetensors: __metadata__: format: not a string");
  rejects(test::safetensors_bytes("{" + ok_entry + R"(,"__metadata__":[]})", data8),
          "__metadata__: not a JSON object");
  rejects(test::safetensors_bytes(R"({"a\nb":{"dtype":"X"}})", ""),
          "\"a\\nb\": unsupported dtype X");
}

TEST_CASE("safetensors: files that are not there or not files") {
  test::TempDir dir;
  CHECK_THROWS_WITH_AS(model::SafeTensors::open(dir / "none.safetensors"),
                       doctest::Contains("none.safetensors: cannot open: No such file"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(model::SafeTensors::open(dir.path()),
                       doctest::Contains("not a regular file"), std::runtime_error);
}

TEST_CASE("safetensors: parse() checks bytes in memory as open() checks a file") {
  test::TempDir dir;
  const std::vector<float> a = {1, -2}, b = {3};
  model::write_safetensors(dir / "m.safetensors",
                           {model::make_tensor("a", TensorDType::F32, {2}, a),
                            model::make_tensor("b", TensorDType::BF16, {1}, b)});
  const std::string raw = test::read_file(dir / "m.safetensors");
  const auto bytes = std::as_bytes(std::span(raw));
  const auto st = model::SafeTensors::parse(bytes, "in memory");
  CHECK(st->path() == "in memory");
  CHECK(st->file_bytes() == raw.size());
  REQUIRE(st->tensors().size() == 2);
  CHECK(model::to_f32(*st->find("a")) == a);
  CHECK(model::to_f32(*st->find("b")) == b);
  // The views point into the caller's bytes, not into a copy.
  CHECK(st->find("b")->bytes.data() + 2 == bytes.data() + bytes.size());
  // Errors name the source given, as open() names the file.
  CHECK_THROWS_WITH_AS(model::SafeTensors::parse(bytes.first(bytes.size() - 1), "in memory"),
                       doctest::Contains("in memory: b: data_offsets [8, 10) out of range: the "
                                         "data area is 9 bytes"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(model::SafeTensors::parse({}, "in memory"),
                       doctest::Contains("in memory: truncated: 0 bytes"), std::runtime_error);
}

TEST_CASE("safetensors: empty tensors and gaps between tensors are accepted") {
  test::TempDir dir;
  const auto st = open_bytes(
      dir, test::safetensors_bytes(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                   std::string(12, '\0')));
  REQUIRE(st->tensors().size() == 3);
  CHECK(st->tensors()[0].name == "a");  // file order
  CHECK(st->tensors()[2].name == "b");
}

TEST_CASE("SafeTensorsWriter streams, checks the byte count, and leaves no partial file") {
  test::TempDir dir;
  const std::vector<float> v = {1, 2, 3};
  {
    model::SafeTensorsWriter w(dir / "s.safetensors", {{"x", TensorDType::F32, {3}}});
    w.write(std::as_bytes(std::span(v).first(1)));
    w.write(std::as_bytes(std::span(v).subspan(1)));
    CHECK_THROWS_AS(w.write(std::as_bytes(std::span(v).first(1))), std::logic_error);
    w.finish();
  }
  CHECK(model::to_f32(*model::SafeTensors::open(dir / "s.safetensors")->find("x")) == v);
  {
    model::SafeTensorsWriter w(dir / "t.safetensors", {{"x", TensorDType::F32, {3}}});
    w.write(std::as_bytes(std::span(v).first(1)));
    CHECK_THROWS_WITH_AS(
        w.finish(), doctest::Contains("4 bytes of tensor data written, the header announced 12"),
        std::logic_error);
  }
  CHECK(!std::filesystem::exists(dir / "t.safetensors"));
  CHECK_THROWS_AS(model::SafeTensorsWriter(
                      dir / "u", {{"x", TensorDType::F32, {1}}, {"x", TensorDType::F32, {1}}}),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(model::SafeTensorsWriter(dir / "no-such-dir" / "v", {}),
                       doctest::Contains("cannot create"), std::runtime_error);
}
