#include "tests/pickle/pickle_checker.h"

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace wsync {
namespace {

// What a stack slot holds, as far as the structure goes.
enum class Kind { kGlobal, kInt, kBytes, kStr, kBool, kNone, kTuple, kList, kDict, kObject, kNew };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kGlobal:
      return "global";
    case Kind::kInt:
      return "int";
    case Kind::kBytes:
      return "bytes";
    case Kind::kStr:
      return "str";
    case Kind::kBool:
      return "bool";
    case Kind::kNone:
      return "none";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return "object";
    case Kind::kNew:
      return "new object";
  }
  return "?";
}

constexpr const char* kDtypes[] = {"bool",    "uint8",   "int8",          "int16",
                                   "int32",   "int64",   "float16",       "bfloat16",
                                   "float32", "float64", "float8_e4m3fn", "float8_e5m2"};

// Strict UTF-8, as Python's decoder reads BINUNICODE (surrogates aside, which wsync never has).
bool Utf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[len] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
    i += len;
  }
  return true;
}

class Machine {
 public:
  explicit Machine(absl::string_view in) : in_(in) {}

  absl::StatusOr<CheckedPickle> Run() {
    if (in_.size() < 2 || static_cast<uint8_t>(in_[0]) != 0x80 || in_[1] != 3) {
      return Fail(0, "does not start with PROTO 3");
    }
    pos_ = 2;
    result_.opcodes = 1;
    while (pos_ < in_.size()) {
      const size_t at = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      ++result_.opcodes;
      absl::Status step = Step(at, op);
      if (!step.ok()) return step;
      if (op == '.') return result_;
    }
    return Fail(in_.size(), "ends without STOP");
  }

