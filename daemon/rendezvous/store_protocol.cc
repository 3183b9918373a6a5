#include "daemon/rendezvous/store_protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

// Walks one frame. In scan mode it only checks that the frame is whole and within the limits;
// in build mode (run once the frame is whole) it also copies the fields out. Scanning copies
// nothing, so a frame that arrives a byte at a time costs no allocation until it is complete.
class FrameReader {
 public:
  FrameReader(absl::string_view in, const StoreLimits& limits, StoreRequest* build)
      : in_(in), limits_(limits), build_(build) {}

  bool Fixed(void* dst, size_t n) {
    if (!Fits(n)) return false;
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }

  bool Count(uint64_t* n) {
    if (!Fixed(n, 8)) return false;
    if (*n > limits_.max_keys_per_request) {
      error_ =
          absl::StrCat("request names ", *n, " keys; the limit is ", limits_.max_keys_per_request);
      return false;
    }
    return true;
  }

  // `u64 length` + bytes, at most `limit` of them.
  bool Bytes(size_t limit, const char* what, std::vector<std::string>* out) {
    uint64_t n = 0;
    if (!Fixed(&n, 8)) return false;
    if (n > limit) {
      error_ = absl::StrCat(what, " of ", n, " bytes exceeds the limit of ", limit);
      return false;
    }
    if (!Fits(n)) return false;
    if (build_ != nullptr) out->emplace_back(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Key() { return Bytes(limits_.max_key_bytes, "key", Keys()); }
  bool Value() { return Bytes(limits_.max_value_bytes, "value", Values()); }

  std::vector<std::string>* Keys() { return build_ ? &build_->keys : nullptr; }
  std::vector<std::string>* Values() { return build_ ? &build_->values : nullptr; }

  size_t pos() const { return pos_; }
  size_t need() const { return need_; }
  const std::string& error() const { return error_; }

 private:
  // Whether n more bytes are buffered; sets need_ (or error_ past the frame limit) when not.
  bool Fits(uint64_t n) {
    if (n > limits_.max_request_bytes || pos_ + n > limits_.max_request_bytes) {
      error_ =
          absl::StrCat("request frame exceeds the limit of ", limits_.max_request_bytes, " bytes");
      return false;
    }
    if (pos_ + n > in_.size()) {
      need_ = pos_ + n;
      return false;
    }
    return true;
  }

  absl::string_view in_;
  const StoreLimits& limits_;
  StoreRequest* build_;
  size_t pos_ = 0;
  size_t need_ = 0;
  std::string error_;
};

// Walks the frame's fields after the command byte; false when the reader stopped early.
bool WalkFields(StoreCommand command, FrameReader& r, StoreRequest* build) {
  uint32_t u32 = 0;
  int64_t delta = 0;
  uint64_t n = 0;
  switch (command) {
    case StoreCommand::kValidate:
    case StoreCommand::kPing:
      if (!r.Fixed(&u32, 4)) return false;
      if (build) build->u32 = u32;
      return true;
    case StoreCommand::kSet:
    case StoreCommand::kAppend:
      return r.Key() && r.Value();
    case StoreCommand::kCompareSet:
      return r.Key() && r.Value() && r.Value();
    case StoreCommand::kGet:
    case StoreCommand::kDeleteKey:
      return r.Key();
    case StoreCommand::kAdd:
      if (!r.Key() || !r.Fixed(&delta, 8)) return false;
      if (build) build->delta = delta;
      return true;
    case StoreCommand::kCheck:
    case StoreCommand::kWait:
    case StoreCommand::kMultiGet:
      if (!r.Count(&n)) return false;
      if (build) build->keys.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.Key()) return false;
      }
      return true;
    case StoreCommand::kMultiSet:
      if (!r.Count(&n)) return false;
      if (build) {
        build->keys.reserve(n);
        build->values.reserve(n);
      }
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.Key() || !r.Value()) return false;
      }
      return true;
    case StoreCommand::kGetNumKeys:
    case StoreCommand::kCancelWait:
      return true;
  }
  return false;
}

bool KnownCommand(uint8_t c) { return c <= static_cast<uint8_t>(StoreCommand::kPing); }

}  // namespace

StoreParse ParseStoreRequest(absl::string_view buffered, const StoreLimits& limits) {
  StoreParse out;
  if (buffered.empty()) return out;
  const uint8_t code = static_cast<uint8_t>(buffered[0]);
  if (!KnownCommand(code)) {
    out.kind = StoreParse::kMalformed;
    out.error = absl::StrCat("unknown command ", code);
    return out;
  }
  const auto command = static_cast<StoreCommand>(code);
  FrameReader scan(buffered.substr(1), limits, nullptr);
  if (!WalkFields(command, scan, nullptr)) {
    if (!scan.error().empty()) {
      out.kind = StoreParse::kMalformed;
      out.error = scan.error();
    } else {
      out.need = 1 + scan.need();
    }
    return out;
  }
  out.kind = StoreParse::kComplete;
  out.consumed = 1 + scan.pos();
  out.request.command = command;
  FrameReader build(buffered.substr(1, scan.pos()), limits, &out.request);
  WalkFields(command, build, &out.request);
  return out;
}

void AppendStoreU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}

void AppendStoreBytes(std::string* out, absl::string_view bytes) {
  AppendStoreU64(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

}  // namespace wsync
