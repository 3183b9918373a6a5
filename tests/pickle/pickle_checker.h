#ifndef WSYNC_TESTS_PICKLE_PICKLE_CHECKER_H_
#define WSYNC_TESTS_PICKLE_PICKLE_CHECKER_H_

// A checker for the pickles common/torch_ipc/torch_ipc_pickle.h and the engines' payloads on it
// write, written apart from the writer so that the tests do not grade the writer by its own
// reading. It runs the pickle machine over
// kinds instead of values: every opcode must be one wsyncd uses (protocol 3, no memo), every
// MARK closed by the opcode that consumes it, every REDUCE, NEWOBJ, BUILD, APPENDS and SETITEMS
// given what it needs, every GLOBAL one of the allowed (module, name) pairs, and STOP last with
// exactly one object left. It also holds the writer to CPython's own choices (the shortest int
// opcode, minimal LONG1, SHORT_BINBYTES below 256 bytes, TUPLE1-3 for short tuples), so the
// bytes match what Python would write from the same objects.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// What a pickle that passed held.
struct CheckedPickle {
  std::vector<std::pair<std::string, std::string>> globals;  // in the order written
  size_t opcodes = 0;
  // The kind of the one object left at STOP: "list", "dict", "tuple", "object", "none"...
  std::string top_kind;
};

// The GLOBALs docs/engines/torch-ipc.md allows in a torch IPC pickle, as the tests read it:
// rebuild_cuda_tensor, torch.Tensor, torch.Size, torch.storage.TypedStorage, torch.<dtype> of
// the twelve dtypes wsync moves, and FlattenedTensorMetadata under SGLang's tensor_bucket or
// lmdeploy.utils.
bool IsAllowedTorchIpcGlobal(absl::string_view module, absl::string_view name);

// Checks `pickle` as described above; refuses with InvalidArgument naming the byte offset.
absl::StatusOr<CheckedPickle> CheckTorchIpcPickle(absl::string_view pickle);

}  // namespace wsync

#endif  // WSYNC_TESTS_PICKLE_PICKLE_CHECKER_H_
