#include "common/host/shm_names.h"

#include <unistd.h>

#include <atomic>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

constexpr absl::string_view kPrefix = "/wsync-";
constexpr size_t kMaxTagBytes = 32;

// Consumes one or more digits from the front of `s`.
bool ConsumeDigits(absl::string_view& s) {
  size_t n = 0;
  while (n < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[n]))) ++n;
  s.remove_prefix(n);
  return n > 0;
}

}  // namespace

std::string SlotShmName(int device) {
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  return absl::StrFormat("%s%d-d%d-%u-%08x", kPrefix, static_cast<int>(::getpid()), device,
                         counter.fetch_add(1), rd());
}

absl::Status CheckSessionTag(absl::string_view tag) {
  bool ok = !tag.empty() && tag.size() <= kMaxTagBytes;
  for (char c : tag) ok = ok && absl::ascii_isalnum(static_cast<unsigned char>(c));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "a session tag is 1-32 letters and digits, as wsyncd hands it out in the OpenSession reply");
}

std::string SourceShmName(absl::string_view tag) {
  static std::atomic<uint64_t> counter{1};
  return absl::StrFormat("%s%d-src-%s-%u", kPrefix, static_cast<int>(::getpid()), tag,
                         counter.fetch_add(1));
}

bool IsSourceShmNameOf(absl::string_view name, absl::string_view tag) {
  if (!CheckSessionTag(tag).ok() || !absl::ConsumePrefix(&name, kPrefix)) return false;
  if (!ConsumeDigits(name) || !absl::ConsumePrefix(&name, "-src-")) return false;
  if (!absl::ConsumePrefix(&name, tag) || !absl::ConsumePrefix(&name, "-")) return false;
  return ConsumeDigits(name) && name.empty();
}

}  // namespace wsync