 private:
  absl::Status Fail(size_t at, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("pickle byte ", at, ": ", why));
  }

  bool Take(size_t n, absl::string_view* out) {
    if (in_.size() - pos_ < n) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool TakeLe(size_t n, uint64_t* value) {
    absl::string_view b;
    if (!Take(n, &b)) return false;
    *value = 0;
    for (size_t i = 0; i < n; ++i) *value |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
    return true;
  }

  std::vector<Kind>& Top() { return frames_.back(); }
  void Push(Kind k) { Top().push_back(k); }

  // Pops the frame MARK opened, for the opcode at `at` that consumes it.
  absl::Status PopMark(size_t at, absl::string_view op, std::vector<Kind>* items) {
    if (frames_.size() < 2) return Fail(at, absl::StrCat(op, " without a MARK"));
    *items = std::move(frames_.back());
    frames_.pop_back();
    return absl::OkStatus();
  }

  absl::Status Need(size_t at, absl::string_view op, size_t n) {
    if (Top().size() < n) {
      return Fail(at,
                  absl::StrCat(op, " needs ", n, " items above the last MARK, has ", Top().size()));
    }
    return absl::OkStatus();
  }

  absl::Status Global(size_t at) {
    const size_t module_end = in_.find('\n', pos_);
    if (module_end == absl::string_view::npos) return Fail(at, "GLOBAL module line not ended");
    const size_t name_end = in_.find('\n', module_end + 1);
    if (name_end == absl::string_view::npos) return Fail(at, "GLOBAL name line not ended");
    const absl::string_view module = in_.substr(pos_, module_end - pos_);
    const absl::string_view name = in_.substr(module_end + 1, name_end - module_end - 1);
    pos_ = name_end + 1;
    if (!IsAllowedTorchIpcGlobal(module, name)) {
      return Fail(at, absl::StrCat("GLOBAL ", absl::CEscape(module), " ", absl::CEscape(name),
                                   " is not allowed"));
    }
    result_.globals.emplace_back(module, name);
    Push(Kind::kGlobal);
    return absl::OkStatus();
  }

  // LONG1 as CPython writes it: only for ints outside int32 (which need 5 bytes or more) and in
  // the fewest bytes, so the top byte is never a bare sign extension of the one below.
  absl::Status Long1(size_t at) {
    uint64_t n;
    absl::string_view b;
    if (!TakeLe(1, &n) || !Take(n, &b)) return Fail(at, "LONG1 cut short");
    if (n < 5 || n > 9) return Fail(at, absl::StrCat("LONG1 of ", n, " bytes"));
    const uint8_t last = static_cast<uint8_t>(b[n - 1]);
    const bool below_negative = (static_cast<uint8_t>(b[n - 2]) & 0x80) != 0;
    if ((last == 0x00 && !below_negative) || (last == 0xff && below_negative)) {
      return Fail(at, "LONG1 not minimal");
    }
    Push(Kind::kInt);
    return absl::OkStatus();
  }

  absl::Status Step(size_t at, uint8_t op) {
    uint64_t v;
    absl::string_view b;
    std::vector<Kind> items;
    switch (op) {
      case 0x80:
        return Fail(at, "PROTO after the start");
      case 'c':
        return Global(at);
      case '(':
        frames_.emplace_back();
        return absl::OkStatus();
      case 't':
        if (absl::Status s = PopMark(at, "TUPLE", &items); !s.ok()) return s;
        if (items.size() < 4) return Fail(at, "MARK ... TUPLE for fewer than 4 items");
        Push(Kind::kTuple);
        return absl::OkStatus();
      case ')':
        Push(Kind::kTuple);
        return absl::OkStatus();
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = op - 0x84;
        if (absl::Status s = Need(at, absl::StrCat("TUPLE", n), n); !s.ok()) return s;
        Top().resize(Top().size() - n);
        Push(Kind::kTuple);
        return absl::OkStatus();
      }
      case 'K':
        if (!TakeLe(1, &v)) return Fail(at, "BININT1 cut short");
        Push(Kind::kInt);
        return absl::OkStatus();
      case 'M':
        if (!TakeLe(2, &v)) return Fail(at, "BININT2 cut short");
        if (v < 256) return Fail(at, "BININT2 for an int BININT1 holds");
        Push(Kind::kInt);
        return absl::OkStatus();
      case 'J':
        if (!TakeLe(4, &v)) return Fail(at, "BININT cut short");
        if (v <= 0xffff) return Fail(at, "BININT for an int BININT1/2 holds");
        Push(Kind::kInt);
        return absl::OkStatus();
      case 0x8a:
        return Long1(at);
      case 'C':
        if (!TakeLe(1, &v) || !Take(v, &b)) return Fail(at, "SHORT_BINBYTES cut short");
        Push(Kind::kBytes);
        return absl::OkStatus();
      case 'B':
        if (!TakeLe(4, &v) || !Take(v, &b)) return Fail(at, "BINBYTES cut short");
        if (v < 256) return Fail(at, "BINBYTES for bytes SHORT_BINBYTES holds");
        Push(Kind::kBytes);
        return absl::OkStatus();
      case 'X':
        if (!TakeLe(4, &v) || !Take(v, &b)) return Fail(at, "BINUNICODE cut short");
        if (!Utf8(b)) return Fail(at, "BINUNICODE not UTF-8");
        Push(Kind::kStr);
        return absl::OkStatus();
      case 0x88:
      case 0x89:
        Push(Kind::kBool);
        return absl::OkStatus();
      case 'N':
        Push(Kind::kNone);
        return absl::OkStatus();
      case ']':
        Push(Kind::kList);
        return absl::OkStatus();
      case '}':
        Push(Kind::kDict);
        return absl::OkStatus();
      case 'e':
        if (absl::Status s = PopMark(at, "APPENDS", &items); !s.ok()) return s;
        if (Top().empty() || Top().back() != Kind::kList)
          return Fail(at, "APPENDS not onto a list");
        return absl::OkStatus();
      case 'u':
        if (absl::Status s = PopMark(at, "SETITEMS", &items); !s.ok()) return s;
        if (Top().empty() || Top().back() != Kind::kDict)
          return Fail(at, "SETITEMS not into a dict");
        if (items.size() % 2 != 0) return Fail(at, "SETITEMS with a key and no value");
        for (size_t i = 0; i < items.size(); i += 2) {
          if (items[i] != Kind::kStr) {
            return Fail(at, absl::StrCat("dict key is a ", KindName(items[i]), ", not a str"));
          }
        }
        return absl::OkStatus();
      case 'R':
      case 0x81: {
        const char* name = op == 'R' ? "REDUCE" : "NEWOBJ";
        if (absl::Status s = Need(at, name, 2); !s.ok()) return s;
        const Kind args = Top()[Top().size() - 1];
        const Kind callable = Top()[Top().size() - 2];
        if (args != Kind::kTuple || callable != Kind::kGlobal) {
          return Fail(at, absl::StrCat(name, " of a ", KindName(callable), " with a ",
                                       KindName(args), ", not a GLOBAL with a tuple"));
        }
        Top().resize(Top().size() - 2);
        Push(op == 'R' ? Kind::kObject : Kind::kNew);
        return absl::OkStatus();
      }
      case 'b':
        if (absl::Status s = Need(at, "BUILD", 2); !s.ok()) return s;
        if (Top()[Top().size() - 1] != Kind::kDict || Top()[Top().size() - 2] != Kind::kNew) {
          return Fail(at, "BUILD not a state dict onto a NEWOBJ object");
        }
        Top().pop_back();
        return absl::OkStatus();
      case '.':
        if (pos_ != in_.size()) return Fail(at, "bytes after STOP");
        if (frames_.size() != 1) return Fail(at, "STOP inside an unclosed MARK");
        if (Top().size() != 1) {
          return Fail(at, absl::StrCat("STOP with ", Top().size(), " objects, not 1"));
        }
        result_.top_kind = KindName(Top()[0]);
        return absl::OkStatus();
      case 'p':
      case 'q':
      case 'r':
      case 'g':
      case 'h':
      case 'j':
      case 0x94:
        return Fail(at, absl::StrFormat("memo opcode 0x%02x", op));
      default:
        return Fail(at, absl::StrFormat("opcode 0x%02x is not one wsyncd writes", op));
    }
  }

  absl::string_view in_;
  size_t pos_ = 0;
  std::vector<std::vector<Kind>> frames_{{}};
  CheckedPickle result_;
};

}  // namespace

bool IsAllowedTorchIpcGlobal(absl::string_view module, absl::string_view name) {
  if (module == "torch.multiprocessing.reductions" && name == "rebuild_cuda_tensor") return true;
  if (module == "torch.storage" && name == "TypedStorage") return true;
  if ((module == "sglang.srt.weight_sync.tensor_bucket" || module == "lmdeploy.utils") &&
      name == "FlattenedTensorMetadata") {
    return true;
  }
  if (module != "torch") return false;
  if (name == "Tensor" || name == "Size") return true;
  for (const char* dtype : kDtypes) {
    if (name == dtype) return true;
  }
  return false;
}

absl::StatusOr<CheckedPickle> CheckTorchIpcPickle(absl::string_view pickle) {
  return Machine(pickle).Run();
}

}  // namespace wsync
