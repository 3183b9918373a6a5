#include "common/torch_ipc/pickle_writer.h"

#include <array>
#include <limits>

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

// Opcodes, as pickletools names them (Python's Lib/pickletools.py documents each).
constexpr uint8_t kProto = 0x80;
constexpr uint8_t kGlobal = 'c';
constexpr uint8_t kMark = '(';
constexpr uint8_t kTuple = 't';
constexpr uint8_t kEmptyTuple = ')';
constexpr uint8_t kTuple1 = 0x85;
constexpr uint8_t kTuple2 = 0x86;
constexpr uint8_t kTuple3 = 0x87;
constexpr uint8_t kBinInt1 = 'K';
constexpr uint8_t kBinInt2 = 'M';
constexpr uint8_t kBinInt = 'J';
constexpr uint8_t kLong1 = 0x8a;
constexpr uint8_t kShortBinBytes = 'C';
constexpr uint8_t kBinBytes = 'B';
constexpr uint8_t kBinUnicode = 'X';
constexpr uint8_t kNewTrue = 0x88;
constexpr uint8_t kNewFalse = 0x89;
constexpr uint8_t kNone = 'N';
constexpr uint8_t kEmptyList = ']';
constexpr uint8_t kAppends = 'e';
constexpr uint8_t kEmptyDict = '}';
constexpr uint8_t kSetItems = 'u';
constexpr uint8_t kReduce = 'R';
constexpr uint8_t kNewObj = 0x81;
constexpr uint8_t kBuild = 'b';
constexpr uint8_t kStop = '.';

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

bool IsIdentifierStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool IsIdentifierChar(char c) { return IsIdentifierStart(c) || (c >= '0' && c <= '9'); }

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !IsIdentifierStart(s[0])) return false;
  for (char c : s) {
    if (!IsIdentifierChar(c)) return false;
  }
  return true;
}

bool IsDottedIdentifier(absl::string_view s) {
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!IsIdentifier(s.substr(start, dot == absl::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == absl::string_view::npos) return true;
    start = dot + 1;
  }
}

// The nine-byte two's complement of a value (enough for any int64 or uint64), cut to the fewest
// bytes that still read back the same: a top byte may go while it only repeats the sign of the
// byte below it.
std::string MinimalTwosComplement(std::array<uint8_t, 9> b) {
  size_t n = b.size();
  while (n > 1) {
    const bool below_negative = (b[n - 2] & 0x80) != 0;
    if ((b[n - 1] == 0x00 && !below_negative) || (b[n - 1] == 0xff && below_negative)) {
      --n;
    } else {
      break;
    }
  }
  return std::string(reinterpret_cast<const char*>(b.data()), n);
}

}  // namespace

std::string EncodeLong(int64_t value) {
  if (value == 0) return "";  // CPython writes 0 as no bytes at all
  std::array<uint8_t, 9> b;
  const uint64_t bits = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(bits >> (8 * i));
  b[8] = value < 0 ? 0xff : 0x00;
  return MinimalTwosComplement(b);
}

std::string EncodeLong(uint64_t value) {
  if (value == 0) return "";
  std::array<uint8_t, 9> b;
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(value >> (8 * i));
  b[8] = 0x00;
  return MinimalTwosComplement(b);
}

bool IsUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    int extra;
    uint32_t code;
    uint32_t least;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, code = c & 0x1f, least = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, code = c & 0x0f, least = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, code = c & 0x07, least = 0x10000;
    } else {
      return false;  // a continuation byte first, or 0xf8..0xff
    }
    if (text.size() - i - 1 < static_cast<size_t>(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const uint8_t next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < least || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += 1 + extra;
  }
  return true;
}

PickleWriter::PickleWriter() {
  Op(kProto);
  Op(3);
}

void PickleWriter::Le(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>(value >> (8 * i)));
}

absl::Status PickleWriter::Global(absl::string_view module, absl::string_view name) {
  if (!IsDottedIdentifier(module)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle GLOBAL module '", module, "' is not a dotted Python name"));
  }
  if (!IsIdentifier(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle GLOBAL name '", name, "' is not a Python identifier"));
  }
  Op(kGlobal);
  absl::StrAppend(&out_, module, "\n", name, "\n");
  return absl::OkStatus();
}

void PickleWriter::Mark() { Op(kMark); }
void PickleWriter::Tuple() { Op(kTuple); }
void PickleWriter::EmptyTuple() { Op(kEmptyTuple); }
void PickleWriter::Tuple1() { Op(kTuple1); }
void PickleWriter::Tuple2() { Op(kTuple2); }
void PickleWriter::Tuple3() { Op(kTuple3); }

void PickleWriter::IntTuple(absl::Span<const int64_t> items) {
  if (items.empty()) return EmptyTuple();
  const bool short_form = items.size() <= 3;
  if (!short_form) Mark();
  for (int64_t v : items) Int(v);
  switch (items.size()) {
    case 1:
      return Tuple1();
    case 2:
      return Tuple2();
    case 3:
      return Tuple3();
    default:
      return Tuple();
  }
}

void PickleWriter::Int(int64_t value) {
  if (value >= 0 && value <= 0xff) {
    Op(kBinInt1);
    Le(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value <= 0xffff) {
    Op(kBinInt2);
    Le(static_cast<uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<int32_t>::min() &&
             value <= std::numeric_limits<int32_t>::max()) {
    Op(kBinInt);
    Le(static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
  } else {
    const std::string payload = EncodeLong(value);
    Op(kLong1);
    Le(payload.size(), 1);
    out_.append(payload);
  }
}

void PickleWriter::Uint(uint64_t value) {
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Int(static_cast<int64_t>(value));
  }
  const std::string payload = EncodeLong(value);
  Op(kLong1);
  Le(payload.size(), 1);
  out_.append(payload);
}

absl::Status PickleWriter::Bytes(absl::string_view bytes) {
  if (bytes.size() < 256) {
    Op(kShortBinBytes);
    Le(bytes.size(), 1);
  } else if (bytes.size() <= kMaxU32) {
    Op(kBinBytes);
    Le(bytes.size(), 4);
  } else {
    // BINBYTES8 exists only from protocol 4.
    return absl::InvalidArgumentError(
        absl::StrCat("pickle bytes of ", bytes.size(), " bytes exceed protocol 3's u32 length"));
  }
  out_.append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status PickleWriter::Unicode(absl::string_view text) {
  if (text.size() > kMaxU32) {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle str of ", text.size(), " bytes exceeds protocol 3's u32 length"));
  }
  if (!IsUtf8(text)) {
    return absl::InvalidArgumentError("pickle str is not UTF-8 (Python could not decode it)");
  }
  Op(kBinUnicode);
  Le(text.size(), 4);
  out_.append(text.data(), text.size());
  return absl::OkStatus();
}

void PickleWriter::Bool(bool value) { Op(value ? kNewTrue : kNewFalse); }
void PickleWriter::None() { Op(kNone); }
void PickleWriter::EmptyList() { Op(kEmptyList); }
void PickleWriter::Appends() { Op(kAppends); }
void PickleWriter::EmptyDict() { Op(kEmptyDict); }
void PickleWriter::SetItems() { Op(kSetItems); }
void PickleWriter::Reduce() { Op(kReduce); }
void PickleWriter::NewObj() { Op(kNewObj); }
void PickleWriter::Build() { Op(kBuild); }

std::string PickleWriter::Finish() && {
  Op(kStop);
  return std::move(out_);
}

}  // namespace wsync
