#include "client/cpp/wsync_c.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "nlohmann/json.hpp"

struct wsync_client {
  std::unique_ptr<wsync::Client> client;
};

struct wsync_push_stream {
  std::unique_ptr<wsync::PushStream> push;
};

namespace {

int Report(const absl::Status& status, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::string msg(status.message());
    std::strncpy(err, msg.c_str(), err_len - 1);
    err[err_len - 1] = '\0';
  }
  return static_cast<int>(status.code());
}

absl::Status ToRefs(const wsync_tensor* tensors, size_t count,
                    std::vector<wsync::TensorRef>* refs) {
  refs->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const wsync_tensor& t = tensors[i];
    auto dtype = wsync::ParseDType(t.dtype ? t.dtype : "");
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name ? t.name : "", "': ", dtype.status().message()));
    }
    refs->push_back(wsync::TensorRef{t.name ? t.name : "", *dtype,
                                     std::vector<int64_t>(t.shape, t.shape + t.ndim), t.data,
                                     t.nbytes});
  }
  return absl::OkStatus();
}

std::function<void(const wsync::PushProgress&)> ProgressFn(wsync_progress_fn progress, void* user) {
  if (progress == nullptr) return {};
  return [progress, user](const wsync::PushProgress& p) {
    progress(user, p.buckets_done, p.buckets_total, p.bytes_done, p.bytes_total, p.seconds);
  };
}

void WriteResult(const wsync::PushResult& result, char** result_json) {
  if (result_json == nullptr) return;
  nlohmann::json j = {{"update_id", result.update_id},
                      {"buckets", result.buckets},
                      {"bytes", result.bytes},
                      {"seconds", result.seconds},
                      {"gib_per_second", result.gib_per_second()},
                      {"buckets_pulled", result.buckets_pulled},
                      {"buckets_read_in_place", result.buckets_read_in_place},
                      {"bucket_rules", result.bucket_rules},
                      // wsync.v1.Timing's words; idle_before_seconds and broadcast_seconds are
                      // the deprecated names of idle_seconds and wire_seconds, still written.
                      {"daemon_timing",
                       {{"verify_seconds", result.verify_seconds},
                        {"idle_seconds", result.idle_seconds},
                        {"wire_seconds", result.wire_seconds},
                        {"answer_seconds", result.answer_seconds},
                        {"request_late_seconds", result.request_late_seconds},
                        {"first_launch_seconds", result.first_launch_seconds},
                        {"finish_seconds", result.finish_seconds},
                        {"idle_before_seconds", result.idle_seconds},
                        {"broadcast_seconds", result.wire_seconds}}}};
  if (result.has_wire_volume) {
    j["wire_volume"] = {{"sent_bytes", result.wire_sent_bytes},
                        {"dense_bytes", result.wire_dense_bytes},
                        {"changed_fraction", result.changed_fraction},
                        {"elements_compared", result.elements_compared},
                        {"elements_changed", result.elements_changed}};
  }
  j["engines"] = nlohmann::json::array();
  for (const auto& e : result.engines) {
    j["engines"].push_back({{"engine", e.engine},
                            {"ok", e.status.ok()},
                            {"message", std::string(e.status.message())},
                            {"engine_version", e.engine_version},
                            {"weights_check", e.weights_check},
                            {"needs_full_version", e.needs_full_version},
                            {"warnings", e.warnings},
                            {"relayed", e.relayed}});
  }
  std::string s = j.dump();
  *result_json = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(*result_json, s.c_str(), s.size() + 1);
}

}  // namespace

