// Reading safetensors files: map the file, then check every byte of the header before any
// tensor is handed out. Everything in the file is untrusted.
#include "model/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "model/formats/json_util.h"

#if defined(_WIN32)
#include <fstream>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace model {

using json_util::shape_str;
using json_util::show;
using nlohmann::json;

namespace {

// The published GPT-2 XL header is ~60 KB; nothing legitimate comes near this.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& problem) {
  throw std::runtime_error(file.string() + ": " + problem);
}

std::optional<TensorDType> parse_dtype(std::string_view s) {
  if (s == "F32") return TensorDType::F32;
  if (s == "F16") return TensorDType::F16;
  if (s == "BF16") return TensorDType::BF16;
  return std::nullopt;
}

// Element size of the format's other dtypes; 0 for a name the format does not define.
size_t other_dtype_size(std::string_view s) {
  for (const auto& [name, size] : {std::pair{"BOOL", 1},
                                   {"U8", 1},
                                   {"I8", 1},
                                   {"F8_E4M3", 1},
                                   {"F8_E5M2", 1},
                                   {"I16", 2},
                                   {"U16", 2},
                                   {"I32", 4},
                                   {"U32", 4},
                                   {"F64", 8},
                                   {"I64", 8},
                                   {"U64", 8}})
    if (s == name) return static_cast<size_t>(size);
  return 0;
}

// A non-negative JSON integer (nlohmann keeps those as unsigned; negatives and fractions are not).
bool is_count(const json& v) {
  return v.is_number_unsigned();
}

struct Entry {
  TensorView view;
  std::string other_dtype;      // set for a dtype we do not read; view.dtype is then meaningless
  uint64_t begin = 0, end = 0;  // data_offsets
};

Entry parse_entry(const std::filesystem::path& file, const std::string& name, const json& e,
                  const std::byte* data, uint64_t data_bytes) {
  const std::string where = file.string() + ": " + show(name) + ": ";
  auto bad = [&](const std::string& problem) { throw std::runtime_error(where + problem); };
  if (!e.is_object()) bad(std::string("entry is a JSON ") + e.type_name() + ", not an object");
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) bad("no \"dtype\" string");
  const std::string& dtype_text = dt->get_ref<const std::string&>();
  const auto dtype = parse_dtype(dtype_text);
  const size_t element_size = dtype ? dtype_size(*dtype) : other_dtype_size(dtype_text);
  if (element_size == 0)
    bad("unsupported dtype " + show(dtype_text, 32) + " (supported: F32, F16, BF16)");
  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array() || !std::all_of(sh->begin(), sh->end(), is_count))
    bad("\"shape\" is not an array of non-negative integers");
  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 ||
      !std::all_of(off->begin(), off->end(), is_count))
    bad("\"data_offsets\" is not an array of two non-negative integers");

  Entry out;
  out.view.name = name;
  out.view.dtype = dtype.value_or(TensorDType::F32);
  if (!dtype) out.other_dtype = dtype_text;
  uint64_t elements = 1;
  for (const json& d : *sh) {
    out.view.shape.push_back(d.get<uint64_t>());
    if (json_util::mul_overflows(elements, out.view.shape.back(), &elements))
      bad("shape " + shape_str(out.view.shape) + "... has more elements than fit in 64 bits");
  }
  uint64_t bytes = 0;
  if (json_util::mul_overflows(elements, element_size, &bytes))
    bad("shape " + shape_str(out.view.shape) + " is too large to address");
  out.begin = (*off)[0].get<uint64_t>();
  out.end = (*off)[1].get<uint64_t>();
  const std::string range = "[" + std::to_string(out.begin) + ", " + std::to_string(out.end) + ")";
  if (out.begin > out.end) bad("data_offsets " + range + " end before they begin");
  if (out.end > data_bytes)
    bad("data_offsets " + range + " out of range: the data area is " + std::to_string(data_bytes) +
        " bytes; the file ends before this tensor's data: it is incomplete (an interrupted "
        "download?) or its header is wrong");
  if (out.end - out.begin != bytes)
    bad("data_offsets " + range + " hold " + std::to_string(out.end - out.begin) +
        " bytes but shape " + shape_str(out.view.shape) + " of " + dtype_text + " needs " +
        std::to_string(bytes));
  out.view.bytes = std::span<const std::byte>(data + out.begin, bytes);
  return out;
}

}  // namespace

