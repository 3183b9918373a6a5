#include "common/secret_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::string value(absl::StripAsciiWhitespace(text.str()));
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is empty"));
  return value;
}

}  // namespace wsync
