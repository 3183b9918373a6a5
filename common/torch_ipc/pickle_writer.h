#ifndef WSYNC_COMMON_TORCH_IPC_PICKLE_WRITER_H_
#define WSYNC_COMMON_TORCH_IPC_PICKLE_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace wsync {

// Writes a Python pickle, protocol 3, one opcode per call, with no memo: nothing is shared or
// referenced twice, so every object is written where it is used. Protocol 3 because it is the
// first with a bytes opcode (protocol 2 pickles bytes through _codecs.encode, which SGLang's
// SafeUnpickler refuses) and the last before framing and STACK_GLOBAL, which no engine needs.
//
// The writer checks what a single opcode can get wrong (a GLOBAL line that is not a Python name,
// a length that does not fit its field, text that is not UTF-8) and refuses it with
// InvalidArgument. It does not check that opcodes make sense together: that is the caller's
// layout. Integers are written exactly as CPython's pickler writes them, so a pickle made here
// and one made by Python from the same objects are the same bytes.
class PickleWriter {
 public:
  // Starts the pickle with PROTO 3.
  PickleWriter();

  // GLOBAL: pushes module.name. The module must be dotted Python identifiers and the name one
  // identifier (ASCII): the opcode ends each at a newline, and a protocol-3 unpickler looks the
  // name up with a single getattr, so anything else would either cut the line or never resolve.
  absl::Status Global(absl::string_view module, absl::string_view name);

  void Mark();        // MARK: opens the items of a TUPLE, APPENDS or SETITEMS
  void Tuple();       // TUPLE: the items since the last MARK
  void EmptyTuple();  // EMPTY_TUPLE
  void Tuple1();      // TUPLE1, TUPLE2, TUPLE3: the top 1, 2 or 3 items
  void Tuple2();
  void Tuple3();
  // A tuple of ints in the shortest form: EMPTY_TUPLE, TUPLE1-3, or MARK ... TUPLE.
  void IntTuple(absl::Span<const int64_t> items);

  // BININT1 (0..255), BININT2 (256..65535), BININT (the rest of int32), else LONG1: the
  // shortest little-endian two's complement with room for the sign bit.
  void Int(int64_t value);
  void Uint(uint64_t value);

  // SHORT_BINBYTES below 256 bytes, else BINBYTES (u32 length); longer is refused.
  absl::Status Bytes(absl::string_view bytes);
  // BINUNICODE (u32 length) of UTF-8 text; text that is not UTF-8 (which Python would fail to
  // decode at load time) or longer than u32 is refused.
  absl::Status Unicode(absl::string_view text);

  void Bool(bool value);  // NEWTRUE / NEWFALSE
  void None();            // NONE

  void EmptyList();  // EMPTY_LIST
  void Appends();    // APPENDS: the items since the last MARK onto the list below it
  void EmptyDict();  // EMPTY_DICT
  void SetItems();   // SETITEMS: key, value pairs since the last MARK into the dict below it

  void Reduce();  // REDUCE: callable(*args)
  void NewObj();  // NEWOBJ: cls.__new__(cls, *args)
  void Build();   // BUILD: sets the state (a dict) of the object below it

  // The bytes so far (no STOP).
  const std::string& bytes() const { return out_; }
  // Appends STOP and hands over the pickle.
  std::string Finish() &&;

 private:
  void Op(uint8_t opcode) { out_.push_back(static_cast<char>(opcode)); }
  void Le(uint64_t value, int bytes);

  std::string out_;
};

// The LONG1 payload CPython writes for `value`: the fewest little-endian bytes whose two's
// complement reading is `value` (empty for 0). Exposed for tests.
std::string EncodeLong(int64_t value);
std::string EncodeLong(uint64_t value);

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool IsUtf8(absl::string_view text);

}  // namespace wsync

#endif  // WSYNC_COMMON_TORCH_IPC_PICKLE_WRITER_H_
