#ifndef WSYNC_TESTS_DAEMON_GROUP_SPEC_ROUND_TRIP_H_
#define WSYNC_TESTS_DAEMON_GROUP_SPEC_ROUND_TRIP_H_

// What the config tests and each engine kind's option tests check of a group spec.

#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/service/group_spec_proto.h"
#include "gtest/gtest.h"

namespace wsync {

inline BucketFormat LoadFormat(const GroupSpec& spec) {
  const auto* options = dynamic_cast<const SglangOptions*>(spec.engine_options.get());
  EXPECT_NE(options, nullptr) << "an sglang group carries SglangOptions";
  return options == nullptr ? BucketFormat::kFlattened : options->load_format();
}

// A spec read from a config file comes back equal through the admin API's proto and the state
// directory's JSON record.
inline void ExpectSurvivesProtoAndJson(const GroupSpec& spec, v1::GroupSpec* proto) {
  GroupSpecToProto(spec, proto);
  auto back = GroupSpecFromProto(*proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
  auto again = GroupSpecFromJson(GroupSpecToJson(spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, spec);
}

}  // namespace wsync

#endif  // WSYNC_TESTS_DAEMON_GROUP_SPEC_ROUND_TRIP_H_