std::unique_ptr<SafeTensors> SafeTensors::open(const std::filesystem::path& file) {
  std::unique_ptr<SafeTensors> st(new SafeTensors());
  st->path_ = file;
  st->map_file();
  st->parse_header();
  return st;
}

std::unique_ptr<SafeTensors> SafeTensors::parse(std::span<const std::byte> bytes,
                                                const std::filesystem::path& name) {
  std::unique_ptr<SafeTensors> st(new SafeTensors());
  st->path_ = name;
  st->base_ = bytes.data();
  st->size_ = bytes.size();
  st->parse_header();
  return st;
}

#if defined(_WIN32)
void SafeTensors::map_file() {
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) fail(path_, "cannot open");
  size_ = static_cast<uint64_t>(in.tellg());
  owned_.resize(size_);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(owned_.data()), static_cast<std::streamsize>(size_));
  if (!in) fail(path_, "cannot read");
  base_ = owned_.data();
}

SafeTensors::~SafeTensors() = default;
#else
void SafeTensors::map_file() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    fail(path_, "not a regular file");
  }
  size_ = static_cast<uint64_t>(sb.st_size);
  if (size_ == 0) {  // mmap refuses empty files; parse_header reports the truncation
    ::close(fd);
    return;
  }
  void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) fail(path_, std::string("cannot map: ") + std::strerror(err));
  base_ = static_cast<const std::byte*>(p);
  mapped_ = true;
}

SafeTensors::~SafeTensors() {
  if (mapped_) munmap(const_cast<std::byte*>(base_), size_);
}
#endif

void SafeTensors::parse_header() {
  if (size_ < 8)
    fail(path_,
         "truncated: " + std::to_string(size_) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, base_, 8);  // little-endian, as the host (dtype.cpp asserts it)
  if (n > kMaxHeaderBytes)
    fail(path_, "header length " + std::to_string(n) + " is absurd (the limit is " +
                    std::to_string(kMaxHeaderBytes) + " bytes): not a safetensors file?");
  if (n > size_ - 8)
    fail(path_, "header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size_ - 8) + " bytes follow it): truncated?");
  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
  const json header = json_util::parse(text, path_.string() + ": header");
  if (!header.is_object())
    fail(path_, std::string("header: a JSON ") + header.type_name() + ", not an object");

  const std::byte* data = base_ + 8 + n;
  const uint64_t data_bytes = size_ - 8 - n;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path_, "__metadata__: not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(path_, "__metadata__: " + show(k) + ": not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path_, name, value, data, data_bytes));
  }

  // In file order; any overlap shows against the furthest end seen so far.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const Entry* reach = nullptr;  // the non-empty entry ending furthest so far
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (reach && e.begin < reach->end)
      fail(path_, show(e.view.name) + ": data [" + std::to_string(e.begin) + ", " +
                      std::to_string(e.end) + ") overlaps " + show(reach->view.name) + " [" +
                      std::to_string(reach->begin) + ", " + std::to_string(reach->end) + ")");
    if (!reach || e.end > reach->end) reach = &e;
  }
  for (Entry& e : entries) {
    if (!e.other_dtype.empty()) {
      unsupported_.push_back({e.view.name, e.other_dtype, e.view.shape});
      continue;
    }
    index_.emplace(e.view.name, tensors_.size());
    tensors_.push_back(std::move(e.view));
  }
}

const TensorView* SafeTensors::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace model
