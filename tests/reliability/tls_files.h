#ifndef WSYNC_TESTS_RELIABILITY_TLS_FILES_H_
#define WSYNC_TESTS_RELIABILITY_TLS_FILES_H_

// A self-signed certificate for localhost and 127.0.0.1 (openssl), with a trainer and an admin
// token file, for wsyncds that listen on TCP in the reliability suites.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/process_harness.h"

namespace wsync {

struct TlsFiles {
  std::string cert, key, token, admin_token;
};

inline absl::StatusOr<TlsFiles> MakeTlsFiles(const std::string& dir) {
  TlsFiles f{dir + "/cert.pem", dir + "/key.pem", dir + "/token", dir + "/admin-token"};
  if (!std::filesystem::exists("/usr/bin/openssl")) {
    return absl::FailedPreconditionError("/usr/bin/openssl is missing (deploy/install-deps.sh)");
  }
  auto [rc, out] = RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
       "-nodes", "-keyout", f.key, "-out", f.cert, "-days", "2", "-subj", "/CN=localhost",
       "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"},
      dir + "/openssl.log");
  if (rc != 0) return absl::InternalError(absl::StrCat("openssl: ", out));
  std::ofstream(f.token) << "trainer-secret-" << ::getpid() << "\n";
  std::ofstream(f.admin_token) << "admin-secret-" << ::getpid() << "\n";
  return f;
}

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_TLS_FILES_H_
