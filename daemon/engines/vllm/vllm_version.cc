#include "daemon/engines/vllm/vllm_version.h"

#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

// Reads the decimal number at the front of `*rest` and drops it; false when there is none.
bool TakeNumber(absl::string_view* rest, int* out) {
  size_t n = 0;
  while (n < rest->size() && n < 6 && absl::ascii_isdigit(static_cast<unsigned char>((*rest)[n]))) {
    ++n;
  }
  if (n == 0 || !absl::SimpleAtoi(rest->substr(0, n), out)) return false;
  rest->remove_prefix(n);
  return true;
}

}  // namespace

bool VllmVersion::AtLeast(int want_major, int want_minor, int want_patch) const {
  const auto have = std::make_tuple(major, minor, patch);
  const auto want = std::make_tuple(want_major, want_minor, want_patch);
  return have > want || (have == want && !prerelease);
}

absl::StatusOr<VllmVersion> ParseVllmVersion(absl::string_view text) {
  VllmVersion v;
  v.text = std::string(absl::StripAsciiWhitespace(text));
  absl::string_view rest = v.text;
  absl::ConsumePrefix(&rest, "v");
  if (!TakeNumber(&rest, &v.major) || !absl::ConsumePrefix(&rest, ".") ||
      !TakeNumber(&rest, &v.minor)) {
    return absl::InvalidArgumentError("not a version of the form MAJOR.MINOR[.PATCH]");
  }
  if (absl::ConsumePrefix(&rest, ".") && !TakeNumber(&rest, &v.patch)) {
    // "0.22.dev3": no patch, a dev build of 0.22.0.
    v.prerelease = true;
    return v;
  }
  // What follows the release: a local label ("+cu130") leaves it a release; anything else
  // ("rc1", ".dev41+g...", "a1", "b2") is a pre-release.
  if (!rest.empty() && rest.front() != '+') v.prerelease = true;
  return v;
}

absl::StatusOr<VllmVariant> VllmVariantFor(const VllmVersion& version) {
  if (!version.AtLeast(0, 17, 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vLLM ", version.text, " has no CUDA IPC weight transfer; wsyncd needs vLLM >= ",
        kVllmMinIpcVersion, " (started with --weight-transfer-config '{\"backend\": \"ipc\"}')"));
  }
  VllmVariant v;
  if (!version.AtLeast(0, 22, 0)) {
    v.name = "ipc-func-args";
    v.entry_form = VllmEntryForm::kFuncArgs;
    return v;
  }
  v.entry_form = VllmEntryForm::kArgsOnly;
  v.session_routes = true;
  v.packed_ipc = true;
  v.chunk_flags = true;
  if (!version.AtLeast(0, 29, 0)) {
    v.name = "ipc-args-session";
    return v;
  }
  v.name = "ipc-args-session-version";
  v.finish_weight_version = true;
  return v;
}

}  // namespace wsync