extern "C" {

const char* wsync_version(void) { return WSYNC_VERSION; }

int wsync_connect(const char* target, double timeout_s, wsync_client** out, char* err,
                  size_t err_len) {
  if (target == nullptr || out == nullptr) {
    return Report(absl::InvalidArgumentError("target and out are required"), err, err_len);
  }
  auto client = wsync::Client::Connect(target, absl::Seconds(timeout_s));
  if (!client.ok()) return Report(client.status(), err, err_len);
  *out = new wsync_client{std::move(*client)};
  return 0;
}

void wsync_close(wsync_client* client) { delete client; }

int wsync_open_session(wsync_client* client, int32_t device, const char* client_name, char* err,
                       size_t err_len) {
  return Report(client->client->OpenSession(device, client_name ? client_name : ""), err, err_len);
}

int wsync_close_session(wsync_client* client, char* err, size_t err_len) {
  return Report(client->client->CloseSession(), err, err_len);
}

int wsync_release_sources(wsync_client* client, uint32_t* closed, char* err, size_t err_len) {
  auto n = client->client->ReleaseSources();
  if (!n.ok()) return Report(n.status(), err, err_len);
  if (closed != nullptr) *closed = *n;
  return 0;
}

int wsync_declare_group(wsync_client* client, const char* group_json, int* formed, char* err,
                        size_t err_len) {
  auto declared = client->client->DeclareGroup(group_json ? group_json : "");
  if (!declared.ok()) return Report(declared.status(), err, err_len);
  if (formed != nullptr) *formed = *declared ? 1 : 0;
  return 0;
}

int wsync_forget_group(wsync_client* client, const char* name, char* err, size_t err_len) {
  absl::Status s = client->client->ForgetGroup(name ? name : "");
  return s.ok() ? 0 : Report(s, err, err_len);
}

uint64_t wsync_slot_bytes(const wsync_client* client) { return client->client->slot_bytes(); }

int wsync_push(wsync_client* client, const char* group, const char* version,
               const wsync_tensor* tensors, size_t count, wsync_progress_fn progress, void* user,
               char** result_json, char* err, size_t err_len) {
  std::vector<wsync::TensorRef> refs;
  if (absl::Status s = ToRefs(tensors, count, &refs); !s.ok()) return Report(s, err, err_len);
  auto result = client->client->Push(group ? group : "", version ? version : "", refs,
                                     ProgressFn(progress, user));
  if (!result.ok()) return Report(result.status(), err, err_len);
  WriteResult(*result, result_json);
  return 0;
}

int wsync_push_begin(wsync_client* client, const char* group, const char* version,
                     void* cuda_stream, wsync_progress_fn progress, void* user,
                     wsync_push_stream** out, char* err, size_t err_len) {
  return wsync_push_begin_flags(client, group, version, cuda_stream, 0, progress, user, out, err,
                                err_len);
}

int wsync_push_begin_flags(wsync_client* client, const char* group, const char* version,
                           void* cuda_stream, uint32_t flags, wsync_progress_fn progress,
                           void* user, wsync_push_stream** out, char* err, size_t err_len) {
  if (out == nullptr) return Report(absl::InvalidArgumentError("out is required"), err, err_len);
  if ((flags & ~(WSYNC_PUSH_PULL | WSYNC_PUSH_GROUP_DEFAULT)) != 0) {
    return Report(absl::InvalidArgumentError("unknown push flags"), err, err_len);
  }
  wsync::PushOptions options;
  options.progress = ProgressFn(progress, user);
  options.cuda_stream = cuda_stream;
  options.pull = (flags & WSYNC_PUSH_PULL) != 0;
  options.pull_as_group_prefers = (flags & WSYNC_PUSH_GROUP_DEFAULT) != 0;
  auto push =
      client->client->BeginPush(group ? group : "", version ? version : "", std::move(options));
  if (!push.ok()) return Report(push.status(), err, err_len);
  *out = new wsync_push_stream{std::move(*push)};
  return 0;
}

int wsync_push_begin_options(wsync_client* client, const char* group, const char* version,
                             const wsync_push_options* options, wsync_progress_fn progress,
                             void* user, wsync_push_stream** out, char* err, size_t err_len) {
  if (out == nullptr || options == nullptr) {
    return Report(absl::InvalidArgumentError("out and options are required"), err, err_len);
  }
  if ((options->flags & ~(WSYNC_PUSH_PULL | WSYNC_PUSH_GROUP_DEFAULT)) != 0) {
    return Report(absl::InvalidArgumentError("unknown push flags"), err, err_len);
  }
  wsync::PushOptions push_options;
  push_options.progress = ProgressFn(progress, user);
  push_options.cuda_stream = options->cuda_stream;
  push_options.pull = (options->flags & WSYNC_PUSH_PULL) != 0;
  push_options.pull_as_group_prefers = (options->flags & WSYNC_PUSH_GROUP_DEFAULT) != 0;
  push_options.pull_bucket_bytes = options->pull_bucket_bytes;
  push_options.tp_rank = options->tp_rank < 0 ? -1 : options->tp_rank;
  auto push = client->client->BeginPush(group ? group : "", version ? version : "",
                                        std::move(push_options));
  if (!push.ok()) return Report(push.status(), err, err_len);
  *out = new wsync_push_stream{std::move(*push)};
  return 0;
}

int wsync_push_add(wsync_push_stream* push, const wsync_tensor* tensors, size_t count,
                   uint64_t* released, char* err, size_t err_len) {
  return wsync_push_add_flags(push, tensors, nullptr, count, released, err, err_len);
}

int wsync_push_add_flags(wsync_push_stream* push, const wsync_tensor* tensors,
                         const uint32_t* flags, size_t count, uint64_t* released, char* err,
                         size_t err_len) {
  std::vector<wsync::TensorRef> refs;
  absl::Status s = ToRefs(tensors, count, &refs);
  if (s.ok() && flags != nullptr) {
    for (size_t i = 0; i < count; ++i) refs[i].temporary = (flags[i] & WSYNC_TENSOR_TEMPORARY) != 0;
  }
  if (s.ok()) s = push->push->Add(refs);
  if (released != nullptr) *released = push->push->released();
  return s.ok() ? 0 : Report(s, err, err_len);
}

int wsync_push_commit(wsync_push_stream* push, char** result_json, char* err, size_t err_len) {
  auto result = push->push->Commit();
  delete push;
  if (!result.ok()) return Report(result.status(), err, err_len);
  WriteResult(*result, result_json);
  return 0;
}

void wsync_push_abort(wsync_push_stream* push, const char* reason) {
  push->push->Abort(reason ? reason : "aborted by the caller");
  delete push;
}

void wsync_free_string(char* s) { std::free(s); }

}  // extern "C"
